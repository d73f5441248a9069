// Package api is the node's local HTTP API, served on 127.0.0.1 only: the
// JSON endpoints under /v1 (status, peers, the market, matching, bids,
// leases, receipts, rentals), the server-sent event streams the dashboard
// reads (/v1/events, /v1/leases/{id}/output), GET /metrics (Prometheus),
// the dashboard itself under /ui/ with its sign-in.
//
// Node is the one interface the CLI and the dashboard talk to: the node
// implements it in process and Client over HTTP, and package apitest is
// the suite both pass. The JSON types here are the API's contract; the
// server reads them from a Backend so that api never imports node (node
// imports api). A failure's kind (package fault) is its status, in one
// table (statuses), which Client reads back into the same kind.
//
// api imports the standard library, the Prometheus client, node/ui (the
// dashboard's embedded files) and node/fault only; it must never import
// node, p2p or cmd.
package api
