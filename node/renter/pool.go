package renter

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/transfer"
	"github.com/idlegrid/idlegrid/node/views"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// Micro-pools: a rental with a pair-RTT bound (rent --max-pair-rtt) may
// take its GPUs from several providers whose every pair is estimated
// within the bound, as one rental: a lease per provider, all starting at
// one time, negotiated all or nothing.
const (
	// poolLead is how far ahead a pool's leases start: time to negotiate
	// with every member, and to withdraw from the rest, owing nothing,
	// when one refuses.
	poolLead = 15 * time.Second
	// maxPoolSeeds is how many of the best candidates a pool is grown
	// from, each in turn.
	maxPoolSeeds = 16
)

// Environment variables a pool's job finds on every member.
const (
	EnvPoolID    = "IDLEGRID_POOL"       // the pool's ID
	EnvPoolSize  = "IDLEGRID_POOL_SIZE"  // how many providers (ranks)
	EnvPoolRank  = "IDLEGRID_POOL_RANK"  // this member's rank, from 0
	EnvPoolGPUs  = "IDLEGRID_POOL_GPUS"  // GPUs of the whole pool
	EnvPoolPeers = "IDLEGRID_POOL_PEERS" // the members' peer IDs, by rank, comma-separated
	EnvPoolAddrs = "IDLEGRID_POOL_ADDRS" // the members' IP addresses, by rank, comma-separated
)

// assemblePool picks providers for need GPUs, each supplying at least
// minPer, whose every pair's RTT estimated from their offers' coordinates
// is under maxPair. It grows a pool from each of the best candidates in
// turn, adding the next best that fits with all members so far, and
// returns the first that holds need GPUs, each member's GPUs cut to what
// the pool still lacked. A candidate whose coordinate is unknown pairs
// with none: an unknown RTT never passes a bound.
func assemblePool(cands []market.Candidate, need, minPer uint32, maxPair time.Duration) ([]market.Candidate, error) {
	minPer = max(minPer, 1)
	best := 0
	cands = slices.Clone(cands)
	for i := range cands {
		cands[i] = cands[i].Decoded() // read again and again below
	}
	for s := range min(len(cands), maxPoolSeeds) {
		pool := []market.Candidate{}
		got := uint32(0)
		for _, c := range append([]market.Candidate{cands[s]}, cands...) {
			k := market.Take(c.Offer(), c.GPUs, need-got) // the offer's steps, or whole
			if k < minPer || inPool(pool, c.Issuer) || !withinPair(pool, c, maxPair) {
				continue
			}
			c.GPUs = k
			pool = append(pool, c)
			if got += k; got == need {
				return pool, nil
			}
		}
		best = max(best, int(got))
	}
	return nil, fmt.Errorf("no %d GPUs from providers each pair of which is estimated within %s (the most found together: %d; a provider whose offer has no settled coordinate pairs with none)", need, maxPair, best)
}

func inPool(pool []market.Candidate, p peer.ID) bool {
	for _, m := range pool {
		if m.Issuer == p {
			return true
		}
	}
	return false
}

// withinPair reports whether c is estimated within maxPair of every
// member of pool.
func withinPair(pool []market.Candidate, c market.Candidate, maxPair time.Duration) bool {
	for _, m := range pool {
		d, err := p2p.PairRTT(m.Offer().GetCoordinate(), c.Offer().GetCoordinate())
		if err != nil || d >= maxPair {
			return false
		}
	}
	return true
}

// poolMember is one provider of a pool being leased.
type poolMember struct {
	c      market.Candidate
	rank   int
	follow *Follow
	flush  func() // writes out the last lines of its output
	at     Attempt
	timing api.RentTimings // its own, merged once all are done
}

// rentPool leases a micro-pool for req and runs the job on every member.
func (r *Renter) rentPool(ctx context.Context, b *pb.Bid, req api.RentRequest, packed []transfer.Packed, out RentOutput, res *api.RentResult, t0 time.Time) error {
	members, err := r.choosePool(ctx, b, req, out, res)
	if err != nil {
		return err
	}
	tryFor := time.Duration(req.TryMillis) * time.Millisecond
	if tryFor <= 0 {
		tryFor = defaultTryFor
	}
	pctx, cancel := context.WithTimeout(ctx, min(tryFor, poolLead))
	defer cancel()
	start := r.leasePool(pctx, b, req, members, packed, out, res)
	if failed := poolFailed(members); len(failed) > 0 {
		r.withdrawPool(ctx, members)
		for _, m := range failed {
			res.Tried = append(res.Tried, attemptView(m.at))
		}
		return &NoProviderError{Attempts: attemptsOf(failed), Why: "a pool member failed"}
	}
	out.say("pool leased: %d leases starting at %s", len(members), start.Format(time.TimeOnly))
	return r.followPool(ctx, b, members, res, t0)
}

// choosePool ranks the candidates for b and takes the pool of them
// whose every pair is within the request's bound.
func (r *Renter) choosePool(ctx context.Context, b *pb.Bid, req api.RentRequest, out RentOutput, res *api.RentResult) ([]*poolMember, error) {
	maxPair := time.Duration(req.MaxPairRTTMillis) * time.Millisecond
	tm := r.Clock.Now()
	cands := r.Candidates(ctx, r.Market.MatcherFor(req.BidRequest), b, MaxRentCandidates, tm, out)
	res.Timings.Match = r.Clock.Since(tm)
	chosen, err := assemblePool(cands, b.GetGpu().GetCount(), b.GetGpu().GetMinPerProvider(), maxPair)
	if err != nil {
		return nil, &NoProviderError{Why: err.Error()}
	}
	members := make([]*poolMember, len(chosen))
	var names []string
	for i, c := range chosen {
		members[i] = &poolMember{c: c, rank: i}
		names = append(names, fmt.Sprintf("%s (%d)", Short(c.Issuer), c.GPUs))
	}
	out.say("pool of %d GPUs from %d providers, each pair within %s: %s", b.GetGpu().GetCount(), len(chosen), maxPair, strings.Join(names, ", "))
	return members, nil
}

// leasePool locates every member first (each job is told where the
// others are), then, if all were found, leases from all at once for one
// start: poolLead ahead, or the latest of the members' earliest starts,
// which it returns. A member that failed says so in its attempt.
func (r *Renter) leasePool(pctx context.Context, b *pb.Bid, req api.RentRequest, members []*poolMember, packed []transfer.Packed, out RentOutput, res *api.RentResult) time.Time {
	located := make([]error, len(members))
	r.eachMember(members, func(m *poolMember) { located[m.rank] = r.Net.Locate(pctx, m.c.Issuer) })
	for _, m := range members {
		if located[m.rank] != nil {
			m.at = Attempt{Provider: m.c.Issuer, Stage: StageLocate, Err: located[m.rank]}
		}
	}
	start := r.Clock.Now().Add(poolLead)
	for _, m := range members {
		if m.c.Start.After(start) {
			start = m.c.Start
		}
	}
	if len(poolFailed(members)) > 0 {
		return start
	}
	env := r.poolEnv(members, b.GetGpu().GetCount())
	var outMu sync.Mutex // one member's line at a time, on every writer
	r.eachMember(members, func(m *poolMember) {
		memberReq := req
		memberReq.Env = append(append(slices.Clone(req.Env), env...), fmt.Sprintf("%s=%d", EnvPoolRank, m.rank))
		done := make(chan error, 1)
		done <- nil // located above
		o, flush := rankOutput(out, m.rank, &outMu)
		m.flush = flush
		m.follow, m.at = r.tryAt(pctx, pctx, b, m.c, done, memberReq, packed, o, &m.timing, start)
	})
	// The members were leased at once: the pool took as long as its
	// slowest.
	for _, m := range members {
		res.Timings.Attest = max(res.Timings.Attest, m.timing.Attest)
		res.Timings.Negotiate = max(res.Timings.Negotiate, m.timing.Negotiate)
	}
	return start
}

// withdrawPool is all or nothing: it withdraws each member's lease that
// was accepted, before its start, and follows it to its receipt (nothing
// owed) so that both sides' records end.
func (r *Renter) withdrawPool(ctx context.Context, members []*poolMember) {
	r.eachMember(members, func(m *poolMember) {
		if m.follow == nil {
			return
		}
		m.follow.cancel()
		wctx, cancel := context.WithTimeout(ctx, cancelWait)
		defer cancel()
		if err := m.follow.run(wctx); err != nil {
			r.Log.Warn("withdrawn pool lease not followed to its receipt", "lease", m.follow.Lease.Id, "err", err)
		}
		m.flush()
	})
}

// followPool follows every member's job to its receipt and sums the pool
// up in res: each member by rank, the first's lease and receipt, the
// amount, and the timings of the first member's output.
func (r *Renter) followPool(ctx context.Context, b *pb.Bid, members []*poolMember, res *api.RentResult, t0 time.Time) error {
	errs := make([]error, len(members))
	r.eachMember(members, func(m *poolMember) {
		errs[m.rank] = m.follow.run(ctx)
		m.flush()
	})
	var total uint64
	for _, m := range members {
		if errs[m.rank] != nil {
			return errs[m.rank]
		}
		f := m.follow
		res.Pool = append(res.Pool, api.PoolMember{Rank: m.rank, Lease: views.Lease(f.rec), Receipt: f.receipt})
		total += f.amount
	}
	res.Lease, res.Receipt = res.Pool[0].Lease, res.Pool[0].Receipt
	res.PoolSummary = &api.PoolSummary{Providers: len(members), GPUs: b.GetGpu().GetCount(), Amount: market.FormatPrice(total), Currency: b.GetCurrency()}
	if f := members[0].follow; !f.firstOutput.IsZero() {
		res.Timings.Start, res.Timings.FirstOutput = f.firstOutput.Sub(f.accepted), f.firstOutput.Sub(t0)
	}
	return nil
}

// eachMember runs do for every member at once and waits.
func (r *Renter) eachMember(members []*poolMember, do func(*poolMember)) {
	var wg sync.WaitGroup
	for _, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			do(m)
		}()
	}
	wg.Wait()
}

func poolFailed(members []*poolMember) []*poolMember {
	var out []*poolMember
	for _, m := range members {
		if m.at.Err != nil {
			out = append(out, m)
		}
	}
	return out
}

func attemptsOf(ms []*poolMember) []Attempt {
	var out []Attempt
	for _, m := range ms {
		out = append(out, m.at)
	}
	return out
}

// poolEnv is the environment every member's job gets, its rank aside.
func (r *Renter) poolEnv(members []*poolMember, gpus uint32) []string {
	var peers, addrs []string
	for _, m := range members {
		peers = append(peers, m.c.Issuer.String())
		addrs = append(addrs, hostIP(r.AddrsOf(m.c.Issuer)))
	}
	return []string{
		EnvPoolID + "=" + NewID("pool-"),
		fmt.Sprintf("%s=%d", EnvPoolSize, len(members)),
		fmt.Sprintf("%s=%d", EnvPoolGPUs, gpus),
		EnvPoolPeers + "=" + strings.Join(peers, ","),
		EnvPoolAddrs + "=" + strings.Join(addrs, ","),
	}
}

// hostIP is the IP a member is best reached at: the first public one of
// addrs, else the first private, else the first of any kind; empty for
// none.
func hostIP(addrs []ma.Multiaddr) string {
	var private, any net.IP
	for _, a := range addrs {
		ip, err := manet.ToIP(a)
		if err != nil {
			continue
		}
		switch {
		case manet.IsPublicAddr(a):
			return ip.String()
		case private == nil && !ip.IsLoopback():
			private = ip
		case any == nil:
			any = ip
		}
	}
	switch {
	case private != nil:
		return private.String()
	case any != nil:
		return any.String()
	}
	return ""
}

// rankOutput prefixes every line a member's job writes, and its progress,
// with its rank; flush writes out what is left of last lines. Members
// share mu, so that out's writers and Progress are called by one member
// at a time.
func rankOutput(out RentOutput, rank int, mu *sync.Mutex) (o RentOutput, flush func()) {
	prefix := fmt.Sprintf("[%d] ", rank)
	stdout, stderr := prefixLines(out.Stdout, prefix, mu), prefixLines(out.Stderr, prefix, mu)
	o = RentOutput{Stdout: stdout, Stderr: stderr}
	if out.Progress != nil {
		o.Progress = func(line string) {
			mu.Lock()
			defer mu.Unlock()
			out.Progress(prefix + line)
		}
	}
	return o, func() { stdout.flush(); stderr.flush() }
}

// prefixLines returns a writer that writes each whole line to w with
// prefix in front, one Write per line, so that lines of several members
// do not mix. A last line without a newline waits for flush.
func prefixLines(w io.Writer, prefix string, mu *sync.Mutex) *linePrefixer {
	if w == nil {
		w = io.Discard
	}
	return &linePrefixer{w: w, prefix: prefix, mu: mu}
}

// flush writes what is left of a last line without a newline.
func (p *linePrefixer) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.buf) > 0 {
		io.WriteString(p.w, p.prefix+string(p.buf)+"\n")
		p.buf = nil
	}
}

type linePrefixer struct {
	w      io.Writer
	prefix string
	mu     *sync.Mutex // shared by the members writing to w
	buf    []byte
}

func (p *linePrefixer) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := strings.IndexByte(string(p.buf), '\n')
		if i < 0 {
			break
		}
		if _, err := io.WriteString(p.w, p.prefix+string(p.buf[:i+1])); err != nil {
			return len(b), err
		}
		p.buf = p.buf[i+1:]
	}
	if len(p.buf) > 64<<10 { // a long line without an end goes out as it is
		_, err := io.WriteString(p.w, p.prefix+string(p.buf))
		p.buf = nil
		return len(b), err
	}
	return len(b), nil
}
