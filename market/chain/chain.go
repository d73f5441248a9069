// Package chain is the shape of a party's lease records (TrustChain, Otte,
// de Vos and Pouwelse 2017): each party keeps its records as a chain of
// blocks, sequence-numbered and hash-linked, each signed by the chain's
// owner. A record is proposed by one party in its chain and completed by
// the counterparty's agreement in its own, which names the proposal by its
// seq and hash over its own previous block: one signature over both
// chains' heads. A proposal that no agreement completes stays in its
// owner's chain as a half-signed record.
//
// So a record cannot be hidden or re-dated without proof: two blocks of
// one owner at one seq (a fork), a block whose prev names another block
// than the owner's one before it (a broken link), or two blocks of one
// owner closing one lease on different receipts (a re-dating) each prove,
// by the owner's own signatures, that the owner lied; and a block names
// every block before it, so a chain served with one missing is seen to
// be. A proposal carries its lease's term co-signed by both parties (not
// the lease, whose workload stays between them), so its receipt's dates
// are checked against the term both signed.
//
// Like package market, it has no network, no clock and no randomness of
// its own.
package chain

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// Domain is what a block's signature is made under: it never verifies as
// a signature over anything else.
const Domain = "idlegrid-chain-block"

// MaxBlockSize bounds a signed block: a receipt, a term and an
// extension, each of a few hundred bytes, and room to spare (a receipt
// over p2p's 4 KiB is served to no one anyway).
const MaxBlockSize = 16 << 10

// Errors of blocks and chains.
var (
	// ErrBlock wraps every block that is malformed, or inconsistent with
	// itself or with what it names.
	ErrBlock = errors.New("bad chain block")
	// ErrSignature is a block whose owner's signature does not verify.
	ErrSignature = errors.New("chain block signature does not verify")
	// ErrDates is a block whose receipt's dates its lease's term, or the
	// checker's clock, rules out.
	ErrDates = errors.New("chain block dates out of bounds")
	// ErrGap is a chain served with a block missing.
	ErrGap = errors.New("chain has a gap")
)

// Block is a signed block, opened: its body checked against its signature
// and itself.
type Block struct {
	*pb.Block
	Signed *pb.SignedBlock
	// Hash is SHA-256 of Signed.Body: what the next block's prev, and an
	// agreement's link_hash, name.
	Hash []byte
}

// Owner is the block's signer, the owner of its chain.
func (b *Block) Owner() peer.ID { return peer.ID(b.Block.Owner) }

// Counterparty is the other party of the block's lease.
func (b *Block) Counterparty() peer.ID { return peer.ID(b.Block.Counterparty) }

// Proposal says whether b proposes a record (true) or agrees to one.
func (b *Block) Proposal() bool { return b.LinkSeq == 0 }

// Receipt decodes the block's receipt; Open has checked it decodes.
func (b *Block) Receipt() *pb.Receipt {
	rc := new(pb.Receipt)
	if err := market.Unmarshal(b.Block.Receipt, rc); err != nil {
		return nil
	}
	return rc
}

func bad(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrBlock, fmt.Sprintf(format, a...))
}

// Propose makes the block after head (nil: the chain's first) in the
// chain of key's peer that proposes the receipt rc for the lease
// co-signed in lease, with the extension that set its term (nil: none).
// The block carries the lease's term (market.SignedTerm), not the lease.
// key's peer must be a party to the lease.
func Propose(key crypto.PrivKey, head *Block, rc *pb.Receipt, lease, ext *pb.CoSigned) (*Block, error) {
	self, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, err
	}
	term, err := market.SignedTerm(lease)
	if err != nil {
		return nil, bad("lease %s: %v", rc.LeaseId, err)
	}
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(rc)
	if err != nil {
		return nil, err
	}
	other := peer.ID(rc.Renter)
	if other == self {
		other = peer.ID(rc.Provider)
	}
	b := &pb.Block{Version: market.Version, Owner: []byte(self), Counterparty: []byte(other), Receipt: body, Term: term, Extension: ext, Swarm: rc.Swarm}
	return sign(key, head, b)
}

// Agree makes the block after head in the chain of key's peer that
// completes proposal, a proposal made to key's peer, on the very same
// receipt.
func Agree(key crypto.PrivKey, head *Block, proposal *Block) (*Block, error) {
	self, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, err
	}
	if !proposal.Proposal() || proposal.Counterparty() != self {
		return nil, bad("an agreement completes a proposal to its own chain's owner, and %s's block %d is not one to %s", proposal.Owner(), proposal.Seq, self)
	}
	b := &pb.Block{Version: market.Version, Owner: []byte(self), Counterparty: proposal.Block.Owner, LinkSeq: proposal.Seq, LinkHash: proposal.Hash,
		Receipt: proposal.Block.Receipt, Swarm: proposal.Swarm}
	return sign(key, head, b)
}

func sign(key crypto.PrivKey, head *Block, b *pb.Block) (*Block, error) {
	b.Seq = 1
	if head != nil {
		if head.Owner() != peer.ID(b.Owner) {
			return nil, bad("head is %s's block, not %s's", head.Owner(), peer.ID(b.Owner))
		}
		b.Seq, b.Prev = head.Seq+1, head.Hash
	}
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(b)
	if err != nil {
		return nil, err
	}
	sig, err := key.Sign(signedBytes(body))
	if err != nil {
		return nil, err
	}
	return Open(&pb.SignedBlock{Body: body, Signature: sig})
}

// signedBytes is what an owner signs: the domain and the body, each
// length-prefixed, as market's co-signed documents are.
func signedBytes(body []byte) []byte {
	return market.SignedBytes(Domain, body)
}

// Open checks a signed block: its size, its owner's signature, its fields,
// and, in a proposal, its receipt against its lease's term co-signed by
// both parties (the same lease, parties and swarm, and the extension that
// set the term when the receipt names one). Dates against a clock
// are CheckDates's.
func Open(sb *pb.SignedBlock) (*Block, error) {
	if sb == nil || len(sb.Body) == 0 {
		return nil, bad("empty")
	}
	if n := proto.Size(sb); n > MaxBlockSize {
		return nil, bad("%d bytes; limit %d", n, MaxBlockSize)
	}
	b := new(pb.Block)
	if err := market.Unmarshal(sb.Body, b); err != nil {
		return nil, bad("%v", err)
	}
	owner := peer.ID(b.Owner)
	pub, err := owner.ExtractPublicKey()
	if err != nil {
		return nil, bad("owner %q has no embedded key", owner)
	}
	if ok, err := pub.Verify(signedBytes(sb.Body), sb.Signature); err != nil || !ok {
		return nil, fmt.Errorf("%w: %s's block %d", ErrSignature, owner, b.Seq)
	}
	sum := sha256.Sum256(sb.Body)
	blk := &Block{Block: b, Signed: sb, Hash: sum[:]}
	if err := blk.check(); err != nil {
		return nil, err
	}
	return blk, nil
}

func (b *Block) check() error {
	rc := new(pb.Receipt)
	switch {
	case b.Version != market.Version:
		return bad("version %d; want %d", b.Version, market.Version)
	case b.Seq == 0:
		return bad("seq 0; a chain starts at 1")
	case b.Seq == 1 && len(b.Prev) != 0, b.Seq > 1 && len(b.Prev) != sha256.Size:
		return bad("block %d's prev is %d bytes; want none at seq 1, else %d", b.Seq, len(b.Prev), sha256.Size)
	case b.Owner() == b.Counterparty():
		return bad("block %d names its owner as its counterparty", b.Seq)
	case market.Unmarshal(b.Block.Receipt, rc) != nil:
		return bad("block %d's receipt does not decode", b.Seq)
	case rc.Swarm != b.Swarm:
		return bad("block %d is of swarm %q, its receipt of %q", b.Seq, b.Swarm, rc.Swarm)
	case !parties(rc, b.Owner(), b.Counterparty()):
		return bad("block %d's receipt is between %s and %s, not its owner and counterparty", b.Seq, peer.ID(rc.Renter), peer.ID(rc.Provider))
	}
	if !b.Proposal() {
		if len(b.LinkHash) != sha256.Size || b.Term != nil || b.Extension != nil {
			return bad("agreement %d links by a %d-byte hash and carries a term or an extension", b.Seq, len(b.LinkHash))
		}
		return nil
	}
	if len(b.LinkHash) != 0 {
		return bad("proposal %d links to a block", b.Seq)
	}
	_, _, err := b.term(rc)
	return err
}

// parties says whether rc is between a and b, either way round.
func parties(rc *pb.Receipt, a, b peer.ID) bool {
	r, p := peer.ID(rc.Renter), peer.ID(rc.Provider)
	return (r == a && p == b) || (r == b && p == a)
}

// term is the start and duration of the lease a proposal's receipt
// closes: its term co-signed by both parties, and the extension that set
// it when the receipt names one, checked against the receipt.
func (b *Block) term(rc *pb.Receipt) (start time.Time, duration uint64, err error) {
	t, err := market.OpenCoSigned[*pb.Term](b.Term, market.Renter, market.Provider)
	if err != nil {
		return start, 0, bad("proposal %d's term: %v", b.Seq, err)
	}
	start, duration = time.UnixMilli(t.StartUnixMs), t.DurationSeconds
	switch {
	case t.LeaseId != rc.LeaseId || !bytes.Equal(t.LeaseHash, rc.LeaseHash):
		return start, 0, bad("proposal %d's receipt closes another lease than its term's", b.Seq)
	case !bytes.Equal(t.Renter, rc.Renter) || !bytes.Equal(t.Provider, rc.Provider):
		return start, 0, bad("proposal %d's receipt names other parties than its term", b.Seq)
	case t.Swarm != rc.Swarm:
		return start, 0, bad("proposal %d's receipt is of swarm %q, its term of %q", b.Seq, rc.Swarm, t.Swarm)
	case len(rc.ExtensionHash) == 0 && b.Extension != nil:
		return start, 0, bad("proposal %d carries an extension its receipt does not name", b.Seq)
	case len(rc.ExtensionHash) == 0:
		return start, duration, nil
	case !bytes.Equal(market.BodyHash(b.Extension), rc.ExtensionHash):
		return start, 0, bad("proposal %d does not carry the extension its receipt names", b.Seq)
	}
	e, err := market.OpenCoSigned[*pb.Extension](b.Extension, market.Renter, market.Provider)
	switch {
	case err != nil:
		return start, 0, bad("proposal %d's extension: %v", b.Seq, err)
	case !bytes.Equal(e.LeaseHash, t.LeaseHash) || !bytes.Equal(e.Renter, t.Renter) || !bytes.Equal(e.Provider, t.Provider):
		return start, 0, bad("proposal %d's extension is of another lease", b.Seq)
	case e.DurationSeconds <= duration || e.DurationSeconds > market.MaxTermSeconds:
		return start, 0, bad("proposal %d's extension sets %d s; want more than the lease's %d and at most %d", b.Seq, e.DurationSeconds, duration, market.MaxTermSeconds)
	}
	return start, e.DurationSeconds, nil
}

// CheckDates checks a proposal's receipt's dates: it starts when its
// lease does, ends no earlier, no later than its term's end and than now
// (each give or take skew), and meters no more than its term. An
// agreement's dates are its proposal's: check that.
func CheckDates(b *Block, now time.Time, skew time.Duration) error {
	if !b.Proposal() {
		return nil
	}
	rc := b.Receipt()
	start, duration, err := b.term(rc)
	if err != nil {
		return err
	}
	termEnd := start.Add(time.Duration(duration) * time.Second)
	from, end := time.UnixMilli(rc.StartUnixMs), time.UnixMilli(rc.EndUnixMs)
	switch {
	case !from.Equal(start):
		return fmt.Errorf("%w: %s's block %d: the receipt starts at %s, its lease at %s", ErrDates, b.Owner(), b.Seq, from.UTC(), start.UTC())
	case end.Before(from):
		return fmt.Errorf("%w: %s's block %d: the receipt ends at %s, before it starts", ErrDates, b.Owner(), b.Seq, end.UTC())
	case end.After(termEnd.Add(skew)):
		return fmt.Errorf("%w: %s's block %d: the receipt ends at %s, past its term's end %s", ErrDates, b.Owner(), b.Seq, end.UTC(), termEnd.UTC())
	case end.After(now.Add(skew)):
		return fmt.Errorf("%w: %s's block %d: the receipt ends at %s, in the future", ErrDates, b.Owner(), b.Seq, end.UTC())
	case rc.MeteredSeconds > duration:
		return fmt.Errorf("%w: %s's block %d: %d seconds metered in a term of %d", ErrDates, b.Owner(), b.Seq, rc.MeteredSeconds, duration)
	}
	return nil
}

// Completes says whether agreement completes proposal: it links to it by
// seq and hash, between the same two parties, on the same receipt.
func Completes(agreement, proposal *Block) bool {
	return !agreement.Proposal() && proposal.Proposal() &&
		agreement.Counterparty() == proposal.Owner() && proposal.Counterparty() == agreement.Owner() &&
		agreement.LinkSeq == proposal.Seq && bytes.Equal(agreement.LinkHash, proposal.Hash) &&
		bytes.Equal(agreement.Block.Receipt, proposal.Block.Receipt)
}
