package renter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/internal/owner"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/chain"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/idlegrid/idlegrid/node/fault"
	"github.com/idlegrid/idlegrid/node/pay"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/node/transfer"
	"github.com/idlegrid/idlegrid/node/views"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// Sentinel errors of a rental.
var (
	// ErrNoProvider is returned by Rent when no candidate took the lease.
	ErrNoProvider = errors.New("no provider took the lease")
	// ErrNotAttestable is a candidate whose offer names no attestation:
	// its GPUs are listed by hand (provider.gpus), not read through NVML.
	// A rental that skips attestation (RentRequest.SkipAttest) leases
	// from such a provider.
	ErrNotAttestable = errors.New("its offer is not attestable (GPUs listed by hand, not read through NVML)")
)

// Renter defaults.
const (
	// MaxRentCandidates is how many candidates a pool is assembled from.
	MaxRentCandidates = 64
	// maxWalk bounds the issuers one rental walks, far above what a book
	// holds: the try time, not a count, ends a walk.
	maxWalk = 1 << 16
	// locateAhead is how many candidates are looked up at once, ahead of
	// the one being tried: a lookup of a key with no host behind it fails
	// only at the DHT's pace. locateLimit bounds each lookup, so made-up
	// issuers cost a walk a bounded share of its try time.
	// locatePatience is how long a candidate found waits for a better
	// one still being looked up.
	locateAhead    = 16
	locateLimit    = 10 * time.Second
	locatePatience = 2 * time.Second
	defaultGather  = 15 * time.Second
	// gatherSyncs is how many book syncs a rental waits for once an
	// offer fits, and gatherSettle how long at most.
	gatherSyncs  = 3
	gatherSettle = 3 * time.Second
	// measureCandidates is how many of its best candidates a rental
	// measures the RTT to, where it has not: for a fresh renter they rank
	// by price alone, so the nearest may lie well down the list. With 32
	// of 50 equal offers measured, the nearest was among the other 18
	// often enough to choose one 2.3 times as far at the 90th percentile.
	measureCandidates = 64
	defaultTryFor     = time.Minute
	// attemptLimit bounds one candidate's locate, attestation and
	// proposal, so one that stalls cannot spend the whole try time.
	attemptLimit = 20 * time.Second
	// pullLimit bounds the time a provider may take to make a rental's
	// image present, pulling it; it does not count against --try-for.
	pullLimit = 30 * time.Minute
	// failMemory is how long a provider that could not be reached or
	// attested ranks behind the rest in this node's rentals.
	failMemory = 10 * time.Minute
	// cancelWait bounds how long a cancelled rental waits for the receipt.
	cancelWait = 45 * time.Second
)

// RentOutput receives a rental's job output and its progress lines.
type RentOutput struct {
	// Stdout and Stderr get the job's output; nil drops it (the
	// repository's logs folder keeps a copy either way).
	Stdout, Stderr io.Writer
	// Progress gets one line per step; nil drops them.
	Progress func(line string)
	// Status gets the state of a wait (offers gathered, an image
	// pulled), each line replacing the one before; nil sends each
	// line that differs from the last to Progress instead.
	Status func(line string)
	// Leased, when set, is told the lease's ID once both sides signed it.
	Leased func(id string)
	last   *string // the last status line sent to Progress
}

func (o RentOutput) say(format string, a ...any) {
	if o.Progress != nil {
		o.Progress(fmt.Sprintf(format, a...))
	}
}

func (o RentOutput) status(format string, a ...any) {
	line := fmt.Sprintf(format, a...)
	switch {
	case o.Status != nil:
		o.Status(line)
	case o.Progress != nil && o.last != nil && *o.last != line:
		*o.last = line
		o.Progress(line)
	}
}

// RentStage is where a rental's attempt with one provider stopped.
type RentStage string

// Stages of an attempt.
const (
	StageLocate    RentStage = "locate"
	StageAttest    RentStage = "attest"
	StageNegotiate RentStage = "negotiate"
	StageImage     RentStage = "image"
	StageUpload    RentStage = "upload"
)

// Attempt is one provider a rental tried and why it moved on. A provider's
// refusal of the lease is a *market.RejectError in Err.
type Attempt struct {
	Provider peer.ID
	Stage    RentStage
	Err      error
}

// NoProviderError is Rent's failure when no candidate took the lease: it
// is an ErrNoProvider and carries every attempt.
type NoProviderError struct {
	Attempts []Attempt
	// Why, with no attempt, says why there was no candidate.
	Why string
}

func (e *NoProviderError) Error() string {
	if len(e.Attempts) == 0 {
		return ErrNoProvider.Error() + ": " + e.Why
	}
	last := e.Attempts[len(e.Attempts)-1]
	return fmt.Sprintf("%v: %d candidates tried; last, %s at %s: %v", ErrNoProvider, len(e.Attempts), Short(last.Provider), last.Stage, last.Err)
}

// Unwrap makes every NoProviderError an ErrNoProvider.
func (e *NoProviderError) Unwrap() error { return ErrNoProvider }

// learnCandidates is how many of the best candidates a rental asks for
// their receipts before it ranks them.
const learnCandidates = 8

// Renter rents for this node: it gathers offers, challenges and leases
// from providers, follows their jobs to the receipts, and after a restart
// follows again the leases it had not seen end.
type Renter struct {
	Id         peer.ID
	Key        crypto.PrivKey
	Net        Dealer
	Market     Book
	Challenger Attester
	Store      records.Store
	LogsDir    string
	Clock      clock.Clock
	Log        *slog.Logger
	Ended      func(*records.Lease, *pb.Receipt)
	Observe    func(p peer.ID, good bool, weight float64, what string) // counts for reputation; may be nil
	// LearnFor asks providers for their receipts and reports whether the
	// scores changed; may be nil.
	LearnFor func(ctx context.Context, providers []peer.ID) bool
	// MeasureFor measures the RTT to the providers this node has not, and
	// reports whether it measured any; may be nil.
	MeasureFor func(ctx context.Context, providers []peer.ID) bool
	// AddrsOf is where the node knows p listens; may be nil.
	AddrsOf func(p peer.ID) []ma.Multiaddr
	Swarm   p2p.Swarm
	// Records is this renter's chain of lease records; nil: none kept.
	Records Records
	// Wallet pays leases by channel (settlement evm): its bids say so and
	// it signs a voucher for each beat verified; nil: the ledger.
	Wallet *pay.Wallet
	// Datasets are the datasets this node keeps; nil: a rental that
	// names one is refused.
	Datasets Datasets
	failed   failures // providers that lately could not be reached or attested
	// vouched are the attestation hashes this node verified, by issuer.
	vouched vouchedHashes
	// locals are the images of this machine's engine that rentals send,
	// by ID; localMu guards the map, for no I/O.
	localMu sync.Mutex
	locals  map[string]*executor.LocalImage

	ctx    context.Context // ends when the renter stops
	cancel context.CancelFunc
	// mu guards closing against users' Add: no I/O under it.
	mu      sync.Mutex
	closing bool
	users   sync.WaitGroup // rentals and resumed follows
	// following holds the follow of each lease followed again (resumed
	// or attached), so that one lease has one follow; under mu.
	following map[string]*Follow
}

// Records is this renter's chain of lease records (node/trustchain): it
// agrees to a provider's record of a lease it countersigned, and records
// a lease it closed itself.
type Records interface {
	// Propose records rc in the chain, or returns the lease's record
	// made before.
	Propose(ctx context.Context, rc *pb.Receipt, lease, ext *pb.CoSigned) (*chain.Block, error)
	// Agree completes proposal, of the receipt whose body is receipt.
	Agree(ctx context.Context, proposal *pb.SignedBlock, receipt []byte) (*chain.Block, error)
}

// Start resumes the rentals a previous run left, and settles, as their
// providers come back, the leases whose providers were gone.
func (r *Renter) Start(ctx context.Context) {
	r.ctx, r.cancel = context.WithCancel(ctx)
	for _, run := range []func(context.Context){r.resume, r.settleLoop} {
		if done, err := r.use(); err == nil {
			go func() {
				defer done()
				run(r.ctx)
			}()
		}
	}
}

// Stop ends the rentals in flight (their leases run on; a restart follows
// them again) and waits for them.
func (r *Renter) Stop() {
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
	r.cancel()
	r.users.Wait()
}

// use registers a rental; done must be called when it is finished. It
// fails once the renter is stopping.
func (r *Renter) use() (done func(), err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing || r.ctx == nil {
		return nil, owner.ErrClosed
	}
	r.users.Add(1)
	return r.users.Done, nil
}

// Rent does the whole rental (node.Node.Rent): gather, rank, attest,
// propose, then follow the job to its receipt.
func (r *Renter) Rent(ctx context.Context, req api.RentRequest, out RentOutput) (api.RentResult, error) {
	t0 := r.Clock.Now()
	out.last = new(string)
	res := api.RentResult{Tried: []api.Attempt{}}
	done, err := r.use()
	if err != nil {
		return res, err
	}
	defer done()
	b, req, drop, err := r.validate(ctx, req, &out, t0)
	defer drop()
	if err != nil {
		return res, err
	}
	err = r.gather(ctx, b, req, out)
	res.Timings.Discover = r.Clock.Since(t0)
	if err != nil {
		return res, err
	}
	if err := checkDownloads(req.Downloads); err != nil {
		return res, err
	}
	packed, err := packUploads(req.Uploads)
	if err != nil {
		return res, err
	}
	defer func() {
		for _, p := range packed {
			p.Remove()
		}
	}()
	if req.MaxPairRTTMillis > 0 {
		return res, r.rentPool(ctx, b, req, packed, out, &res, t0)
	}
	return r.attempt(ctx, b, req, packed, out, res, t0)
}

// validate checks what a rental asks beyond its bid (a pool's RTT, one
// image named once), sends a local Docker image as the rental's image,
// and builds the bid. drop forgets the image it saved; it is never nil,
// and is for the caller to defer whatever the error.
func (r *Renter) validate(ctx context.Context, req api.RentRequest, out *RentOutput, now time.Time) (b *pb.Bid, _ api.RentRequest, drop func(), err error) {
	drop = func() {}
	if req.MaxPairRTTMillis < 0 || req.MaxPairRTTMillis > 60_000 {
		return nil, req, drop, fault.Invalidf("max_pair_rtt_ms: %d: want 0 (one provider) to 60000", req.MaxPairRTTMillis)
	}
	if req.Detach {
		// The caller's stdout holds the lease ID alone: what the job
		// prints before the detach is kept under logs/ only.
		out.Stdout, out.Stderr = nil, nil
	}
	if req.MaxPairRTTMillis > 0 && req.MinPerProvider == 0 {
		req.MinPerProvider = 1 // a pool takes what each provider has
	}
	if req.ImageFromDocker != "" {
		if req.Image != "" {
			return nil, req, drop, fault.Invalidf("image %q and image_from_docker %q: name one", req.Image, req.ImageFromDocker)
		}
		local, err := r.saveLocal(ctx, req.ImageFromDocker, *out)
		if err != nil {
			return nil, req, drop, err
		}
		drop = func() { r.dropLocal(local) }
		req.Image = local.ID
	}
	mounts, err := r.mounts(ctx, req.Datasets, "")
	if err != nil {
		return nil, req, drop, err
	}
	if b, err = BuildBid(req.BidRequest, r.Id, r.Swarm, now, r.pays(), r.Market.Snapshot(), needsOf(mounts)); err != nil {
		return nil, req, drop, err
	}
	if req.Detach && r.Wallet != nil {
		return nil, req, drop, fault.Invalidf("detach: a lease paid by a channel (settlement evm) is paid per verified beat, and its provider stops the job when the vouchers stop; rent it without detaching")
	}
	if b.Image == "" {
		return nil, req, drop, fault.Invalid(errors.New("image: empty; name the container image to run"))
	}
	return b, req, drop, nil
}

// attempt walks the best candidates for b, one lease proposal at a time
// within the request's time to try, and follows the first lease a
// provider takes to its receipt; with none, the error is a
// *NoProviderError naming each attempt.
func (r *Renter) attempt(ctx context.Context, b *pb.Bid, req api.RentRequest, packed []transfer.Packed, out RentOutput, res api.RentResult, t0 time.Time) (api.RentResult, error) {
	tries := req.Candidates
	if tries <= 0 || tries > maxWalk {
		tries = maxWalk
	}
	tryFor := time.Duration(req.TryMillis) * time.Millisecond
	if tryFor <= 0 {
		tryFor = defaultTryFor
	}
	tm := r.Clock.Now()
	cands := r.Candidates(ctx, r.Market.MatcherFor(req.BidRequest), b, tries, tm, out)
	res.Timings.Match = r.Clock.Since(tm)
	left := func() time.Duration { return tryFor - (r.Clock.Since(tm) - res.Timings.Pull) }
	var tried []Attempt
	failed := func(at Attempt) {
		r.failedAt(at)
		tried = append(tried, at)
		res.Tried = append(res.Tried, attemptView(at))
	}
	f, c := r.walk(ctx, cands, tryFor, left, out, failed, func(actx context.Context, c market.Candidate, located <-chan error) (*Follow, Attempt) {
		f, at := r.try(actx, ctx, b, c, located, req, packed, out, &res.Timings)
		if f == nil {
			failed(at)
		}
		return f, at
	})
	if f != nil {
		// The one follow of its lease: a cancel or an attach in this node
		// hands the lease to it, rather than a second follow taking the
		// job stream from it, and it from the second.
		if release, ok := r.claim(f); ok {
			defer release()
		}
		if err := f.run(ctx); err != nil {
			return res, err
		}
		res.Lease, res.Receipt, res.Relayed, res.Detached = views.Lease(f.rec), f.receipt, f.relayed, f.left
		if !f.left {
			res.Downloads = r.downloadAll(ctx, c.Issuer, f.Lease.Id, f.rec.Downloads, out)
		}
		if !f.firstOutput.IsZero() {
			res.Timings.Start, res.Timings.FirstOutput = f.firstOutput.Sub(f.accepted), f.firstOutput.Sub(t0)
		}
		return res, nil
	}
	if len(tried) == 0 {
		return res, &NoProviderError{Why: "no candidate"}
	}
	return res, &NoProviderError{Attempts: tried}
}

// Candidates matches b against the book with mt, keeps the best offer of
// each issuer, at most tries, and orders them by evidence (byEvidence):
// those this node can reach and has attested first, those that failed
// lately last, each part in the matcher's order. Before
// that it asks the best few providers it has not asked lately for their
// receipts, and matches again if their scores changed.
func (r *Renter) Candidates(ctx context.Context, mt *market.Matcher, b *pb.Bid, tries int, now time.Time, out RentOutput) []market.Candidate {
	match := func() []market.Candidate {
		matched := mt.Match(r.Market.Snapshot(), b, now, tries*maxOffersPerIssuer).Candidates
		return r.byEvidence(bestPerIssuer(matched, tries), now)
	}
	cands := match()
	best := func(n int) []peer.ID {
		var ps []peer.ID
		for _, c := range cands[:min(len(cands), n)] {
			ps = append(ps, c.Issuer)
		}
		return ps
	}
	if r.LearnFor != nil && len(cands) > 0 && r.LearnFor(ctx, best(learnCandidates)) {
		out.say("learned the receipts of providers in the running; ranking again")
		cands = match()
	}
	// A renter that has measured none of the best (a fresh one) ranks
	// them by an RTT it does not know: it measures them first.
	if r.MeasureFor != nil && len(cands) > 0 && r.MeasureFor(ctx, best(measureCandidates)) {
		out.say("measured the RTT to providers in the running; ranking again")
		cands = match()
	}
	return cands
}

// maxOffersPerIssuer is how many candidates of one issuer a match may
// hold before the next issuer's: a provider may publish a few offers.
const maxOffersPerIssuer = 16

// bestPerIssuer keeps the best candidate of each issuer, at most n, in
// order: trying an issuer that could not be reached again is no use.
func bestPerIssuer(cands []market.Candidate, n int) []market.Candidate {
	seen := map[peer.ID]bool{}
	out := make([]market.Candidate, 0, min(n, len(cands)))
	for _, c := range cands {
		if len(out) == n {
			break
		}
		if !seen[c.Issuer] {
			seen[c.Issuer] = true
			out = append(out, c)
		}
	}
	return out
}

// try attests and leases from candidate c once located says it was
// located; it returns the follow of the lease it got, or the attempt
// that failed.
func (r *Renter) try(ctx, long context.Context, b *pb.Bid, c market.Candidate, located <-chan error, req api.RentRequest, packed []transfer.Packed, out RentOutput, t *api.RentTimings) (*Follow, Attempt) {
	return r.tryAt(ctx, long, b, c, located, req, packed, out, t, time.Time{})
}

// tryAt is try for a lease that starts at start (zero: as soon as the
// offer allows). The provider readies the image within long, which
// outlasts the attempt's ctx: a pull may take minutes.
func (r *Renter) tryAt(ctx, long context.Context, b *pb.Bid, c market.Candidate, located <-chan error, req api.RentRequest, packed []transfer.Packed, out RentOutput, t *api.RentTimings, start time.Time) (*Follow, Attempt) {
	at := Attempt{Provider: c.Issuer}
	select {
	case at.Err = <-located:
	case <-ctx.Done():
		at.Err = ctx.Err()
	}
	if at.Err != nil {
		at.Stage = StageLocate
		out.say("%s: not reachable: %v; trying the next", Short(c.Issuer), at.Err)
		return nil, at
	}
	if !req.SkipAttest && len(c.Offer().GetAttestationHash()) == 0 {
		// GPUs listed by hand, not read through NVML: nothing to attest,
		// and no failure of the provider's.
		at.Stage, at.Err = StageAttest, ErrNotAttestable
		out.say("%s: %v; trying the next", Short(c.Issuer), at.Err)
		return nil, at
	}
	if !req.SkipAttest {
		ta := r.Clock.Now()
		v, err := r.Challenger.Attest(ctx, c.Issuer)
		t.Attest += r.Clock.Since(ta)
		if err == nil {
			err = v.Problem()
		}
		if err != nil {
			at.Stage, at.Err = StageAttest, err
			out.say("%s: attestation refused: %v; trying the next", Short(c.Issuer), err)
			return nil, at
		}
		if v.Coverage == attest.CoverageFull {
			r.vouched.add(c.Issuer, c.Offer().GetAttestationHash())
		}
		out.say("%s: attestation verified (%s)", Short(c.Issuer), v.OfferLine())
	}
	if err := r.readyImage(long, c.Issuer, b.Image, out, t); err != nil {
		at.Stage, at.Err = StageImage, err
		out.say("%s: image not ready: %v; trying the next", Short(c.Issuer), err)
		return nil, at
	}
	if err := r.upload(long, c.Issuer, packed, out, t); err != nil {
		at.Stage, at.Err = StageUpload, err
		out.say("%s: %v; trying the next", Short(c.Issuer), err)
		return nil, at
	}
	if ctx.Err() != nil && long.Err() == nil {
		// The pull outlasted the attempt: the proposal gets its own.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(long, attemptLimit)
		defer cancel()
	}
	tn := r.Clock.Now()
	var cs *pb.CoSigned
	var l *pb.Lease
	var err error
	if start.IsZero() {
		cs, l, err = r.propose(ctx, b, c, req, inputsOf(packed))
	} else {
		cs, l, err = r.proposeAt(ctx, b, c, req, inputsOf(packed), start)
	}
	t.Negotiate += r.Clock.Since(tn)
	if err != nil {
		at.Stage, at.Err = StageNegotiate, err
		out.say("%s: lease refused: %v; trying the next", Short(c.Issuer), err)
		return nil, at
	}
	out.say("lease %s accepted by %s: %d × %s at %s/GPU-hour for %s", l.Id, Short(c.Issuer), l.GpuCount, market.TierName(l.Tier), market.FormatPrice(l.PriceMicros), secs(l.DurationSeconds))
	if out.Leased != nil {
		out.Leased(l.Id)
	}
	f := newFollow(r, l, cs, nil, out)
	f.accepted, f.detachAtStart = r.Clock.Now(), req.Detach
	for _, d := range req.Downloads {
		f.downloads = append(f.downloads, records.Download{Path: d.Path, Local: d.Local})
	}
	return f, at
}

// attemptView shows an attempt in the API.
func attemptView(a Attempt) api.Attempt {
	v := api.Attempt{Provider: a.Provider.String(), Stage: string(a.Stage), Reason: a.Err.Error()}
	var re *market.RejectError
	if errors.As(a.Err, &re) {
		v.Code = re.Code.String()
	}
	return v
}

// Short is the last 8 characters of p, as a rental's progress names a
// peer.
func Short(p peer.ID) string {
	s := p.String()
	return s[max(0, len(s)-8):]
}

func secs(s uint64) string { return (time.Duration(s) * time.Second).String() }
