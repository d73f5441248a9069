package trust

import (
	"context"
	"crypto/x509"
	"slices"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	attestpb "github.com/idlegrid/idlegrid/attest/pb"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/reputation"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/metrics"
	"github.com/idlegrid/idlegrid/node/offer"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// attestMaxAge is how old (or how far ahead) an attestation may be.
const attestMaxAge = 30 * time.Second

// ChallengeNet is the challenger's view of the swarm: a provider's answer
// to a challenge.
type ChallengeNet interface {
	Challenge(ctx context.Context, p peer.ID) (p2p.Answer, error)
}

// Challenger challenges providers' attestations and judges the answers
// against the offers this node's book holds.
type Challenger struct {
	Self  peer.ID
	Swarm string // the swarm's tag, which every answer must name
	Net   ChallengeNet
	Book  func() *market.Snapshot
	Roots *x509.CertPool // nil: CC evidence is shown, not verified
	Clock clock.Clock
	// Observe counts an outcome for reputation, and dispute a GPU UUID
	// two peers claimed; either may be nil.
	Observe func(p peer.ID, good bool, weight float64, what string)
	Dispute func(a, b peer.ID, uuid string)
	// Report gossips evidence this node holds; may be nil.
	Report func(ctx context.Context, evidence []byte) error
	// Metrics counts the outcomes of challenges; may be nil.
	Metrics *metrics.Metrics

	// mu guards last, the last verified document of each peer, so a
	// verdict can say what changed: a small cache, held for no I/O.
	mu   sync.Mutex
	last map[peer.ID]lastDoc
}

// lastDoc is a peer's last verified document and its signed envelope.
type lastDoc struct {
	doc *attestpb.Document
	env []byte
}

// challenged is one challenge's outcome: the verdict, the round trip,
// and what changed since the peer's previous document.
type challenged struct {
	attest.Verdict
	Rtt     time.Duration
	Changes []string
}

// Attest is Challenge's verdict alone.
func (c *Challenger) Attest(ctx context.Context, p peer.ID) (attest.Verdict, error) {
	v, err := c.Challenge(ctx, p)
	return v.Verdict, err
}

// Challenge sends p a nonce and judges its answer; err is set only when
// no answer came.
func (c *Challenger) Challenge(ctx context.Context, p peer.ID) (challenged, error) {
	a, err := c.Net.Challenge(ctx, p)
	if err != nil {
		c.count(p, false, reputation.WeightUnreachable, "attestation unanswered: "+err.Error())
		c.Metrics.Challenged(metrics.ChallengeUnanswered)
		return challenged{}, err
	}
	o, _ := c.Book().Offer(p, offer.ProviderOfferID)
	out := challenged{Verdict: attest.Judge(p, attest.Challenge{Swarm: c.Swarm, Challenger: c.Self, Nonce: a.Nonce}, a.Fresh, a.Standing, o, c.Roots, c.Clock.Now(), attestMaxAge), Rtt: a.RTT}
	switch {
	case out.Err != nil:
		c.count(p, false, reputation.WeightAttestFailed, "attestation failed: "+out.Err.Error())
		c.Metrics.Challenged(metrics.ChallengeFailed)
	case out.Coverage == attest.CoverageNone: // its offer claims what its document does not show
		c.count(p, false, reputation.WeightAttestFailed, "offer not covered: "+out.CoverageErr.Error())
		c.Metrics.Challenged(metrics.ChallengeUncovered)
	default:
		c.count(p, true, reputation.WeightAttested, "attested")
		c.Metrics.Challenged(metrics.ChallengeVerified)
	}
	if out.Verified() {
		prev, others := c.swap(p, lastDoc{out.Doc, a.Fresh})
		if prev.doc != nil {
			out.Changes = attest.Changes(prev.doc, out.Doc)
			c.contradicts(ctx, p, prev.env, a.Fresh)
		}
		for q, claim := range others {
			if !c.settled(ctx, claim.env, a.Fresh) && c.Dispute != nil {
				c.Dispute(p, q, claim.uuid)
			}
		}
	}
	return out, nil
}

// settled gossips the evidence two peers' documents that claim one GPU
// make, when CC certificates prove it (one GPU's key answered for both
// machines): then it is no dispute but proof against both. It reports
// whether it was.
func (c *Challenger) settled(ctx context.Context, other, fresh []byte) bool {
	if c.Roots == nil || c.Report == nil {
		return false
	}
	ev, err := attest.NewEvidence(other, fresh)
	if err != nil {
		return false
	}
	if offenders, err := attest.VerifyEvidence(ev, c.Swarm, c.Roots); err != nil || len(offenders) != 2 {
		return false
	}
	return c.Report(ctx, ev) == nil
}

// contradicts gossips the evidence two of p's documents make, when they
// prove it cheated (one key, two GPU sets within the conflict window):
// the node that holds them is the one that can show them.
func (c *Challenger) contradicts(ctx context.Context, p peer.ID, prev, fresh []byte) {
	if c.Report == nil {
		return
	}
	ev, err := attest.NewEvidence(prev, fresh)
	if err != nil {
		return
	}
	if offenders, err := attest.VerifyEvidence(ev, c.Swarm, c.Roots); err != nil || !slices.Contains(offenders, p) {
		return // a change, not a contradiction
	}
	if err := c.Report(ctx, ev); err != nil {
		c.count(p, false, reputation.WeightAttestFailed, "its documents contradict each other; the evidence was not gossiped: "+err.Error())
	}
}

func (c *Challenger) count(p peer.ID, good bool, weight float64, what string) {
	if c.Observe != nil {
		c.Observe(p, good, weight, what)
	}
}

// Attested says whether p answered a challenge with a verified document.
func (c *Challenger) Attested(p peer.ID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last[p].doc != nil
}

// claim is another peer's last document that names one of a fresh
// document's GPU UUIDs.
type claim struct {
	uuid string
	env  []byte
}

// swap makes d p's last verified document and returns the one before,
// and the other peers whose last documents, made within the conflict
// window of d, claim one of d's GPU UUIDs (one UUID each): a dispute,
// which proves nothing by itself (a UUID is a string anyone can write)
// and lowers confidence in both, boundedly, unless CC settles it.
func (c *Challenger) swap(p peer.ID, l lastDoc) (lastDoc, map[peer.ID]claim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		c.last = make(map[peer.ID]lastDoc)
	}
	prev, d := c.last[p], l.doc
	c.last[p] = l
	mine := map[string]bool{}
	for _, g := range d.Gpus {
		mine[g.Uuid] = true
	}
	made := time.UnixMilli(d.CreatedUnixMs)
	others := map[peer.ID]claim{}
	for q, o := range c.last {
		if q == p || time.UnixMilli(o.doc.CreatedUnixMs).Sub(made).Abs() > attest.ConflictWindow {
			continue
		}
		for _, g := range o.doc.Gpus {
			if mine[g.Uuid] {
				others[q] = claim{g.Uuid, o.env}
				break
			}
		}
	}
	return prev, others
}
