package p2p

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
	ma "github.com/multiformats/go-multiaddr"
)

func newTestHost(t testing.TB, psk pnet.PSK, allow []peer.ID) host.Host {
	t.Helper()
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	listen := []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/0")}
	if psk == nil {
		listen = append(listen, ma.StringCast("/ip4/127.0.0.1/udp/0/quic-v1"))
	}
	h, err := NewHost(HostConfig{
		Identity:    key,
		Swarm:       Swarm{Name: "test", PSK: psk},
		ListenAddrs: listen,
		AllowList:   allow,
		ConnLow:     10,
		ConnHigh:    20,
		ConnGrace:   time.Minute,
		Limits:      DefaultLimits,
		UserAgent:   "idlegrid/test",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// connect dials b from a; a refused dial (another swarm key makes the
// handshake read garbage until the deadline) gives up after 2 s.
func connect(a, b host.Host) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return a.Connect(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()})
}

// connectOver dials b from a over transport ("tcp" or "quic-v1") alone,
// and checks the connection is over it.
func connectOver(t testing.TB, a, b host.Host, transport string) {
	t.Helper()
	var addrs []ma.Multiaddr
	for _, addr := range b.Addrs() {
		if strings.Contains(addr.String(), "/"+transport) {
			addrs = append(addrs, addr)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Connect(ctx, peer.AddrInfo{ID: b.ID(), Addrs: addrs}); err != nil {
		t.Fatal(err)
	}
	for _, c := range a.Network().ConnsToPeer(b.ID()) {
		if !strings.Contains(c.RemoteMultiaddr().String(), "/"+transport) {
			t.Fatalf("connected over %s, not %s", c.RemoteMultiaddr(), transport)
		}
	}
}

func TestPrivateSwarmAdmitsOnlyKeyHolders(t *testing.T) {
	key, _ := GenerateSwarmKey()
	other, _ := GenerateSwarmKey()
	a := newTestHost(t, key, nil)
	b := newTestHost(t, key, nil)
	if err := connect(b, a); err != nil {
		t.Fatalf("two holders of one key cannot connect: %v", err)
	}
	keyless := newTestHost(t, nil, nil)
	if err := connect(keyless, a); err == nil {
		t.Error("a keyless peer connected to a private swarm")
	}
	if err := connect(a, keyless); err == nil {
		t.Error("a private peer connected out to a keyless peer")
	}
	wrong := newTestHost(t, other, nil)
	if err := connect(wrong, a); err == nil {
		t.Error("a peer with another key connected")
	}
	for _, h := range []host.Host{keyless, wrong} {
		if n := len(a.Network().ConnsToPeer(h.ID())); n != 0 {
			t.Errorf("private host holds %d connections to an outsider", n)
		}
	}
}

func TestAllowListRefusesUnlistedPeers(t *testing.T) {
	key, _ := GenerateSwarmKey()
	member := newTestHost(t, key, nil)
	outsider := newTestHost(t, key, nil)
	guarded := newTestHost(t, key, []peer.ID{member.ID()})
	admitted := make(chan peer.ID, 16)
	guarded.Network().Notify(&network.NotifyBundle{ConnectedF: func(_ network.Network, c network.Conn) {
		admitted <- c.RemotePeer()
	}})
	if err := connect(member, guarded); err != nil {
		t.Fatalf("listed peer refused: %v", err)
	}
	if err := pingOnce(member, guarded); err != nil {
		t.Fatalf("listed peer cannot ping: %v", err)
	}
	// The dialler may finish its half of the handshake before the guarded
	// side checks the peer ID and closes, so Connect alone can succeed; what
	// must fail is any use of the connection.
	connect(outsider, guarded)
	if err := pingOnce(outsider, guarded); err == nil {
		t.Error("unlisted key holder pinged the guarded host")
	}
	close(admitted)
	for p := range admitted {
		if p != member.ID() {
			t.Errorf("guarded host admitted %s", p)
		}
	}
	if err := connect(guarded, outsider); err == nil {
		t.Error("guarded host dialled out to an unlisted peer")
	}
	if n := len(guarded.Network().ConnsToPeer(outsider.ID())); n != 0 {
		t.Errorf("guarded host holds %d connections to the outsider", n)
	}
}

func pingOnce(a, b host.Host) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return (<-ping.Ping(ctx, a, b.ID())).Error
}

func TestNewHostFailsOnBusyPortAndQUICInPrivateSwarm(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	key, _, _ := crypto.GenerateEd25519Key(nil)
	busy := ma.StringCast("/ip4/127.0.0.1/tcp/" + strings.Split(ln.Addr().String(), ":")[1])
	_, err = NewHost(HostConfig{Identity: key, ListenAddrs: []ma.Multiaddr{busy}, ConnLow: 1, ConnHigh: 2, Limits: DefaultLimits})
	if !errors.Is(err, ErrListen) || !strings.Contains(err.Error(), busy.String()) {
		t.Errorf("busy port: got %v, want ErrListen naming %s", err, busy)
	}
	psk, _ := GenerateSwarmKey()
	quic := ma.StringCast("/ip4/127.0.0.1/udp/0/quic-v1")
	_, err = NewHost(HostConfig{Identity: key, Swarm: Swarm{Name: "lab", PSK: psk}, ListenAddrs: []ma.Multiaddr{quic}, ConnLow: 1, ConnHigh: 2, Limits: DefaultLimits})
	if !errors.Is(err, ErrListen) || !strings.Contains(err.Error(), "TCP only") {
		t.Errorf("QUIC in a private swarm: got %v", err)
	}
}

// A port another libp2p host holds is refused too: libp2p binds with
// SO_REUSEPORT, so without a check a second daemon started on a busy port
// and the kernel split the incoming connections between the two.
func TestNewHostRefusesAPortAnotherHostHolds(t *testing.T) {
	first := newTestHost(t, nil, nil)
	for _, a := range first.Network().ListenAddresses() {
		if IsRelayed(a) {
			continue // the circuit transport's, which binds no port
		}
		key, _, _ := crypto.GenerateEd25519Key(nil)
		h, err := NewHost(HostConfig{Identity: key, ListenAddrs: []ma.Multiaddr{a}, ConnLow: 1, ConnHigh: 2, Limits: DefaultLimits})
		if err == nil {
			h.Close()
			t.Errorf("a second host listened on %s, which the first holds", a)
			continue
		}
		if !errors.Is(err, ErrListen) || !strings.Contains(err.Error(), a.String()) || !strings.Contains(err.Error(), "address already in use") {
			t.Errorf("busy %s: got %v, want ErrListen naming it and the cause", a, err)
		}
	}
}

func TestParseAddrInfo(t *testing.T) {
	h := newTestHost(t, nil, nil)
	good := h.Addrs()[0].String() + "/p2p/" + h.ID().String()
	ai, err := ParseAddrInfo(good)
	if err != nil || ai.ID != h.ID() {
		t.Fatalf("ParseAddrInfo(%s) = %v, %v", good, ai, err)
	}
	for _, bad := range []string{"", "not a multiaddr", "/ip4/127.0.0.1/tcp/4001", "/ip4/127.0.0.1/tcp/4001/p2p/notapeer"} {
		if _, err := ParseAddrInfo(bad); !errors.Is(err, ErrBootstrapAddr) {
			t.Errorf("ParseAddrInfo(%q) = %v, want ErrBootstrapAddr", bad, err)
		}
	}
}
