package p2p

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio"
)

// BookSyncProtocol hands a newly met peer the signed offers this node
// holds, so a node that joins late (or a light client) has the whole book
// without waiting for every provider to re-publish. The asking peer sends
// the most envelopes it will take (an unsigned varint); the server answers
// with at most that many, each length-prefixed, then closes.
//
// Like every protocol here it is a template: Swarm.Protocol scopes it to a
// swarm, /idlegrid/<swarm>/…, and that is what is served and dialled.
const BookSyncProtocol protocol.ID = "/idlegrid/book/1.1.0"

// Limits of one book sync, served and read alike.
const (
	// MaxSyncOffers bounds how many envelopes one sync carries.
	MaxSyncOffers = 20_000
	// MaxSyncBytes bounds the envelopes' bytes in one sync.
	MaxSyncBytes = 16 << 20
	// SyncDeadline bounds a whole sync, either side.
	SyncDeadline = time.Minute
)

// BookLimits bound the book-sync server: a whole book per request, so a
// peer gets one at a time, and three in a row, then one each ten seconds.
var BookLimits = StreamLimits{
	Service: "idlegrid.book", Memory: market.MaxEnvelopeSize + AnswerBuffer,
	Request: requestDeadline, Deadline: SyncDeadline, PerPeer: 1, Rate: Rate{0.1, 3},
}

// BookDigestProtocol is BookSyncProtocol whose asker first says which
// offers it holds, so that the server sends only what it lacks: a resync
// of two books that agree costs the asker's digest, some 20 bytes an
// offer, not the book. The request is the most envelopes the asker will
// take (an unsigned varint), the count of digest entries (an unsigned
// varint, at most MaxSyncOffers), and that many entries of DigestEntrySize
// bytes: an offer's DigestKey and the sequence number held (8 bytes, big
// endian). The answer is BookSyncProtocol's, less every offer the asker
// holds at that sequence number or a later one. A node of the last version
// serves only BookSyncProtocol, and FetchBook asks it that way.
const BookDigestProtocol protocol.ID = "/idlegrid/book/1.2.0"

// BookShardsProtocol is BookDigestProtocol for some shards of the book
// only (see ShardedKinds): a light renter asks for the families its bid
// names, a node for those it follows. The request is the most envelopes
// the asker will take (an unsigned varint), the count of shards (an
// unsigned varint, 1 to MaxShards), each shard as one length byte and
// its name (ValidateShard), then BookDigestProtocol's digest. The answer
// is BookDigestProtocol's, less every offer of none of the shards. A node
// of the last version serves only the other two, and FetchShards asks it
// that way and drops what is of no shard asked for.
const BookShardsProtocol protocol.ID = "/idlegrid/book/1.3.0"

// DigestEntrySize is the size of one entry of a book digest.
const DigestEntrySize = digestKeySize + 8

const digestKeySize = 12

// BookDigestLimits bound the digest server as BookLimits bound the other,
// with the memory of a whole digest reserved for the request.
var BookDigestLimits = StreamLimits{
	Service: "idlegrid.bookdigest", Memory: market.MaxEnvelopeSize + MaxSyncOffers*DigestEntrySize + AnswerBuffer,
	Request: requestDeadline, Deadline: SyncDeadline, PerPeer: 1, Rate: Rate{0.1, 3},
}

// DigestKey names an offer in a book digest: the first 12 bytes of the
// SHA-256 of its issuer and ID. A peer that wants a server to skip
// someone else's offer for an asker must find a second preimage of 96
// bits, and even then only that asker's copy goes unsent.
func DigestKey(issuer peer.ID, id string) [digestKeySize]byte {
	h := sha256.New()
	h.Write([]byte(issuer))
	h.Write([]byte{0})
	h.Write([]byte(id))
	var k [digestKeySize]byte
	copy(k[:], h.Sum(nil))
	return k
}

// BookDigest is what an asker holds, as it sends it: at most
// MaxSyncOffers entries (Add drops the rest, which the server then sends
// again).
type BookDigest struct{ b []byte }

// Add records that the asker holds issuer's offer id at seq.
func (d *BookDigest) Add(issuer peer.ID, id string, seq uint64) {
	if d.Len() == MaxSyncOffers {
		return
	}
	k := DigestKey(issuer, id)
	d.b = binary.BigEndian.AppendUint64(append(d.b, k[:]...), seq)
}

// Len is how many entries the digest holds.
func (d *BookDigest) Len() int { return len(d.b) / DigestEntrySize }

// digestTable is a received digest, its entries sorted by key, to look
// offers up in without a copy.
type digestTable []byte

func (t digestTable) Len() int { return len(t) / DigestEntrySize }
func (t digestTable) key(i int) []byte {
	return t[i*DigestEntrySize : i*DigestEntrySize+digestKeySize]
}
func (t digestTable) Less(i, j int) bool { return bytes.Compare(t.key(i), t.key(j)) < 0 }
func (t digestTable) Swap(i, j int) {
	var tmp [DigestEntrySize]byte
	a, b := t[i*DigestEntrySize:(i+1)*DigestEntrySize], t[j*DigestEntrySize:(j+1)*DigestEntrySize]
	copy(tmp[:], a)
	copy(a, b)
	copy(b, tmp[:])
}

// holds says whether the digest holds env's offer at its sequence number
// or a later one. An envelope that is not an offer is not held: the asker
// checks it as it checks any.
func (t digestTable) holds(env []byte) bool {
	issuer, id, seq, ok := market.ClaimedOffer(env)
	if !ok {
		return false
	}
	k := DigestKey(issuer, id)
	i := sort.Search(t.Len(), func(i int) bool { return bytes.Compare(t.key(i), k[:]) >= 0 })
	if i == t.Len() || !bytes.Equal(t.key(i), k[:]) {
		return false
	}
	return binary.BigEndian.Uint64(t[i*DigestEntrySize+digestKeySize:]) >= seq
}

// readDigest reads a digest request's entries from r: a count of at
// most MaxSyncOffers and that many entries.
func readDigest(r io.Reader) (digestTable, error) {
	n, err := binary.ReadUvarint(byteReader{r})
	if err != nil {
		return nil, fmt.Errorf("book digest: %w", err)
	}
	if n > MaxSyncOffers {
		return nil, fmt.Errorf("book digest of %d entries, more than %d", n, MaxSyncOffers)
	}
	t := make(digestTable, int(n)*DigestEntrySize)
	if _, err := io.ReadFull(r, t); err != nil {
		return nil, fmt.Errorf("book digest of %d entries: %w", n, err)
	}
	sort.Sort(t)
	return t, nil
}

// BookSource returns the signed envelopes of the offers to hand out.
type BookSource func(ctx context.Context) ([][]byte, error)

// ServeBookSync answers BookSyncProtocol and BookDigestProtocol with what
// source returns (less what a digest says the asker holds), within the
// bytes a peer and all peers may take of it (SyncOutRates), one budget
// for both.
func ServeBookSync(sv Server, source BookSource) {
	out := newSyncOut(SyncOutRates)
	// handler reads a request (the most envelopes wanted; with shards,
	// the shards; with digest, what the asker holds) and answers it.
	handler := func(shards, digest bool) func(context.Context, peer.ID, network.Stream) error {
		return func(ctx context.Context, p peer.ID, s network.Stream) error {
			want, err := binary.ReadUvarint(byteReader{s})
			if err != nil {
				return fmt.Errorf("book sync request: %w", err)
			}
			src := source
			if shards {
				names, err := readShards(s)
				if err != nil {
					return err
				}
				src = func(ctx context.Context) ([][]byte, error) {
					envs, err := source(ctx)
					return filterShards(envs, names), err
				}
			}
			var held digestTable
			if digest {
				if held, err = readDigest(s); err != nil {
					return err
				}
			}
			return writeAnswer(s, func(w msgio.Writer) error { return serveBook(ctx, p, w, out, src, want, held) })
		}
	}
	sv.Serve(BookSyncProtocol, BookLimits, handler(false, false))
	sv.Serve(BookDigestProtocol, BookDigestLimits, handler(false, true))
	sv.Serve(BookShardsProtocol, BookDigestLimits, handler(true, true))
}

// readShards reads a shards request's shards: a count of 1 to MaxShards,
// each a length byte and a name ValidateShard allows.
func readShards(r io.Reader) ([]string, error) {
	n, err := binary.ReadUvarint(byteReader{r})
	if err != nil {
		return nil, fmt.Errorf("book shards: %w", err)
	}
	if n == 0 || n > MaxShards {
		return nil, fmt.Errorf("book sync for %d shards, want 1 to %d", n, MaxShards)
	}
	shards := make([]string, n)
	for i := range shards {
		l, err := (byteReader{r}).ReadByte()
		if err != nil {
			return nil, fmt.Errorf("book shards: %w", err)
		}
		if l == 0 || l > maxShardLen {
			return nil, fmt.Errorf("book shards: a name of %d bytes, want 1 to %d", l, maxShardLen)
		}
		name := make([]byte, l)
		if _, err := io.ReadFull(r, name); err != nil {
			return nil, fmt.Errorf("book shards: %w", err)
		}
		if err := ValidateShard(string(name)); err != nil {
			return nil, err
		}
		shards[i] = string(name)
	}
	return shards, nil
}

// appendShards appends a shards request's shards to b.
func appendShards(b []byte, shards []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(shards)))
	for _, sh := range shards {
		b = append(append(b, byte(len(sh))), sh...)
	}
	return b
}

// filterShards returns the envelopes of offers of any of shards (envs,
// the source's, is left as it is). An envelope that does not open as an
// offer is dropped: it would be of no shard.
func filterShards(envs [][]byte, shards []string) [][]byte {
	var kept [][]byte
	for _, env := range envs {
		if envInShards(env, shards) {
			kept = append(kept, env)
		}
	}
	return kept
}

// envInShards says whether env is an offer of any of shards. It reads
// the envelope's claims unverified; the asker verifies what it is sent.
func envInShards(env []byte, shards []string) bool {
	o, ok := market.Claimed(env)
	if !ok {
		return false
	}
	for _, sh := range OfferShards(o) {
		if slices.Contains(shards, sh) {
			return true
		}
	}
	return false
}

// serveBook sends p at most want of source's envelopes that held does
// not hold, within MaxSyncOffers, MaxSyncBytes and out's budgets.
func serveBook(ctx context.Context, p peer.ID, w msgio.Writer, out *syncOut, source BookSource, want uint64, held digestTable) error {
	if !out.ready(p, time.Now()) {
		return nil // nothing to spare now: the peer asks another, or again later
	}
	envs, err := source(ctx)
	if err != nil {
		return err
	}
	want = min(want, MaxSyncOffers)
	sent, n := 0, uint64(0)
	for _, env := range envs {
		if n == want {
			return nil
		}
		if held != nil && held.holds(env) {
			continue
		}
		if sent += len(env); sent > MaxSyncBytes {
			return nil // what fits: the rest comes by gossip or the next sync
		}
		if !out.take(p, len(env), time.Now()) {
			return nil // the byte budget is spent: the rest another time
		}
		if err := w.WriteMsg(env); err != nil {
			return err
		}
		n++
	}
	return nil
}

// FetchBook asks p for its book and calls each with every envelope as it
// arrives, unverified: the caller verifies each as it would a gossiped one.
// It reads at most MaxSyncOffers envelopes of at most market.MaxEnvelopeSize
// bytes each, MaxSyncBytes in all, so a hostile peer cannot make it
// allocate, or work, without bound.
//
// Where held is not nil and p serves BookDigestProtocol, FetchBook sends
// held, and p sends only what it lacks.
func FetchBook(ctx context.Context, h host.Host, sw Swarm, p peer.ID, held *BookDigest, each func([]byte)) (int, error) {
	return FetchShards(ctx, h, sw, p, nil, held, each)
}

// FetchShards is FetchBook for the offers of some shards (all where
// shards is empty; at most MaxShards). Where p serves BookShardsProtocol
// it sends only those; where it does not (a node of the last version),
// FetchShards drops the rest unverified: they count against the
// answer's bounds, which hold on everything read, but not in the number
// returned, which is of the envelopes handed to each.
func FetchShards(ctx context.Context, h host.Host, sw Swarm, p peer.ID, shards []string, held *BookDigest, each func([]byte)) (int, error) {
	if len(shards) > MaxShards {
		return 0, fmt.Errorf("book sync for %d shards, more than %d", len(shards), MaxShards)
	}
	for _, sh := range shards {
		if err := ValidateShard(sh); err != nil {
			return 0, err
		}
	}
	// The most this node would take, then, by protocol: the shards, and
	// what it holds.
	ids := []protocol.ID{BookSyncProtocol}
	if held != nil {
		ids = append([]protocol.ID{BookDigestProtocol}, ids...)
	}
	if len(shards) > 0 {
		ids = append([]protocol.ID{BookShardsProtocol}, ids...)
	}
	reqFor := func(id protocol.ID) []byte {
		req := binary.AppendUvarint(nil, MaxSyncOffers)
		switch id {
		case BookShardsProtocol:
			req = appendShards(req, shards)
		case BookSyncProtocol:
			return req
		}
		if held == nil {
			return binary.AppendUvarint(req, 0)
		}
		return append(binary.AppendUvarint(req, uint64(held.Len())), held.b...)
	}
	kept, filtered := 0, false
	n, err := exchangeOneOf(ctx, h, sw, p, ids, SyncDeadline, reqFor, func(id protocol.ID, r io.Reader) (int, error) {
		if len(shards) == 0 || id == BookShardsProtocol {
			return readBook(r, each)
		}
		filtered = true
		return readBook(r, func(env []byte) {
			if envInShards(env, shards) {
				kept++
				each(env)
			}
		})
	})
	if filtered {
		n = kept
	}
	if err != nil {
		return n, fmt.Errorf("book sync with %s: %w", p, err)
	}
	return n, nil
}

// readBook reads a book-sync answer from r, calling each with every
// envelope: at most MaxSyncOffers of at most market.MaxEnvelopeSize bytes
// each, MaxSyncBytes in all; an answer with more is an error.
func readBook(r io.Reader, each func([]byte)) (int, error) {
	return readCapped(r, market.MaxEnvelopeSize, MaxSyncOffers, MaxSyncBytes, "offers", each)
}

// exchange dials p on protocol id, sends req, closes its side and reads
// the answer with read, all within deadline and ctx: a peer that stalls,
// or a connection that died without a word (a killed peer's QUIC), is
// cut off at either, and a stream read fails on is reset.
func exchange(ctx context.Context, h host.Host, sw Swarm, p peer.ID, id protocol.ID, deadline time.Duration, req []byte, read func(io.Reader) (int, error)) (int, error) {
	return exchangeOneOf(ctx, h, sw, p, []protocol.ID{id}, deadline, func(protocol.ID) []byte { return req }, func(_ protocol.ID, r io.Reader) (int, error) { return read(r) })
}

// exchangeOneOf is exchange on the first of ids, in order of preference,
// that p serves (dialPreferred), with the request req makes for it, its
// answer read as read says for it.
func exchangeOneOf(ctx context.Context, h host.Host, sw Swarm, p peer.ID, ids []protocol.ID, deadline time.Duration, reqFor func(protocol.ID) []byte, read func(protocol.ID, io.Reader) (int, error)) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	s, id, err := dialPreferred(ctx, h, sw, p, ids...)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	req := reqFor(id)
	if dl, ok := ctx.Deadline(); ok {
		s.SetDeadline(dl)
	}
	defer context.AfterFunc(ctx, func() { s.Reset() })()
	// An empty request is no write at all: the answer may already be on
	// its way, its server done reading, and a write would meet its
	// STOP_SENDING.
	if len(req) > 0 {
		if _, err := s.Write(req); err != nil {
			s.Reset()
			return 0, err
		}
	}
	s.CloseWrite()
	n, err := read(id, s)
	if err != nil {
		s.Reset()
	}
	return n, err
}

// readCapped reads length-prefixed messages from r until it ends, calling
// each with every one: at most maxCount of at most maxSize bytes each, and
// maxBytes in all (0: no bound). An answer with more is an error, and
// what more it held is not read.
func readCapped(r io.Reader, maxSize, maxCount, maxBytes int, what string, each func([]byte)) (int, error) {
	mr := msgio.NewVarintReaderSize(r, maxSize)
	n, read := 0, 0
	for {
		msg, err := mr.ReadMsg()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if n == maxCount {
			return n, fmt.Errorf("more than %d %s", maxCount, what)
		}
		if read += len(msg); maxBytes > 0 && read > maxBytes {
			return n, fmt.Errorf("more than %d bytes", maxBytes)
		}
		each(msg)
		n++
	}
}

// byteReader reads a stream one byte at a time, for a varint that must
// not read past itself.
type byteReader struct{ r io.Reader }

func (b byteReader) ReadByte() (byte, error) {
	var one [1]byte
	_, err := io.ReadFull(b.r, one[:])
	return one[0], err
}
