package p2p

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// shardBook is 10 signed offers of each model, of one issuer each.
func shardBook(t testing.TB, models ...string) []digestOffer {
	t.Helper()
	var out []digestOffer
	for _, model := range models {
		for i := range 10 {
			k, _, err := crypto.GenerateEd25519Key(nil)
			if err != nil {
				t.Fatal(err)
			}
			id, _ := peer.IDFromPrivateKey(k)
			oid := fmt.Sprint(model, " ", i)
			o := &pb.Offer{Header: &pb.Header{Version: market.Version, Issuer: []byte(id), Id: oid, Seq: 1},
				Gpus: []*pb.GPUGroup{{Model: model, Count: 1}}, PriceMicros: 1_000_000}
			env, err := market.Sign(k, o)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, digestOffer{id, oid, env})
		}
	}
	return out
}

// A shard sync sends only the offers of the shards asked for, less what
// the asker's digest holds; a server of the last version, which serves
// no shards, sends its whole book, and the asker keeps only those
// shards' offers. Over TCP and QUIC.
func TestAShardSyncSendsOnlyItsShards(t *testing.T) {
	book := shardBook(t, "H100 SXM", "A100 SXM 80GB", "RTX 4090")
	for _, transport := range []string{"tcp", "quic-v1"} {
		t.Run(transport, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			fetch := func(server peer.ID, asker host.Host, shards []string, held *BookDigest) (map[string]bool, int) {
				t.Helper()
				got := map[string]bool{}
				n, err := FetchShards(ctx, asker, Swarm{}, server, shards, held, func(env []byte) {
					_, id, _, _ := market.ClaimedOffer(env)
					got[id] = true
				})
				if err != nil {
					t.Fatal(err)
				}
				return got, n
			}
			server, asker := bookServer(t, book), newTestHost(t, nil, nil)
			wait := identified(t, asker)
			connectOver(t, asker, server, transport)
			wait(server.ID(), BookShardsProtocol)

			var held BookDigest
			for _, o := range book[:5] { // half the H100s
				held.Add(o.issuer, o.id, 1)
			}
			got, n := fetch(server.ID(), asker, []string{"h100", "rtx4090"}, &held)
			if n != 15 || len(got) != 15 {
				t.Fatalf("the H100 and RTX 4090 shards, holding 5 H100s: %d offers (%d distinct), want 15", n, len(got))
			}
			for id := range got {
				if strings.HasPrefix(id, "A100") || id < "H100 SXM 5" && strings.HasPrefix(id, "H100") {
					t.Errorf("sent %s, of another shard or held", id)
				}
			}

			old := bookServer(t, book)
			old.RemoveStreamHandler(Swarm{}.Protocol(BookShardsProtocol))
			old.RemoveStreamHandler(Swarm{}.Protocol(BookDigestProtocol))
			connectOver(t, asker, old, transport)
			servedAs(t, asker, old.ID(), []protocol.ID{BookSyncProtocol}, []protocol.ID{BookDigestProtocol, BookShardsProtocol})
			got, n = fetch(old.ID(), asker, []string{"a100"}, &held)
			if n != 10 || len(got) != 10 {
				t.Fatalf("the A100 shard from a server of the last version: kept %d offers (%d distinct), want 10", n, len(got))
			}
			for id := range got {
				if !strings.HasPrefix(id, "A100") {
					t.Errorf("kept %s, of another shard", id)
				}
			}
		})
	}
}

// A shards request is bounded: 1 to MaxShards names of 1 to 40
// characters ValidateShard allows; the server refuses any other (the
// stream reset, nothing sent), and FetchShards will not ask it.
func TestAShardSyncPastItsBoundsIsRefused(t *testing.T) {
	book := shardBook(t, "H100 SXM")
	server, asker := bookServer(t, book), newTestHost(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := connect(asker, server); err != nil {
		t.Fatal(err)
	}
	many := make([]string, MaxShards+1)
	for i := range many {
		many[i] = fmt.Sprint("s", i)
	}
	long := strings.Repeat("h", maxShardLen+1)
	for _, tc := range []struct {
		name   string
		shards []string
		ok     bool
	}{
		{"one", []string{"h100"}, true},
		{"the most", append(many[:MaxShards-1:MaxShards-1], "h100"), true},
		{"none", nil, false},
		{"too many", many, false},
		{"too long", []string{long}, false},
		{"upper case", []string{"H100"}, false},
	} {
		s, err := asker.NewStream(ctx, server.ID(), Swarm{}.Protocol(BookShardsProtocol))
		if err != nil {
			t.Fatal(err)
		}
		req := appendShards(binary.AppendUvarint(nil, 100), tc.shards)
		s.Write(binary.AppendUvarint(req, 0)) // an empty digest
		s.CloseWrite()
		s.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := readBook(s, func([]byte) {})
		if tc.ok && (n != len(book) || err != nil) {
			t.Errorf("%s: %d offers back, %v; want the H100 shard's %d", tc.name, n, err, len(book))
		}
		if !tc.ok && (n > 0 || err == nil) {
			t.Errorf("%s: %d offers back, err %v; want the stream reset, nothing sent", tc.name, n, err)
		}
		s.Close()
		if !tc.ok && len(tc.shards) > 0 {
			if _, err := FetchShards(ctx, asker, Swarm{}, server.ID(), tc.shards, nil, func([]byte) {}); err == nil {
				t.Errorf("%s: FetchShards asked", tc.name)
			}
		}
	}
}
