package node

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

// challengeNet is the challenger's view of the swarm: a provider's answer
// to a challenge.
type challengeNet interface {
	Challenge(ctx context.Context, p peer.ID) (p2p.Answer, error)
}

// challenger challenges providers' attestations and judges the answers
// against the offers this node's book holds.
type challenger struct {
	self  peer.ID
	swarm string // the swarm's tag, which every answer must name
	net   challengeNet
	book  func() *market.Snapshot
	roots *x509.CertPool // nil: CC evidence is shown, not verified
	clock clock.Clock
	// observe counts an outcome for reputation, and dispute a GPU UUID
	// two peers claimed; either may be nil.
	observe func(p peer.ID, good bool, weight float64, what string)
	dispute func(a, b peer.ID, uuid string)
	// report gossips evidence this node holds; may be nil.
	report func(ctx context.Context, evidence []byte) error
	// metrics counts the outcomes of challenges; may be nil.
	metrics *metrics.Metrics

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
	rtt     time.Duration
	changes []string
}

// challenge sends p a nonce and judges its answer; err is set only when
// no answer came.
func (c *challenger) challenge(ctx context.Context, p peer.ID) (challenged, error) {
	a, err := c.net.Challenge(ctx, p)
	if err != nil {
		c.count(p, false, reputation.WeightUnreachable, "attestation unanswered: "+err.Error())
		c.metrics.Challenged(metrics.ChallengeUnanswered)
		return challenged{}, err
	}
	o, _ := c.book().Offer(p, offer.ProviderOfferID)
	out := challenged{Verdict: attest.Judge(p, attest.Challenge{Swarm: c.swarm, Challenger: c.self, Nonce: a.Nonce}, a.Fresh, a.Standing, o, c.roots, c.clock.Now(), attestMaxAge), rtt: a.RTT}
	switch {
	case out.Err != nil:
		c.count(p, false, reputation.WeightAttestFailed, "attestation failed: "+out.Err.Error())
		c.metrics.Challenged(metrics.ChallengeFailed)
	case out.Coverage == attest.CoverageNone: // its offer claims what its document does not show
		c.count(p, false, reputation.WeightAttestFailed, "offer not covered: "+out.CoverageErr.Error())
		c.metrics.Challenged(metrics.ChallengeUncovered)
	default:
		c.count(p, true, reputation.WeightAttested, "attested")
		c.metrics.Challenged(metrics.ChallengeVerified)
	}
	if out.Verified() {
		prev, others := c.swap(p, lastDoc{out.Doc, a.Fresh})
		if prev.doc != nil {
			out.changes = attest.Changes(prev.doc, out.Doc)
			c.contradicts(ctx, p, prev.env, a.Fresh)
		}
		for q, claim := range others {
			if !c.settled(ctx, claim.env, a.Fresh) && c.dispute != nil {
				c.dispute(p, q, claim.uuid)
			}
		}
	}
	return out, nil
}

// settled gossips the evidence two peers' documents that claim one GPU
// make, when CC certificates prove it (one GPU's key answered for both
// machines): then it is no dispute but proof against both. It reports
// whether it was.
func (c *challenger) settled(ctx context.Context, other, fresh []byte) bool {
	if c.roots == nil || c.report == nil {
		return false
	}
	ev, err := attest.NewEvidence(other, fresh)
	if err != nil {
		return false
	}
	if offenders, err := attest.VerifyEvidence(ev, c.swarm, c.roots); err != nil || len(offenders) != 2 {
		return false
	}
	return c.report(ctx, ev) == nil
}

// contradicts gossips the evidence two of p's documents make, when they
// prove it cheated (one key, two GPU sets within the conflict window):
// the node that holds them is the one that can show them.
func (c *challenger) contradicts(ctx context.Context, p peer.ID, prev, fresh []byte) {
	if c.report == nil {
		return
	}
	ev, err := attest.NewEvidence(prev, fresh)
	if err != nil {
		return
	}
	if offenders, err := attest.VerifyEvidence(ev, c.swarm, c.roots); err != nil || !slices.Contains(offenders, p) {
		return // a change, not a contradiction
	}
	if err := c.report(ctx, ev); err != nil {
		c.count(p, false, reputation.WeightAttestFailed, "its documents contradict each other; the evidence was not gossiped: "+err.Error())
	}
}

func (c *challenger) count(p peer.ID, good bool, weight float64, what string) {
	if c.observe != nil {
		c.observe(p, good, weight, what)
	}
}

// attested says whether p answered a challenge with a verified document.
func (c *challenger) attested(p peer.ID) bool {
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
func (c *challenger) swap(p peer.ID, l lastDoc) (lastDoc, map[peer.ID]claim) {
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
