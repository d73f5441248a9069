// Command twonodes embeds idlegrid: it creates two node repositories in a
// temporary folder, starts both in this process on loopback with the second
// bootstrapped from the first, waits until they share a gossip mesh, and
// prints what each sees. It is the smallest program that uses package node
// the way cmd/idlegrid does.
//
// It imports node, as only cmd and examples may; nothing imports it.
package main
