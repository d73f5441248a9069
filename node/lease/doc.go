// Package lease is the provider's side of a lease, from the request to
// the receipt: admission (check, reserve in the calendars, sign and
// store, commit or release), the live leases and their jobs in the
// executor, the job stream with its beats, holds and a renter's grace,
// extensions, sessions (exec, port-forward), the images renters pull or
// send within their budgets, staged uploads and packed outputs, and the
// lease's end with its receipt.
//
// One goroutine owns the lease table (Owner, through internal/owner);
// admission does its I/O outside it. lease imports market, attest, p2p
// (the stream protocols it serves), internal/owner, node/clock,
// node/config, node/executor, node/jobstream, node/metrics, node/offer,
// node/records, node/transfer and node/views; never node.
package lease
