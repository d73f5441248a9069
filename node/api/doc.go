// Package api is the node's local HTTP API, served on 127.0.0.1 only: the
// JSON endpoints under /v1 (status, peers, the market, matching, bids,
// leases, receipts, rentals), the server-sent event streams the dashboard
// reads (/v1/events, /v1/leases/{id}/output), GET /metrics (Prometheus),
// the dashboard itself under /ui/ with its sign-in, and the client the CLI
// uses. The JSON types here are the API's contract; the server reads them
// from a Backend so that api never imports node (node imports api).
//
// api imports the standard library, the Prometheus client and node/ui (the
// dashboard's embedded files) only; it must never import node, p2p or cmd.
package api
