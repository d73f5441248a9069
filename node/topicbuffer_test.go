package node

import (
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node/config"
)

// A node keeps in its book every offer its validator accepted, however
// fast they come: pubsub drops what a full subscription cannot take, and
// an offer dropped there was already marked seen and relayed, so no copy
// brings it back. (At pubsub's default buffer of 32, a burst of 40 lost
// a few now and then.)
func TestABurstOfAcceptedOffersAllReachTheBook(t *testing.T) {
	const burst = 100 // within the strangers' share of one peer, past pubsub's default 32
	n := startNode(t, testRepo(t, "n", nil), Options{})
	cfg := config.DefaultConfig(config.ProfileProvider).Provider
	cfg.GPUs = []config.GPUConfig{{Model: "H100", Count: 8, VRAMGiB: 80, ComputeCapability: "9.0"}}
	before := n.market.Validator.Accepted.Load()
	publishStrangers(t, n, cfg, burst)
	accepted := n.market.Validator.Accepted.Load() - before
	if accepted < burst {
		t.Fatalf("the validator accepted %d of %d offers; the test needs all of them", accepted, burst)
	}
	waitFor(t, 10*time.Second, "the book holds every accepted offer", func() bool { return n.market.Snapshot().Len() == burst })
}
