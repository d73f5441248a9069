// Package views turns what a node holds (market offers, candidates and
// quotes, reputation scores, lease records, receipts and the ledger)
// into the local API's views (node/api), and reads the API's queries
// (GPU names through the catalog, form factors, offer filters) into
// market terms. It is pure: no state, no network; what it shows it is
// given.
//
// It may import market, node/api, node/records and node/config (the
// weekly windows' day names); nothing else of node's.
package views
