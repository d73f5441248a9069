package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// Renter defaults.
const (
	defaultRentCandidates = 5
	defaultGather         = 15 * time.Second
	// cancelWait bounds how long a cancelled rental waits for the receipt.
	cancelWait = 45 * time.Second
)

// RentOutput receives a rental's job output and its progress lines.
type RentOutput struct {
	Stdout, Stderr io.Writer
	// Progress gets one line per step; nil drops them.
	Progress func(line string)
}

func (o RentOutput) say(format string, a ...any) {
	if o.Progress != nil {
		o.Progress(fmt.Sprintf(format, a...))
	}
}

// Rent does the whole rental: it gathers offers until some fit, ranks
// them, challenges the best provider's attestation, proposes a lease and
// moves on to the next candidate on a refusal; then it follows the job,
// streaming its output, verifying its telemetry, and countersigns the
// receipt when it agrees with what it verified. Cancelling ctx cancels
// the lease and still waits for the receipt. A node closing meanwhile
// returns ErrClosed and leaves the lease running: the node follows it
// again when it restarts.
func (n *Node) Rent(ctx context.Context, req api.RentRequest, out RentOutput) (api.RentResult, error) {
	t0 := time.Now()
	res := api.RentResult{Tried: []api.Attempt{}}
	done, err := n.use()
	if err != nil {
		return res, err
	}
	defer done()
	b, err := BuildBid(req.BidRequest, n.host.ID(), t0)
	if err != nil {
		return res, err
	}
	if b.Image == "" {
		return res, api.BadRequest{Err: errors.New("image: empty; name the container image to run")}
	}
	cands, err := n.gather(ctx, b, req, out)
	res.Timings.Discover = time.Since(t0)
	if err != nil {
		return res, err
	}
	tries := req.Candidates
	if tries <= 0 {
		tries = defaultRentCandidates
	}
	tm := time.Now()
	cands = n.market.matcher.Match(n.market.book.Snapshot(), b, tm, tries).Candidates
	res.Timings.Match = time.Since(tm)
	for _, c := range cands {
		if err := n.disc.Locate(ctx, c.Issuer); err != nil {
			res.Tried = append(res.Tried, api.Attempt{Provider: c.Issuer.String(), Stage: "locate", Reason: err.Error()})
			out.say("%s: not reachable: %v; trying the next", short(c.Issuer), err)
			continue
		}
		if !req.SkipAttest {
			ta := time.Now()
			v, err := n.Attest(ctx, api.AttestRequest{Peer: c.Issuer.String()})
			res.Timings.Attest += time.Since(ta)
			if reason := attestProblem(v, err); reason != "" {
				res.Tried = append(res.Tried, api.Attempt{Provider: c.Issuer.String(), Stage: "attest", Reason: reason})
				out.say("%s: attestation refused: %s; trying the next", short(c.Issuer), reason)
				continue
			}
			out.say("%s: attestation verified (%s)", short(c.Issuer), v.Offer)
		}
		tn := time.Now()
		cs, l, reason := n.propose(ctx, b, c, req)
		res.Timings.Negotiate += time.Since(tn)
		if cs == nil {
			res.Tried = append(res.Tried, api.Attempt{Provider: c.Issuer.String(), Stage: "negotiate", Reason: reason})
			out.say("%s: lease refused: %s; trying the next", short(c.Issuer), reason)
			continue
		}
		out.say("lease %s accepted by %s: %d × %s at %s/GPU-hour for %s", l.Id, short(c.Issuer), l.GpuCount, market.TierName(l.Tier), FormatPrice(l.PriceMicros), secs(l.DurationSeconds))
		accepted := time.Now()
		f := &follow{n: n, lease: l, cs: cs, out: out, t0: t0, accepted: accepted}
		if err := f.run(ctx); err != nil {
			return res, err
		}
		res.Lease, res.Receipt, res.Timings.Start, res.Timings.FirstOutput = leaseView(f.rec), f.receipt, f.firstOutput.Sub(accepted), f.firstOutput.Sub(t0)
		if f.firstOutput.IsZero() {
			res.Timings.Start, res.Timings.FirstOutput = 0, 0
		}
		return res, nil
	}
	if len(res.Tried) == 0 {
		return res, fmt.Errorf("%w: no candidate", ErrNoProvider)
	}
	last := res.Tried[len(res.Tried)-1]
	return res, fmt.Errorf("%w: %d candidates tried; last, %s at %s: %s", ErrNoProvider, len(res.Tried), last.Provider[max(0, len(last.Provider)-8):], last.Stage, last.Reason)
}

// gather waits until the book holds offers that fit b, saying how many
// it holds, or until the gather time runs out.
func (n *Node) gather(ctx context.Context, b *pb.Bid, req api.RentRequest, out RentOutput) ([]market.Candidate, error) {
	wait := time.Duration(req.GatherMillis) * time.Millisecond
	if wait <= 0 {
		wait = defaultGather
	}
	deadline := time.Now().Add(wait)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastSaid := time.Time{}
	for {
		now := time.Now()
		snap := n.market.book.Snapshot()
		if c := n.market.matcher.Match(snap, b, now, 1).Candidates; len(c) > 0 {
			out.say("gathering offers: %d in the book, some fit", snap.Len())
			return c, nil
		}
		if now.After(deadline) {
			return nil, fmt.Errorf("%w: nothing fits after %s: %s", ErrNoProvider, wait, n.market.matcher.Explain(snap, b, now).String())
		}
		if now.Sub(lastSaid) >= time.Second {
			out.say("gathering offers: %d in the book, none fits yet", snap.Len())
			lastSaid = now
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-n.readCtx.Done():
			return nil, ErrClosed
		case <-tick.C:
		}
	}
}

// attestProblem says why a verdict does not let the renter lease, or "".
func attestProblem(v api.AttestResult, err error) string {
	switch {
	case err != nil:
		return err.Error()
	case !v.Verified:
		return v.Reason
	case len(v.Offer) >= 12 && v.Offer[:12] == "not covered:":
		return "offer " + v.Offer
	}
	return ""
}

// propose signs a lease for candidate c and proposes it; it returns the
// countersigned lease, or the provider's reason. A provider that names a
// later start at which the lease fits (after preempting bronze leases
// with notice) is asked once more, for that start, if the bid allows it.
func (n *Node) propose(ctx context.Context, b *pb.Bid, c market.Candidate, req api.RentRequest) (*pb.CoSigned, *pb.Lease, string) {
	start := max(c.Start.UnixMilli(), time.Now().UnixMilli())
	cs, l, reply, reason := n.proposeAt(ctx, b, c, req, start)
	if later := reply.GetEarliestStartUnixMs(); cs == nil && later > start && later <= b.LatestStartUnixMs {
		cs, l, _, reason = n.proposeAt(ctx, b, c, req, later)
	}
	return cs, l, reason
}

// proposeAt proposes a lease for c starting at start (Unix ms).
func (n *Node) proposeAt(ctx context.Context, b *pb.Bid, c market.Candidate, req api.RentRequest, start int64) (*pb.CoSigned, *pb.Lease, *pb.LeaseReply, string) {
	id := make([]byte, 8)
	rand.Read(id)
	now := time.Now()
	l := &pb.Lease{
		Version: market.Version, Id: "lease-" + hex.EncodeToString(id), Renter: []byte(n.host.ID()), Provider: []byte(c.Issuer),
		OfferId: c.Offer.Header.Id, OfferSeq: c.Offer.Header.Seq, Bid: b, Tier: b.Tier, GpuCount: c.GPUs,
		StartUnixMs: start, DurationSeconds: b.DurationSeconds, Currency: b.Currency, PriceMicros: c.PriceMicros,
		Workload:      &pb.Workload{Image: b.Image, Command: req.Command, Env: req.Env, WorkloadClass: b.WorkloadClass},
		CreatedUnixMs: now.UnixMilli(),
	}
	if err := market.DefaultLimits().ValidateLease(l); err != nil {
		return nil, nil, nil, err.Error()
	}
	cs, err := market.NewCoSigned(n.key, market.Renter, l)
	if err != nil {
		return nil, nil, nil, err.Error()
	}
	reply, err := p2p.RequestLease(ctx, n.host, c.Issuer, &pb.LeaseRequest{Kind: &pb.LeaseRequest_Propose{Propose: cs}})
	switch {
	case err != nil:
		return nil, nil, nil, err.Error()
	case reply.Lease == nil:
		return nil, nil, reply, fmt.Sprintf("%s: %s", reply.Code, reply.Reason)
	case !market.SameBody(reply.Lease, cs):
		return nil, nil, reply, "the provider countersigned other terms"
	}
	if _, err := market.OpenCoSigned[*pb.Lease](reply.Lease, market.Renter, market.Provider); err != nil {
		return nil, nil, reply, "countersignature: " + err.Error()
	}
	raw, _ := proto.Marshal(reply.Lease)
	rec := &leaseRecord{ID: l.Id, Role: roleRenter, State: LeaseAccepted, Lease: raw, EndMs: market.LeaseEnd(l).UnixMilli()}
	if err := n.leaseStore().put(ctx, rec, nil); err != nil {
		return nil, nil, reply, "lease store: " + err.Error()
	}
	return reply.Lease, l, reply, ""
}

func short(p peer.ID) string {
	s := p.String()
	return s[len(s)-8:]
}
