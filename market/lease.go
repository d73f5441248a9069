package market

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// Co-signing domains: a signature over a lease never verifies as one over
// a receipt, nor as any enveloped market message.
const (
	LeaseDomain     = "idlegrid-lease"
	ReceiptDomain   = "idlegrid-receipt"
	ExtensionDomain = "idlegrid-extension"
	TermDomain      = "idlegrid-term"
)

// Party is one side of a lease.
type Party int

// The two sides of a lease.
const (
	Renter Party = iota + 1
	Provider
)

func (p Party) String() string {
	if p == Renter {
		return "renter"
	}
	return "provider"
}

// Errors of co-signed documents.
var (
	ErrCoSignature = errors.New("co-signature does not verify")
	ErrCoSigner    = errors.New("signed by a peer that is not the party named")
	ErrUnsigned    = errors.New("a party's signature is missing")
)

// CoSignable is a wire type both parties sign: a Lease, a Receipt, an
// Extension or a lease's Term.
type CoSignable interface {
	*pb.Lease | *pb.Receipt | *pb.Extension | *pb.Term
	proto.Message
	GetRenter() []byte
	GetProvider() []byte
}

func domainOf[M CoSignable]() string {
	var m M
	switch any(m).(type) {
	case *pb.Lease:
		return LeaseDomain
	case *pb.Extension:
		return ExtensionDomain
	case *pb.Term:
		return TermDomain
	}
	return ReceiptDomain
}

// SignedBytes is what a party signs: the domain, length-prefixed, then the
// body, as libp2p's envelopes do.
func SignedBytes(domain string, body []byte) []byte {
	b := binary.AppendUvarint(nil, uint64(len(domain)))
	b = append(b, domain...)
	b = binary.AppendUvarint(b, uint64(len(body)))
	return append(b, body...)
}

// NewCoSigned marshals m deterministically and signs it as party with key,
// whose peer must be the one m names for that party.
func NewCoSigned[M CoSignable](key crypto.PrivKey, as Party, m M) (*pb.CoSigned, error) {
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	cs := &pb.CoSigned{Body: body}
	return cs, CoSign[M](key, as, cs)
}

// CoSign adds party's signature, made with key, to cs. It checks that key
// is the party's and that the other party's signature, if there, verifies.
func CoSign[M CoSignable](key crypto.PrivKey, as Party, cs *pb.CoSigned) error {
	m, err := openBody[M](cs)
	if err != nil {
		return err
	}
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return err
	}
	if want := partyID(m, as); id != want {
		return fmt.Errorf("%w: key is %s, %s is %s", ErrCoSigner, id, as, want)
	}
	if sig := signatureOf(cs, other(as)); len(sig) > 0 {
		if err := verifyParty(m, other(as), domainOf[M](), cs.Body, sig); err != nil {
			return err
		}
	}
	sig, err := key.Sign(SignedBytes(domainOf[M](), cs.Body))
	if err != nil {
		return err
	}
	if as == Renter {
		cs.RenterSignature = sig
	} else {
		cs.ProviderSignature = sig
	}
	if l, ok := any(m).(*pb.Lease); ok {
		return coSignTerm(key, as, l, cs)
	}
	return nil
}

// TermOf is the term of lease l, co-signed as cs: what its records are
// checked against.
func TermOf(l *pb.Lease, cs *pb.CoSigned) *pb.Term {
	return &pb.Term{Version: Version, LeaseId: l.Id, LeaseHash: BodyHash(cs), Renter: l.Renter, Provider: l.Provider,
		StartUnixMs: l.StartUnixMs, DurationSeconds: l.DurationSeconds, Swarm: l.Bid.GetHeader().GetSwarm()}
}

// coSignTerm signs, as party, the term of lease l beside the lease in
// cs: the term's document is made by the first to sign, and must be the
// lease's own when the other party has signed.
func coSignTerm(key crypto.PrivKey, as Party, l *pb.Lease, cs *pb.CoSigned) error {
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(TermOf(l, cs))
	if err != nil {
		return err
	}
	switch {
	case cs.Term == nil && len(signatureOf(cs, other(as))) > 0:
		return invalid("term", "lease %s is signed by its %s without its term", clip(l.Id), other(as))
	case cs.Term == nil:
		cs.Term = &pb.CoSigned{Body: body}
	case !bytes.Equal(cs.Term.Body, body):
		return invalid("term", "not lease %s's", clip(l.Id))
	}
	return CoSign[*pb.Term](key, as, cs.Term)
}

// other is the other side of a lease than p.
func other(p Party) Party {
	if p == Renter {
		return Provider
	}
	return Renter
}

// SignedTerm is the term co-signed beside the lease co-signed as cs,
// checked: the lease's own, signed by both parties. A lease co-signed
// before terms were has none.
func SignedTerm(cs *pb.CoSigned) (*pb.CoSigned, error) {
	l, err := OpenCoSigned[*pb.Lease](cs, Renter, Provider)
	if err != nil {
		return nil, err
	}
	if cs.Term == nil {
		return nil, invalid("term", "lease %s was co-signed without its term", clip(l.Id))
	}
	t, err := OpenCoSigned[*pb.Term](cs.Term, Renter, Provider)
	if err != nil {
		return nil, err
	}
	if !proto.Equal(t, TermOf(l, cs)) {
		return nil, invalid("term", "not lease %s's", clip(l.Id))
	}
	return cs.Term, nil
}

// OpenCoSigned decodes cs's body and verifies the signatures of the
// parties in need (each must be present) and of any other present.
func OpenCoSigned[M CoSignable](cs *pb.CoSigned, need ...Party) (M, error) {
	m, err := openBody[M](cs)
	if err != nil {
		return m, err
	}
	for _, p := range []Party{Renter, Provider} {
		sig := signatureOf(cs, p)
		if len(sig) == 0 {
			for _, n := range need {
				if n == p {
					return m, fmt.Errorf("%w: %s", ErrUnsigned, p)
				}
			}
			continue
		}
		if err := verifyParty(m, p, domainOf[M](), cs.Body, sig); err != nil {
			return m, err
		}
	}
	return m, nil
}

// BodyHash is SHA-256 of a co-signed body: a receipt names its lease by it.
func BodyHash(cs *pb.CoSigned) []byte {
	sum := sha256.Sum256(cs.GetBody())
	return sum[:]
}

// SameBody reports whether two co-signed documents carry the same terms.
func SameBody(a, b *pb.CoSigned) bool { return bytes.Equal(a.GetBody(), b.GetBody()) }

func openBody[M CoSignable](cs *pb.CoSigned) (M, error) {
	var m M
	if cs == nil || len(cs.Body) == 0 {
		return m, invalid("body", "empty")
	}
	if len(cs.Body) > MaxCoSignedSize {
		return m, invalid("body", "%d bytes; limit %d", len(cs.Body), MaxCoSignedSize)
	}
	m = m.ProtoReflect().New().Interface().(M)
	if err := Unmarshal(cs.Body, m); err != nil {
		return m, invalid("body", "%v", err)
	}
	return m, nil
}

func signatureOf(cs *pb.CoSigned, p Party) []byte {
	if p == Renter {
		return cs.RenterSignature
	}
	return cs.ProviderSignature
}

func partyID[M CoSignable](m M, p Party) peer.ID {
	if p == Renter {
		return peer.ID(m.GetRenter())
	}
	return peer.ID(m.GetProvider())
}

func verifyParty[M CoSignable](m M, p Party, domain string, body, sig []byte) error {
	id := partyID(m, p)
	pub, err := id.ExtractPublicKey()
	if err != nil {
		return fmt.Errorf("%w: %s %q has no embedded key: %v", ErrCoSigner, p, id, err)
	}
	ok, err := pub.Verify(SignedBytes(domain, body), sig)
	if err != nil || !ok {
		return fmt.Errorf("%w: %s's", ErrCoSignature, p)
	}
	return nil
}

// ValidateLease checks a lease's fields: both parties, terms in range,
// a workload the bid agrees with. It does not read the clock.
func (l Limits) ValidateLease(m *pb.Lease) error {
	switch {
	case m.Version != Version:
		return invalid("version", "%d; want %d", m.Version, Version)
	case !validID(m.Id):
		return invalid("id", "%q; %s", clip(m.Id), idRule)
	}
	for _, p := range []struct {
		field string
		b     []byte
	}{{"renter", m.Renter}, {"provider", m.Provider}} {
		if _, err := peer.IDFromBytes(p.b); err != nil {
			return invalid(p.field, "not a peer ID")
		}
	}
	if bytes.Equal(m.Renter, m.Provider) {
		return invalid("provider", "the renter itself")
	}
	switch {
	case !validID(m.OfferId):
		return invalid("offer_id", "%q; %s", clip(m.OfferId), idRule)
	case m.Bid == nil || m.Bid.Gpu == nil:
		return invalid("bid", "missing")
	case m.Bid.Header.GetSwarm() != l.Swarm:
		return invalid("bid.header.swarm", "%s; this node is in %s", swarmName(m.Bid.Header.GetSwarm()), swarmName(l.Swarm))
	case m.Tier == pb.Tier_TIER_UNSPECIFIED || m.Tier != m.Bid.Tier:
		return invalid("tier", "%s; the bid's is %s", m.Tier, m.Bid.Tier)
	case m.GpuCount < 1 || m.GpuCount > m.Bid.Gpu.Count:
		return invalid("gpu_count", "%d; want 1 to the bid's %d", m.GpuCount, m.Bid.Gpu.Count)
	case m.StartUnixMs <= 0:
		return invalid("start_unix_ms", "%d", m.StartUnixMs)
	case m.DurationSeconds < 1 || m.DurationSeconds != m.Bid.DurationSeconds:
		return invalid("duration_seconds", "%d; want the bid's %d", m.DurationSeconds, m.Bid.DurationSeconds)
	case m.PriceMicros == 0:
		return invalid("price_micros", "0")
	case m.PriceMicros > m.Bid.MaxPriceMicros:
		return invalid("price_micros", "%s above the renter's cap %s", money(m.PriceMicros), money(m.Bid.MaxPriceMicros))
	case m.Currency != m.Bid.Currency:
		return invalid("currency", "%q; the bid's is %q", m.Currency, m.Bid.Currency)
	case m.Workload == nil || m.Workload.Image == "":
		return invalid("workload.image", "empty")
	case m.Workload.Image != m.Bid.Image:
		return invalid("workload.image", "%q; the bid's is %q", m.Workload.Image, m.Bid.Image)
	case m.Workload.WorkloadClass != m.Bid.WorkloadClass:
		return invalid("workload.workload_class", "%q; the bid's is %q", m.Workload.WorkloadClass, m.Bid.WorkloadClass)
	}
	if err := l.str("workload.image", m.Workload.Image); err != nil {
		return err
	}
	if err := l.strs("workload.command", m.Workload.Command); err != nil {
		return err
	}
	if err := l.strs("workload.env", m.Workload.Env); err != nil {
		return err
	}
	for i, kv := range m.Workload.Env {
		if k, _, ok := bytes.Cut([]byte(kv), []byte("=")); !ok || len(k) == 0 {
			return invalid(indexed("workload.env", i), "%q: want KEY=VALUE", kv)
		}
	}
	if err := ValidateInputs(m.Workload.Inputs); err != nil {
		return err
	}
	if err := ValidateOutputs(m.Workload.Outputs); err != nil {
		return err
	}
	if err := ValidateDatasets(m.Workload.Datasets); err != nil {
		return err
	}
	return leasePayment(m)
}

// MaxInputs bounds the tars of data a lease puts in its container, and
// MaxOutputs those it takes out.
const MaxInputs, MaxOutputs = 8, 8

// ValidateOutputs checks a workload's outputs: clean paths in /workspace.
func ValidateOutputs(outs []string) error {
	if len(outs) > MaxOutputs {
		return invalid("workload.outputs", "%d; at most %d", len(outs), MaxOutputs)
	}
	for i, p := range outs {
		if !InWorkspace(p) {
			return invalid(indexed("workload.outputs", i), "%q; want a clean path in /workspace", clip(p))
		}
	}
	return nil
}

// InWorkspace reports whether p is a clean path in /workspace, the one
// place a job may write: where inputs go and outputs come from.
func InWorkspace(p string) bool {
	return len(p) <= 256 && path.Clean(p) == p && (p == "/workspace" || strings.HasPrefix(p, "/workspace/"))
}

// MaxDatasets bounds the datasets a lease mounts; MaxDatasetBytes one
// dataset's bytes (a provider's cache bounds them further).
const MaxDatasets, MaxDatasetBytes = 8, 1 << 50

// MaxSealedKey bounds an encrypted dataset's sealed key.
const MaxSealedKey = 1024 // = data.MaxSealedKey

// mountDenied are the folders a dataset may be mounted neither at nor
// under: the job's writable places and the system's.
var mountDenied = []string{"/workspace", "/tmp", "/proc", "/sys", "/dev", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/usr", "/var", "/run"}

// ValidateDatasets checks a workload's datasets: a CIDv1, bytes and a
// mount path each, no path twice nor one inside another.
func ValidateDatasets(dss []*pb.DatasetMount) error {
	if len(dss) > MaxDatasets {
		return invalid("workload.datasets", "%d; at most %d", len(dss), MaxDatasets)
	}
	for i, d := range dss {
		field := indexed("workload.datasets", i)
		if c, err := cid.Decode(d.GetCid()); err != nil || c.Version() != 1 {
			return invalid(field+".cid", "%q; want a dataset's CIDv1 (bafy…)", clip(d.GetCid()))
		}
		if d.GetBytes() == 0 || d.GetBytes() > MaxDatasetBytes {
			return invalid(field+".bytes", "%d; want 1 to %d", d.GetBytes(), uint64(MaxDatasetBytes))
		}
		if len(d.GetSealedKey()) > MaxSealedKey {
			return invalid(field+".sealed_key", "%d bytes; at most %d", len(d.GetSealedKey()), MaxSealedKey)
		}
		if err := ValidateMountPath(d.GetPath()); err != nil {
			return invalid(field+".path", "%v", err)
		}
		for j, o := range dss[:i] {
			if within(d.GetPath(), o.GetPath()) || within(o.GetPath(), d.GetPath()) {
				return invalid(field+".path", "%q overlaps workload.datasets[%d].path %q", d.GetPath(), j, o.GetPath())
			}
		}
	}
	return nil
}

// ValidateMountPath checks where a dataset is mounted: a clean absolute
// path of at most 256 bytes, not / and outside mountDenied.
func ValidateMountPath(p string) error {
	if len(p) > 256 || !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
		return fmt.Errorf("%q; want a clean absolute path such as /data", clip(p))
	}
	for _, d := range mountDenied {
		if within(p, d) {
			return fmt.Errorf("%q is in %s; mount a dataset elsewhere, such as /data", p, d)
		}
	}
	return nil
}

// within reports whether p is dir or in it.
func within(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// ValidateInputs checks a workload's inputs: a SHA-256 and a size each,
// at a clean absolute path in /workspace, the one place a job may write.
func ValidateInputs(ins []*pb.Input) error {
	if len(ins) > MaxInputs {
		return invalid("workload.inputs", "%d; at most %d", len(ins), MaxInputs)
	}
	for i, in := range ins {
		p := in.GetPath()
		switch {
		case len(in.GetSha256()) != sha256.Size:
			return invalid(indexed("workload.inputs", i)+".sha256", "%d bytes; want %d", len(in.GetSha256()), sha256.Size)
		case in.GetSize() == 0:
			return invalid(indexed("workload.inputs", i)+".size", "0; want the tar's size")
		case !InWorkspace(p):
			return invalid(indexed("workload.inputs", i)+".path", "%q; want a clean path in /workspace", clip(p))
		}
	}
	return nil
}

// LeaseEnd is when a lease's term ends.
func LeaseEnd(m *pb.Lease) time.Time {
	return time.UnixMilli(m.StartUnixMs).Add(time.Duration(m.DurationSeconds) * time.Second)
}

// Meter is what a lease costs when its last verified telemetry beat is at
// last: the seconds from its start to that beat, within its term, and
// their price for its GPUs, rounded up to the micro-unit. Both parties
// compute it from the same chain, so their receipts agree.
func Meter(m *pb.Lease, last time.Time) (seconds, amount uint64) {
	start := time.UnixMilli(m.StartUnixMs)
	if !last.After(start) {
		return 0, 0
	}
	seconds = uint64(last.Sub(start) / time.Second)
	seconds = min(seconds, m.DurationSeconds)
	return seconds, LeaseTotal(m.PriceMicros, m.GpuCount, seconds)
}
