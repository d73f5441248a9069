// Package offer builds a provider's offer from its configuration: the
// GPUs it may sell now out of an inventory (Sellable), the signed-to-be
// offer itself (Build) and its prices under the provider's policy
// (Price: fixed, or following the comparable offers of a book snapshot).
//
// It is pure: no network, no store, no clock of its own (every call is
// given now). It may import market, attest (inventories) and
// node/config; nothing else of node's.
package offer
