package attest

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/idlegrid/idlegrid/attest/pb"
	"github.com/idlegrid/idlegrid/market"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
	"google.golang.org/protobuf/proto"
)

// Telemetry envelope domain, payload type and size limit.
const (
	TelemetryDomain = "idlegrid-telemetry"
	MaxBeatSize     = 16 << 10
)

var telemetryCodec = []byte("/idlegrid/telemetry/1")

type beatRecord struct{ beat *pb.Heartbeat }

func (r *beatRecord) Domain() string { return TelemetryDomain }
func (r *beatRecord) Codec() []byte  { return telemetryCodec }
func (r *beatRecord) MarshalRecord() ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(r.beat)
}
func (r *beatRecord) UnmarshalRecord(b []byte) error {
	r.beat = new(pb.Heartbeat)
	return market.Unmarshal(b, r.beat)
}

// Chain signs the heartbeats of one lease, each linked to the one before
// by its hash. It is not safe for concurrent use.
type Chain struct {
	key    crypto.PrivKey
	issuer peer.ID
	swarm  string
	lease  string
	seq    uint64
	prev   []byte
	last   time.Time
}

// NewChain starts the heartbeat chain of a lease in swarm (a swarm's
// tag, empty for the public one), signed with key.
func NewChain(key crypto.PrivKey, swarm, leaseID string) (*Chain, error) {
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &Chain{key: key, issuer: id, swarm: swarm, lease: leaseID}, nil
}

// ResumeChain continues a lease's chain after a restart, from its last
// beat: its seq, hash and time, as the provider persisted them.
func ResumeChain(key crypto.PrivKey, swarm, leaseID string, seq uint64, root []byte, last time.Time) (*Chain, error) {
	c, err := NewChain(key, swarm, leaseID)
	if err != nil {
		return nil, err
	}
	c.seq, c.prev, c.last = seq, slices.Clone(root), last
	return c, nil
}

// Next signs the next beat, taken at now, and returns its envelope.
func (c *Chain) Next(now time.Time, samples []*pb.GPUSample) ([]byte, error) {
	b := &pb.Heartbeat{Version: 1, Issuer: []byte(c.issuer), Swarm: c.swarm, LeaseId: c.lease, Seq: c.seq + 1, UnixMs: now.UnixMilli(), Gpus: samples, PrevHash: c.prev}
	env, err := record.Seal(&beatRecord{b}, c.key)
	if err != nil {
		return nil, err
	}
	data, err := env.Marshal()
	if err != nil {
		return nil, err
	}
	c.seq++
	c.prev, c.last = beatHash(data), time.UnixMilli(b.UnixMs)
	return data, nil
}

// Last is when the last beat was taken; zero before the first.
func (c *Chain) Last() time.Time { return c.last }

// Beats is how many beats the chain has signed.
func (c *Chain) Beats() uint64 { return c.seq }

// Root is the hash of the last beat: what a receipt records.
func (c *Chain) Root() []byte { return slices.Clone(c.prev) }

func beatHash(env []byte) []byte {
	sum := sha256.Sum256(env)
	return sum[:]
}

// Follower verifies a lease's beats as they arrive: each must be signed
// by the issuer for the lease, stamped within the lease's term and not
// ahead of the follower's clock (see Term), no earlier than the last
// accepted beat, and the next beat must link to the last accepted one by
// its prev_hash. A beat already passed (a replay after the renter
// re-attached) is skipped without error. A beat further ahead is
// accepted, being signed, and the beats skipped are counted missing: the
// follower was away, or the provider restarted and could not replay them.
// It is not safe for concurrent use.
type Follower struct {
	issuer  peer.ID
	swarm   string
	lease   string
	term    Term
	seq     uint64
	root    []byte
	last    time.Time
	missing uint64
}

// Term is when a lease's beats may be stamped: from Start to End (the
// lease's term), and no later than Now (the follower's clock) plus Skew,
// the clock difference tolerated at either edge. A lease is metered to
// its last verified beat, so a beat stamped ahead would bill time not
// yet served. A zero Term checks no time; Now nil is time.Now.
type Term struct {
	Start, End time.Time
	Now        func() time.Time
	Skew       time.Duration
}

// ErrBeatTime is a beat stamped outside its lease's term, ahead of the
// follower's clock, or before the beat it follows; the provider signed
// it, so it proves the provider's telemetry wrong.
var ErrBeatTime = errors.New("telemetry beat stamped out of time")

// check reports whether at is a time a beat following one stamped last
// may carry.
func (t Term) check(at, last time.Time) error {
	if t.Start.IsZero() && t.End.IsZero() {
		return nil
	}
	now := time.Now
	if t.Now != nil {
		now = t.Now
	}
	switch n := now(); {
	case at.Before(t.Start.Add(-t.Skew)):
		return fmt.Errorf("%w: %s is before the lease's start %s", ErrBeatTime, at.UTC().Format(time.RFC3339), t.Start.UTC().Format(time.RFC3339))
	case at.After(t.End.Add(t.Skew)):
		return fmt.Errorf("%w: %s is after the lease's end %s", ErrBeatTime, at.UTC().Format(time.RFC3339), t.End.UTC().Format(time.RFC3339))
	case at.After(n.Add(t.Skew)):
		return fmt.Errorf("%w: %s is %s ahead of this clock", ErrBeatTime, at.UTC().Format(time.RFC3339), at.Sub(n).Round(time.Millisecond))
	case at.Before(last):
		return fmt.Errorf("%w: %s is before the beat it follows (%s)", ErrBeatTime, at.UTC().Format(time.RFC3339), last.UTC().Format(time.RFC3339))
	}
	return nil
}

// NewFollower follows the beats issuer signs for lease, in swarm, within
// term.
func NewFollower(issuer peer.ID, swarm, lease string, term Term) *Follower {
	return &Follower{issuer: issuer, swarm: swarm, lease: lease, term: term}
}

// ResumeFollower continues following after a restart from the last beat
// accepted: its seq, hash and time, as the renter persisted them.
func ResumeFollower(issuer peer.ID, swarm, lease string, term Term, seq uint64, root []byte, last time.Time) *Follower {
	return &Follower{issuer: issuer, swarm: swarm, lease: lease, term: term, seq: seq, root: slices.Clone(root), last: last}
}

// Add verifies one beat and accepts it when it is ahead of the last. A
// beat stamped out of time is refused with ErrBeatTime and not counted.
func (f *Follower) Add(env []byte) error {
	b, err := openBeat(env, f.issuer, f.swarm, f.lease)
	switch {
	case err != nil:
		return err
	case b.Seq <= f.seq:
		return nil
	case b.Seq == f.seq+1 && f.seq > 0 && !bytes.Equal(b.PrevHash, f.root):
		return fmt.Errorf("beat %d does not link to the beat before", b.Seq)
	}
	at := time.UnixMilli(b.UnixMs)
	if err := f.term.check(at, f.last); err != nil {
		return fmt.Errorf("beat %d: %w", b.Seq, err)
	}
	f.missing += b.Seq - f.seq - 1
	f.seq, f.root, f.last = b.Seq, beatHash(env), at
	return nil
}

// Beats is the seq of the last beat accepted: the beats the provider had
// signed by then.
func (f *Follower) Beats() uint64 { return f.seq }

// Missing is how many beats before the last accepted one never arrived.
func (f *Follower) Missing() uint64 { return f.missing }

// Root is the hash of the last accepted beat.
func (f *Follower) Root() []byte { return slices.Clone(f.root) }

// Last is when the last accepted beat was taken; zero before the first.
func (f *Follower) Last() time.Time { return f.last }

// Extend moves the end of the term the follower checks beats against
// later, to end: the lease was extended. An earlier end changes nothing.
func (f *Follower) Extend(end time.Time) {
	if end.After(f.term.End) {
		f.term.End = end
	}
}

// Gap is a stretch of a lease no valid beat covers.
type Gap struct {
	From, To time.Time
}

// ChainReport is what a verifier concludes from a lease's beats.
type ChainReport struct {
	Beats, Valid int
	// Coverage is the share of the lease covered by valid beats, each
	// covering the interval before it.
	Coverage float64
	Gaps     []Gap
	// Problems names each beat refused or out of place, and each break.
	Problems []string
	// Root is the hash of the last valid beat.
	Root []byte
}

// VerifyChain checks a lease's beats in the order received: signature,
// signer, swarm, lease, sequence and hash links. A forged beat (bad
// signature, another signer, swarm or lease) is refused; one whose seq is not above the
// last valid one is reported out of order; a skipped seq or a broken hash
// link is reported, and the beats after it still count, being signed.
func VerifyChain(envs [][]byte, issuer peer.ID, swarm, lease string, start, end time.Time, interval time.Duration) ChainReport {
	r := ChainReport{Beats: len(envs), Gaps: []Gap{}, Problems: []string{}}
	var lastSeq uint64
	var lastHash []byte
	var covered []Gap
	for i, env := range envs {
		b, err := openBeat(env, issuer, swarm, lease)
		if err != nil {
			r.Problems = append(r.Problems, fmt.Sprintf("beat %d: %v", i, err))
			continue
		}
		switch {
		case b.Seq <= lastSeq:
			r.Problems = append(r.Problems, fmt.Sprintf("beat %d: seq %d out of order after %d", i, b.Seq, lastSeq))
			continue
		case b.Seq > lastSeq+1:
			r.Problems = append(r.Problems, fmt.Sprintf("beat %d: seq %d follows %d: %d beats missing", i, b.Seq, lastSeq, b.Seq-lastSeq-1))
		case lastSeq > 0 && !bytes.Equal(b.PrevHash, lastHash):
			r.Problems = append(r.Problems, fmt.Sprintf("beat %d: seq %d does not link to the beat before", i, b.Seq))
		}
		lastSeq, lastHash = b.Seq, beatHash(env)
		r.Valid++
		t := time.UnixMilli(b.UnixMs)
		covered = append(covered, Gap{From: maxTime(t.Add(-interval), start), To: minTime(t, end)})
	}
	r.Root = lastHash
	r.Coverage, r.Gaps = coverage(covered, start, end)
	return r
}

func openBeat(env []byte, issuer peer.ID, swarm, lease string) (*pb.Heartbeat, error) {
	if len(env) > MaxBeatSize {
		return nil, fmt.Errorf("%d bytes, limit %d", len(env), MaxBeatSize)
	}
	rec := &beatRecord{}
	e, err := record.ConsumeTypedEnvelope(env, rec)
	if err != nil {
		return nil, fmt.Errorf("bad signature: %v", err)
	}
	b := rec.beat
	if peer.ID(b.Issuer) != issuer || !issuer.MatchesPublicKey(e.PublicKey) {
		return nil, fmt.Errorf("signed by another peer than %s", issuer)
	}
	if b.Swarm != swarm {
		return nil, fmt.Errorf("beat of swarm %q, not %q", b.Swarm, swarm)
	}
	if b.LeaseId != lease {
		return nil, fmt.Errorf("beat of lease %q, not %q", b.LeaseId, lease)
	}
	return b, nil
}

// coverage merges the covered spans and returns the covered share of
// [start, end) and the gaps.
func coverage(spans []Gap, start, end time.Time) (float64, []Gap) {
	total := end.Sub(start)
	if total <= 0 {
		return 0, []Gap{}
	}
	slices.SortFunc(spans, func(a, b Gap) int { return a.From.Compare(b.From) })
	gaps := []Gap{}
	var covered time.Duration
	at := start
	for _, s := range spans {
		if !s.To.After(s.From) || !s.To.After(at) {
			continue
		}
		if s.From.After(at) {
			gaps = append(gaps, Gap{From: at, To: s.From})
			at = s.From
		}
		covered += s.To.Sub(at)
		at = s.To
	}
	if end.After(at) {
		gaps = append(gaps, Gap{From: at, To: end})
	}
	return float64(covered) / float64(total), gaps
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
