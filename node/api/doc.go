// Package api is the node's local HTTP API, served on 127.0.0.1 only:
// GET /v1/status, GET /v1/peers and GET /metrics (Prometheus), and the
// client the CLI uses to read them. The JSON types here are the API's
// contract; the server reads them from a Backend so that api never imports
// node (node imports api).
//
// api imports the standard library and the Prometheus client only; it must
// never import node, p2p or cmd.
package api
