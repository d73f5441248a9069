package node

import "github.com/idlegrid/idlegrid/node/renter"

// Names of package renter, for the tests whose renter is a *Node named
// renter, which hides the package.
var (
	buildBid = renter.BuildBid
	newID    = renter.NewID
	short    = renter.Short
)

const (
	stageLocate       = renter.StageLocate
	stageNegotiate    = renter.StageNegotiate
	reattachFor       = renter.ReattachFor
	reattachEvery     = renter.ReattachEvery
	settleFor         = renter.SettleFor
	settleEvery       = renter.SettleEvery
	maxRentCandidates = renter.MaxRentCandidates
)

// dialLease is renter.DialLease.
var dialLease = renter.DialLease
