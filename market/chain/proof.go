package chain

import (
	"bytes"
	"fmt"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Kind is how two blocks of one owner contradict each other.
type Kind int

// The contradictions a pair of blocks proves.
const (
	// Fork is two blocks at one seq: the owner rewrote its chain.
	Fork Kind = iota + 1
	// BrokenLink is a block whose prev names another block than the
	// owner's block before it: the same, seen from the next block.
	BrokenLink
	// TwoRecords is two blocks closing one lease: a record re-dated, or
	// counted twice.
	TwoRecords
)

func (k Kind) String() string {
	switch k {
	case Fork:
		return "fork"
	case BrokenLink:
		return "broken link"
	case TwoRecords:
		return "two records of one lease"
	}
	return fmt.Sprintf("kind %d", int(k))
}

// Conflict is two signed blocks of one owner that cannot both be true:
// proof, by the owner's own signatures, that it lied. Prove checks one.
type Conflict struct {
	Kind  Kind
	Owner peer.ID
	A, B  *pb.SignedBlock
}

func (c *Conflict) Error() string {
	return fmt.Sprintf("%s's chain: %s", c.Owner, c.Kind)
}

// conflict is the contradiction between a and b, two opened blocks of
// one owner, or nil for none.
func conflict(a, b *Block) *Conflict {
	if c := rewrite(a, b); c != nil || a.Owner() != b.Owner() || bytes.Equal(a.Hash, b.Hash) || !sameLease(a, b) {
		return c
	}
	return &Conflict{Kind: TwoRecords, Owner: a.Owner(), A: a.Signed, B: b.Signed}
}

// rewrite is the fork or broken link that a and b, two opened blocks of
// one owner, show, or nil for none.
func rewrite(a, b *Block) *Conflict {
	if a.Owner() != b.Owner() || bytes.Equal(a.Hash, b.Hash) {
		return nil
	}
	if a.Seq > b.Seq {
		a, b = b, a
	}
	c := &Conflict{Owner: a.Owner(), A: a.Signed, B: b.Signed}
	switch {
	case a.Seq == b.Seq:
		c.Kind = Fork
	case b.Seq == a.Seq+1 && !bytes.Equal(b.Prev, a.Hash):
		c.Kind = BrokenLink
	default:
		return nil
	}
	return c
}

// sameLease says whether a and b close one lease.
func sameLease(a, b *Block) bool {
	ra, rb := a.Receipt(), b.Receipt()
	return ra.LeaseId == rb.LeaseId && bytes.Equal(ra.LeaseHash, rb.LeaseHash)
}

// Prove checks that a and b, two signed blocks of swarm, prove their
// owner lied, and returns the owner and how. Anything else, two blocks
// that agree included, is an error: evidence must prove, never merely
// accuse.
func Prove(a, b *pb.SignedBlock, swarm string) (peer.ID, Kind, error) {
	ba, err := Open(a)
	if err != nil {
		return "", 0, err
	}
	bb, err := Open(b)
	if err != nil {
		return "", 0, err
	}
	if ba.Swarm != swarm || bb.Swarm != swarm {
		return "", 0, bad("blocks of swarms %q and %q, not %q", ba.Swarm, bb.Swarm, swarm)
	}
	c := conflict(ba, bb)
	if c == nil {
		return "", 0, bad("%s's block %d and %s's block %d do not contradict each other", ba.Owner(), ba.Seq, bb.Owner(), bb.Seq)
	}
	return c.Owner, c.Kind, nil
}

// Against is the conflict between a block held and one served in its
// place, or nil when they agree.
func Against(held, served *Block) *Conflict { return conflict(held, served) }

// Verify checks blocks, served as owner's chain in swarm from seq from
// on: each opens and is owner's and the swarm's, their seqs run on from
// from with none missing, each names the one before it, and none closes
// a lease another closed. It returns the blocks opened, or an error: a
// *Conflict when two of them prove the owner lied, else one wrapping
// ErrGap or ErrBlock (or ErrSignature).
func Verify(owner peer.ID, swarm string, from uint64, blocks []*pb.SignedBlock) ([]*Block, error) {
	out := make([]*Block, 0, len(blocks))
	byLease := make(map[string]*Block, len(blocks))
	for i, sb := range blocks {
		b, err := Open(sb)
		if err != nil {
			return out, err
		}
		switch {
		case b.Owner() != owner:
			return out, bad("block %d is %s's, in %s's chain", b.Seq, b.Owner(), owner)
		case b.Swarm != swarm:
			return out, bad("%s's block %d is of swarm %q, not %q", owner, b.Seq, b.Swarm, swarm)
		}
		if i > 0 {
			last := out[i-1]
			if c := rewrite(last, b); c != nil {
				return out, c
			}
			if b.Seq != last.Seq+1 {
				return out, fmt.Errorf("%w: %s's block %d follows block %d", ErrGap, owner, b.Seq, last.Seq)
			}
		} else if b.Seq != from {
			return out, fmt.Errorf("%w: %s's chain from %d starts at block %d", ErrGap, owner, from, b.Seq)
		}
		rc := b.Receipt()
		key := rc.LeaseId + "\x00" + string(rc.LeaseHash)
		if other, ok := byLease[key]; ok {
			return out, conflict(other, b)
		}
		byLease[key] = b
		out = append(out, b)
	}
	return out, nil
}
