//go:build cgo

package attest

import (
	"errors"
	"testing"
	"time"

	marketpb "github.com/idlegrid/idlegrid/market/pb"
)

func TestJudge(t *testing.T) {
	key, id := newKey(t)
	_, other := newKey(t)
	inv := fakeInventory(t, "dgxh100")
	now := time.Now()
	standingDoc := NewDocument(inv, id, Challenge{}, now.Add(-time.Hour), []string{"gpus"})
	standing, err := SignDocument(key, standingDoc)
	if err != nil {
		t.Fatal(err)
	}
	n := challenge(t)
	fresh, err := SignDocument(key, NewDocument(inv, id, n, now, []string{"gpus"}))
	if err != nil {
		t.Fatal(err)
	}
	offer := func(gpus uint32, hash []byte) *marketpb.Offer {
		return &marketpb.Offer{Header: &marketpb.Header{Id: "gpus"}, AttestationHash: hash,
			Gpus: []*marketpb.GPUGroup{{Model: "H100", Count: gpus, VramBytes: 80 << 30, ComputeCapability: 90}}}
	}
	moved := NewDocument(inv, id, Challenge{}, now, []string{"gpus"})
	moved.DriverVersion = "999.0"
	movedEnv, _ := SignDocument(key, moved)
	for _, c := range []struct {
		name     string
		signer   string
		ch       Challenge
		offer    *marketpb.Offer
		standing []byte
		coverage Coverage
		err      error // of the verdict's Problem
	}{
		{"covered by a matching standing attestation", "", n, offer(8, DocumentHash(standing)), standing, CoverageFull, nil},
		{"an offer that names no standing attestation", "", n, offer(8, nil), nil, CoverageNoStanding, nil},
		{"no offer held", "", n, nil, nil, CoverageNoOffer, nil},
		{"an offer of more GPUs than attested", "", n, offer(9, nil), nil, CoverageNone, ErrNotAttested},
		{"a standing document that is not the one named", "", n, offer(8, DocumentHash(standing)), movedEnv, CoverageNone, ErrDocHash},
		{"a standing document of other hardware", "", n, offer(8, DocumentHash(movedEnv)), movedEnv, CoverageNone, ErrDocChanged},
		{"an answer to another nonce", "", Challenge{Challenger: n.Challenger, Nonce: nonce(t)}, offer(8, nil), nil, CoverageNoOffer, ErrDocNonce},
		{"an answer from another peer", "other", n, offer(8, nil), nil, CoverageNoOffer, ErrDocSigner},
		{"an answer to another challenger", "", Challenge{Challenger: other, Nonce: n.Nonce}, offer(8, nil), nil, CoverageNoOffer, ErrDocChallenger},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := id
			if c.signer == "other" {
				p = other
			}
			v := Judge(p, c.ch, fresh, c.standing, c.offer, nil, now, time.Minute)
			if v.Coverage != c.coverage || !errors.Is(v.Problem(), c.err) || (c.err == nil) != (v.Problem() == nil) {
				t.Fatalf("coverage %v, problem %v; want %v, %v", v.Coverage, v.Problem(), c.coverage, c.err)
			}
			if v.Verified() {
				if len(v.CC) != 8 || v.CCSummary != CCAbsent || v.Doc == nil {
					t.Errorf("CC %v %q", v.CC, v.CCSummary)
				}
			} else if v.Doc != nil {
				t.Error("an unverified document is returned")
			}
			if v.OfferLine() == "" {
				t.Error("no words for the coverage")
			}
		})
	}
}

func TestSummariseCC(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
	}{
		{nil, CCAbsent},
		{[]string{CCVerified, CCVerified}, CCVerified},
		{[]string{CCVerified, "invalid: x"}, "mixed: invalid: x"},
		{[]string{CCAbsent, CCVerified}, "mixed: " + CCAbsent},
	} {
		if got := SummariseCC(c.in); got != c.want {
			t.Errorf("SummariseCC(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
