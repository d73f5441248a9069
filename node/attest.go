package node

import (
	"context"
	"errors"
	"fmt"
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
// reads them now, over the nonce, backing its current offer.
func (n *Node) makeDocument(ctx context.Context, nonce []byte) ([]byte, error) {
	p := n.provider
	if p == nil || p.source == nil {
		return nil, errors.New("this node sells no GPUs it can attest")
	}
	inv, err := p.source.Inventory(ctx)
	if err != nil {
		return nil, err
	}
	d := attest.NewDocument(inv, n.host.ID(), nonce, time.Now(), []string{ProviderOfferID})
	return attest.SignDocument(n.key, d)
}

// Attest challenges a peer and verifies its answer: signature, signer,
// nonce, freshness, that its offer in this node's book claims only
// attested GPUs, and what changed since its last document.
func (n *Node) Attest(ctx context.Context, req api.AttestRequest) (api.AttestResult, error) {
	id, err := peer.Decode(req.Peer)
	if err != nil {
		return api.AttestResult{}, api.BadRequest{Err: fmt.Errorf("peer %q: not a peer ID", req.Peer)}
	}
	res := api.AttestResult{Peer: id.String(), GPUs: []api.AttestedGPU{}, Changes: []string{}}
	nonce, env, rtt, err := p2p.Challenge(ctx, n.host, id)
	if err != nil {
		res.Reason = err.Error()
		return res, nil
	}
	res.RTTMillis = float64(rtt) / float64(time.Millisecond)
	d, err := attest.VerifyDocument(env, id, nonce, time.Now(), attestMaxAge)
	if err != nil {
		res.Reason = err.Error()
		return res, nil
	}
	res.Verified, res.Driver, res.CUDA, res.CC = true, d.DriverVersion, d.CudaVersion, "absent"
	if len(d.CcReport) > 0 {
		res.CC = "present, not verified"
	}
	for _, g := range d.Gpus {
		res.GPUs = append(res.GPUs, api.AttestedGPU{UUID: g.Uuid, Name: g.Name, MemoryGiB: g.MemoryBytes >> 30, ComputeCapability: g.ComputeCapability})
	}
	res.Offer = "no offer in the book"
	if o, ok := n.market.book.Snapshot().Offer(id, ProviderOfferID); ok {
		res.Offer = "covered"
		if err := attest.CheckOffer(d, o); err != nil {
			res.Offer = "not covered: " + err.Error()
		}
	}
	if prev := n.attested.swap(id, d); prev != nil {
		res.Changes = append(res.Changes, attest.Changes(prev, d)...)
	}
	return res, nil
}
