package node

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// Issue 26, attack 1: a fresh key asked for lease "../<renter>/<lease>"
// and got the renter's files. A provider serves a lease's outputs to that
// lease's renter alone, from that renter's own folder: a stranger on TCP
// and on QUIC is refused the outputs by the path that climbs out of its
// folder and by the lease's own ID, and the renter still gets them.
func TestAStrangerCannotDownloadAnotherRentersOutputs(t *testing.T) {
	t.Parallel()
	// The renter proposes by hand and follows no job: the job must end
	// on its own.
	prov, renter := leaseSwarm(t, func(c *config.Config) { c.Jobs.RenterGrace = config.Dur(time.Hour) })
	waitFor(t, 15*time.Second, "the provider's offer in the renter's book", func() bool { return offeredGPUs(renter, prov) == 8 })
	const secret = "the renter's results\n"
	cs := signedLease(t, renter, prov, func(l *pb.Lease) {
		l.Workload.Command = []string{"sh", "-c", "mkdir -p /workspace/out && printf \"" + strings.TrimSuffix(secret, "\n") + "\\n\" > /workspace/out/secret"}
		l.Workload.Outputs = []string{"/workspace/out"}
	})
	if r := proposeCS(t, renter, prov, cs); r.Lease == nil {
		t.Fatalf("the lease was refused: %s %s", r.Code, r.Reason)
	}
	lease := leaseIDOf(t, cs)

	// The renter's own download, once the job has ended and its output
	// is packed.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	waitFor(t, time.Minute, "the lease's end", func() bool {
		rec, _ := prov.leaseStore().Get(ctx, lease)
		return rec != nil && records.Ended(rec.State)
	})
	var mine bytes.Buffer
	if _, _, err := p2p.Download(ctx, renter.host, renter.swarm, prov.id, lease, 0, 0, &mine); err != nil || !bytes.Contains(mine.Bytes(), []byte(secret)) {
		t.Fatalf("the renter's download of its output: %d bytes, %v; want its secret", mine.Len(), err)
	}

	for _, transport := range []string{"tcp", "quic-v1"} {
		t.Run(transport, func(t *testing.T) {
			stranger := strangerOn(t, prov, transport)
			for _, asked := range []string{"../" + renter.id.String() + "/" + lease, lease, "./../" + renter.id.String() + "/" + lease, "..", ""} {
				var got bytes.Buffer
				_, _, err := p2p.Download(ctx, stranger, prov.swarm, prov.id, asked, 0, 0, &got)
				var refused *p2p.DownloadRefusedError
				if !errors.As(err, &refused) || got.Len() > 0 {
					t.Errorf("a stranger's download of lease %q: %d bytes, %v; want a refusal and nothing", asked, got.Len(), err)
				}
				if bytes.Contains(got.Bytes(), []byte(secret)) {
					t.Errorf("a stranger got the renter's secret by lease %q", asked)
				}
			}
		})
	}
	var again bytes.Buffer
	if _, _, err := p2p.Download(ctx, renter.host, renter.swarm, prov.id, lease, 0, 0, &again); err != nil || !bytes.Equal(again.Bytes(), mine.Bytes()) {
		t.Errorf("the renter's download after the strangers': %d bytes, %v", again.Len(), err)
	}
}

// leaseIDOf is the ID of the lease cs signs.
func leaseIDOf(t *testing.T, cs *pb.CoSigned) string {
	t.Helper()
	l, err := market.OpenCoSigned[*pb.Lease](cs, market.Renter)
	if err != nil {
		t.Fatal(err)
	}
	return l.Id
}

// strangerOn is a host with a fresh key, connected to prov on transport
// alone ("tcp" or "quic-v1").
func strangerOn(t *testing.T, prov *Node, transport string) host.Host {
	t.Helper()
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	listen := "/ip4/127.0.0.1/tcp/0"
	if transport != "tcp" {
		listen = "/ip4/127.0.0.1/udp/0/" + transport
	}
	h, err := p2p.NewHost(p2p.HostConfig{
		Identity: key, Swarm: prov.swarm, ListenAddrs: []ma.Multiaddr{ma.StringCast(listen)},
		ConnLow: 10, ConnHigh: 20, ConnGrace: time.Minute, Limits: p2p.DefaultLimits, UserAgent: "idlegrid/stranger",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	var addrs []ma.Multiaddr
	for _, a := range prov.host.Addrs() {
		if _, err := a.ValueForProtocol(ma.ProtocolWithName(transport).Code); err == nil {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		t.Fatalf("the provider listens on no %s address: %v", transport, prov.host.Addrs())
	}
	if err := h.Connect(context.Background(), peer.AddrInfo{ID: prov.id, Addrs: addrs}); err != nil {
		t.Fatal(err)
	}
	for _, c := range h.Network().ConnsToPeer(prov.id) {
		if _, err := c.RemoteMultiaddr().ValueForProtocol(ma.ProtocolWithName(transport).Code); err != nil {
			t.Fatalf("the stranger reached the provider over %s, not %s", c.RemoteMultiaddr(), transport)
		}
	}
	return h
}
