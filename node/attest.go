package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	attestpb "github.com/idlegrid/idlegrid/attest/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
)

// attestMaxAge is how old (or how far ahead) an attestation may be.
const attestMaxAge = 30 * time.Second

// attestations remembers the last verified document from each peer, so a
// verdict can say what changed.
type attestations struct {
	mu   sync.Mutex
	last map[peer.ID]*attestpb.Document
}

func (a *attestations) swap(p peer.ID, d *attestpb.Document) *attestpb.Document {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last == nil {
		a.last = make(map[peer.ID]*attestpb.Document)
	}
	prev := a.last[p]
	a.last[p] = d
	return prev
}

// makeDocument answers a challenge: this provider's GPUs as its source
// reads them now, over the nonce, with each GPU's confidential-computing
// evidence over the same nonce where the source gives it, backing its
// current offer; and the standing document that offer names by hash.
func (n *Node) makeDocument(ctx context.Context, nonce []byte) (fresh, standing []byte, err error) {
	p := n.provider
	if p == nil || p.source == nil {
		return nil, nil, errors.New("this node sells no GPUs it can attest")
	}
	inv, err := p.source.Inventory(ctx)
	if err != nil {
		return nil, nil, err
	}
	d := attest.NewDocument(inv, n.host.ID(), nonce, time.Now(), []string{ProviderOfferID})
	if cc, ok := p.source.(attest.CCSource); ok {
		ev, err := cc.CCEvidence(ctx, nonce)
		if err != nil {
			return nil, nil, err
		}
		attest.AttachCC(d, ev)
	}
	if fresh, err = attest.SignDocument(n.key, d); err != nil {
		return nil, nil, err
	}
	if s := p.standing.Load(); s != nil {
		standing = *s
	}
	return fresh, standing, nil
}

// Attest challenges a peer and verifies its answer: signature, signer,
// nonce, freshness, each GPU's confidential-computing evidence, that its
// offer in this node's book claims only attested GPUs and names, by hash,
// a standing attestation of the same hardware, and what changed since its
// last document.
func (n *Node) Attest(ctx context.Context, req api.AttestRequest) (api.AttestResult, error) {
	id, err := peer.Decode(req.Peer)
	if err != nil {
		return api.AttestResult{}, api.BadRequest{Err: fmt.Errorf("peer %q: not a peer ID", req.Peer)}
	}
	res := api.AttestResult{Peer: id.String(), GPUs: []api.AttestedGPU{}, Changes: []string{}}
	a, err := p2p.Challenge(ctx, n.host, id)
	if err != nil {
		res.Reason = err.Error()
		return res, nil
	}
	res.RTTMillis = float64(a.RTT) / float64(time.Millisecond)
	now := time.Now()
	d, err := attest.VerifyDocument(a.Fresh, id, a.Nonce, now, attestMaxAge)
	if err != nil {
		res.Reason = err.Error()
		return res, nil
	}
	res.Verified, res.Driver, res.CUDA = true, d.DriverVersion, d.CudaVersion
	var verdicts []string
	for _, g := range d.Gpus {
		cc := attest.CCVerdict(g.CcReport, g.CcCertChain, a.Nonce, n.ccRoots, now)
		verdicts = append(verdicts, cc)
		res.GPUs = append(res.GPUs, api.AttestedGPU{UUID: g.Uuid, Name: g.Name, MemoryGiB: g.MemoryBytes >> 30, ComputeCapability: g.ComputeCapability, CC: cc})
	}
	res.CC = summariseCC(verdicts)
	res.Offer = n.checkOffer(id, d, a.Standing)
	if prev := n.attested.swap(id, d); prev != nil {
		res.Changes = append(res.Changes, attest.Changes(prev, d)...)
	}
	return res, nil
}

// checkOffer says whether id's offer in the book is backed by the fresh
// document d: its GPUs are among d's, and the standing document it names
// by hash is the one the provider sent and shows the same hardware.
func (n *Node) checkOffer(id peer.ID, d *attestpb.Document, standing []byte) string {
	o, ok := n.market.book.Snapshot().Offer(id, ProviderOfferID)
	if !ok {
		return "no offer in the book"
	}
	if err := attest.CheckOffer(d, o); err != nil {
		return "not covered: " + err.Error()
	}
	if len(o.AttestationHash) == 0 {
		return "covered; the offer names no standing attestation"
	}
	sd, err := attest.VerifyStanding(standing, id, o.AttestationHash, o.Header.Id)
	if err == nil {
		err = attest.SameHardware(sd, d)
	}
	if err != nil {
		return "not covered: " + err.Error()
	}
	return "covered; its attestation hash matches the hardware"
}

// summariseCC folds per-GPU CC verdicts into one: the verdict all share,
// or "mixed: " and the first that is not "verified".
func summariseCC(verdicts []string) string {
	if len(verdicts) == 0 {
		return attest.CCAbsent
	}
	for _, v := range verdicts[1:] {
		if v != verdicts[0] {
			i := slices.IndexFunc(verdicts, func(w string) bool { return w != attest.CCVerified })
			return "mixed: " + verdicts[i]
		}
	}
	return verdicts[0]
}
