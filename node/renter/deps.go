package renter

import (
	"context"
	"io"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Book is the renter's view of the node's book (node/book's Market).
type Book interface {
	// Snapshot is the book as it stands, immutable.
	Snapshot() *market.Snapshot
	// MatcherFor is the matcher that weighs a request as it asks.
	MatcherFor(api.BidRequest) *market.Matcher
	// Synced counts the book syncs completed; SyncPeers are the peers a
	// book can be synced from now.
	Synced() int64
	SyncPeers() []peer.ID
	// FetchBook syncs p's book now.
	FetchBook(ctx context.Context, p peer.ID)
	// Want fetches, from up to n peers in the background, the offers of
	// the shards this node does not follow, each fetch within use; it
	// returns how many it began.
	Want(ctx context.Context, shards []string, n int, use func() (func(), error)) int
}

// Attester is the renter's view of trust (node/trust's Challenger): a
// provider's attestation, challenged now and judged against the offer
// this node's book holds; err only when no answer came.
type Attester interface {
	Attest(ctx context.Context, p peer.ID) (attest.Verdict, error)
}

// Dealer is the renter's view: find providers, challenge them, lease
// from them and follow their jobs.
type Dealer interface {
	Locate(ctx context.Context, p peer.ID) error
	Relocate(ctx context.Context, p peer.ID)
	Challenge(ctx context.Context, p peer.ID) (p2p.Answer, error)
	RequestLease(ctx context.Context, p peer.ID, req *pb.LeaseRequest) (*pb.LeaseReply, error)
	AttachJob(ctx context.Context, p peer.ID, att *pb.JobAttach) (network.Stream, error)
	ReadyImage(ctx context.Context, p peer.ID, ref string, deadline time.Duration, progress func(*pb.ImageProgress)) (*pb.ImageReady, error)
	SendImage(ctx context.Context, p peer.ID, id string, up *pb.ImageUpload, deadline time.Duration, write func(w io.Writer, have int) error) (*pb.ImageReady, error)
	Upload(ctx context.Context, p peer.ID, sum []byte, size int64, open func(offset int64) (io.ReadCloser, error)) (int64, error)
	Download(ctx context.Context, p peer.ID, lease string, index int, offset int64, w io.Writer) (int64, []byte, error)
}
