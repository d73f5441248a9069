package p2p_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/internal/testwatch"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/idlegrid/idlegrid/p2p/p2ptest"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/proto"
	ma "github.com/multiformats/go-multiaddr"
)

// The NAT test runs its hosts in p2ptest.NATLab's namespaces, each in a
// helper process: this test binary, re-run by TestMain inside a
// namespace.

const natRoleEnv = "IDLEGRID_NAT_ROLE"

func TestMain(m *testing.M) {
	if role := os.Getenv(natRoleEnv); role != "" {
		os.Exit(natHelper(role))
	}
	if os.Getenv(connFloodEnv) != "" {
		os.Exit(connFloodAttackers())
	}
	if os.Getenv(connVictimEnv) != "" {
		os.Exit(connFloodVictim())
	}
	os.Exit(testwatch.Run(m))
}

// natReport is what a helper prints, one JSON line at a time.
type natReport struct {
	ID      string   `json:"id,omitempty"`
	Addrs   []string `json:"addrs,omitempty"`
	Reach   string   `json:"reach,omitempty"`
	Limited bool     `json:"limited"`
	Echo    string   `json:"echo,omitempty"`
	// Second is how long a second stream to the same peer took to open,
	// in ms, and whether it too was relayed.
	SecondMs      int64 `json:"second_ms"`
	SecondLimited bool  `json:"second_limited"`
	// Conn is the echo stream's connection, local -> remote address.
	Conn string `json:"conn,omitempty"`
	// Direct are the remote addresses of the renter's direct connections
	// to the provider once both streams are done.
	Direct []string `json:"direct,omitempty"`
	Err    string   `json:"err,omitempty"`
}

// helper is one helper process.
type helper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan natReport
	log   *p2ptest.Log
}

// start runs this test binary in namespace ns as role, with env.
func startHelper(t *testing.T, l *p2ptest.NATLab, ns, role string, env ...string) *helper {
	t.Helper()
	cmd := l.Command(ns, os.Args[0], "-test.run=^$")
	// Hole punching's own log, shown where a test fails.
	cmd.Env = append(append(os.Environ(), natRoleEnv+"="+role, "GOLOG_LOG_LEVEL=error,p2p-holepunch=debug", "GOLOG_LOG_FMT=nocolor"), env...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	log := &p2ptest.Log{}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, stdin: stdin, lines: make(chan natReport, 16), log: log}
	go func() {
		defer close(h.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var r natReport
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				h.lines <- r
			}
		}
	}()
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	return h
}

// next waits for the helper's next report.
func (h *helper) next(t *testing.T, what string, within time.Duration) natReport {
	t.Helper()
	select {
	case r, ok := <-h.lines:
		if !ok {
			t.Fatalf("%s: the helper ended\n%s", what, h.log.String())
		}
		if r.Err != "" {
			t.Fatalf("%s: %s\n%s", what, r.Err, h.log.String())
		}
		return r
	case <-time.After(within):
		t.Fatalf("%s: nothing after %s\n%s", what, within, h.log.String())
	}
	return natReport{}
}

// startPublic starts the lab's public peers and returns the environment
// setting that names them to the other helpers.
func startPublic(t *testing.T, lab *p2ptest.NATLab) string {
	t.Helper()
	pub := startHelper(t, lab, "inet", "public")
	var peers []string
	for range p2ptest.PublicIPs {
		r := pub.next(t, "public peer", 30*time.Second)
		peers = append(peers, r.ID+"@"+strings.Join(r.Addrs, "+"))
	}
	return "IDLEGRID_NAT_PEERS=" + strings.Join(peers, ",")
}

// TestNATTraversal runs a renter behind one NAT and a provider behind
// another, with a relay on the public side. Behind two port-preserving
// NATs the renter's stream ends on a direct connection (hole punching);
// with the provider behind a symmetric NAT, hole punching cannot work and
// the stream still completes through the relay.
func TestNATTraversal(t *testing.T) {
	p2ptest.ForEachNAT(t, func(t *testing.T, lab *p2ptest.NATLab, symmetric bool) {
		env := startPublic(t, lab)
		prov := startHelper(t, lab, "h1", "provider", env)
		p := prov.next(t, "provider's relay reservation", 90*time.Second)
		t.Logf("provider %s: reachability %s, addresses %v", p.ID[len(p.ID)-6:], p.Reach, p.Addrs)
		if p.Reach != "private" {
			t.Errorf("provider behind a NAT thinks it is %s", p.Reach)
		}
		var relayed string
		for _, a := range p.Addrs {
			if strings.Contains(a, "/p2p-circuit") {
				relayed = a + "/p2p/" + p.ID
			}
		}
		start := time.Now()
		rent := startHelper(t, lab, "h2", "renter", env, "IDLEGRID_NAT_TARGET="+relayed)
		r := rent.next(t, "renter's echo", 90*time.Second)
		t.Logf("renter: echo %q after %s, over a limited (relayed) connection: %v (%s); a second stream in %d ms, relayed: %v", r.Echo, time.Since(start).Round(time.Millisecond), r.Limited, r.Conn, r.SecondMs, r.SecondLimited)
		if r.Echo != "hello" {
			t.Fatalf("renter: %+v\n%s", r, rent.log.String())
		}
		// The second stream does not wait for hole punching again.
		if r.SecondLimited != symmetric || r.SecondMs > 2000 {
			t.Errorf("second stream: relayed %v after %d ms, want relayed %v at once", r.SecondLimited, r.SecondMs, symmetric)
		}
		if r.Limited != symmetric {
			t.Errorf("stream relayed: %v, want %v (hole punching %s)", r.Limited, symmetric, map[bool]string{false: "was possible", true: "was not"}[symmetric])
		}
		// Both ends listen on TCP and QUIC: hole punching takes QUIC
		// alone, and its one connection is the one both ends keep.
		if !symmetric && (len(r.Direct) != 1 || !strings.Contains(r.Direct[0], "/quic-v1")) {
			t.Errorf("direct connections after hole punching: %v, want one, over QUIC", r.Direct)
		}
		if t.Failed() {
			t.Logf("provider's log:\n%s\nrenter's log:\n%s", prov.log.String(), rent.log.String())
			t.Logf("r1's connections:\n%s\nr2's connections:\n%s", lab.Conntrack("r1"), lab.Conntrack("r2"))
		}

		// A renter on the provider's own network, given the same relayed
		// address, ends direct behind either NAT: hole punching dials
		// only public addresses, and the NAT need not loop its own back.
		lan := startHelper(t, lab, "h1", "renter", env, "IDLEGRID_NAT_TARGET="+relayed, "IDLEGRID_NAT_PORT=0") // 4001 is the provider's
		if r := lan.next(t, "the LAN renter's echo", 90*time.Second); r.Echo != "hello" || r.Limited || r.SecondLimited {
			t.Errorf("on the provider's LAN: %+v, want a direct stream\n%s", r, lan.log.String())
		}
	})
}

// A home router that offers port mapping (miniupnpd: UPnP IGD and
// NAT-PMP) gives a provider behind it with nat.port_map a public port: the
// provider advertises 11.0.0.2:PORT, and a renter behind another NAT
// reaches it there directly, with no relay (the provider takes no
// reservation) and no hole punching (the renter dials only that address,
// which the router would drop but for the mapping).
func TestAPortMappingMakesAProviderReachable(t *testing.T) {
	lab := p2ptest.NewNATLab(t, false)
	lab.StartUPnP()
	env := startPublic(t, lab)
	start := time.Now()
	prov := startHelper(t, lab, "h1", "mapped", env)
	p := prov.next(t, "provider's mapped address", 60*time.Second)
	t.Logf("provider: mapped address %s after %s", p.Addrs[0], time.Since(start).Round(time.Millisecond))
	port := p.Addrs[0][strings.LastIndex(p.Addrs[0], "/")+1:]
	if !strings.Contains(lab.UPnPLog(), "redirecting port "+port+" to 192.168.1.2:4001 protocol TCP") {
		t.Errorf("miniupnpd made no mapping of port %s:\n%s", port, lab.UPnPLog())
	}
	rent := startHelper(t, lab, "h2", "renter", env, "IDLEGRID_NAT_TARGET="+p.Addrs[0]+"/p2p/"+p.ID)
	r := rent.next(t, "renter's echo", 60*time.Second)
	if r.Echo != "hello" || r.Limited {
		t.Errorf("renter: echo %q over a relayed connection %v, want hello, direct", r.Echo, r.Limited)
	}
}

// natHelper runs one role of the lab in this process and returns the
// exit code.
func natHelper(role string) int {
	out := json.NewEncoder(os.Stdout)
	fail := func(err error) int {
		out.Encode(natReport{Err: err.Error()})
		return 1
	}
	sw := p2p.Swarm{Name: p2p.PublicSwarm}
	echo := sw.Protocol("/idlegrid/echo/1.0.0")
	newHost := func(ip string, nat p2p.NATConfig) (host.Host, error) {
		key, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			return nil, err
		}
		port := "4001" // the NATs preserve it
		if p := os.Getenv("IDLEGRID_NAT_PORT"); p != "" {
			port = p
		}
		listen := []ma.Multiaddr{ma.StringCast("/ip4/" + ip + "/tcp/" + port), ma.StringCast("/ip4/" + ip + "/udp/" + port + "/quic-v1")}
		h, err := p2p.NewHost(p2p.HostConfig{Identity: key, Swarm: sw, ListenAddrs: listen, ConnLow: 16, ConnHigh: 32, Limits: p2p.DefaultLimits, NAT: nat})
		if err != nil {
			return nil, err
		}
		h.SetStreamHandler(echo, func(s network.Stream) {
			line, _ := bufio.NewReader(s).ReadString('\n')
			s.Write([]byte(line))
			s.Close()
		})
		return h, nil
	}
	connect := func(h host.Host) error {
		// Each peer is <id>@<addr>+<addr>: TCP and QUIC, as a swarm's
		// public peers advertise. The odd ones are dialled over TCP, the
		// rest over QUIC (a daemon's DHT reaches its peers over both), so
		// that the public side observes this host on both transports and
		// hole punching is offered both.
		for i, entry := range strings.Split(os.Getenv("IDLEGRID_NAT_PEERS"), ",") {
			id, addrs, _ := strings.Cut(entry, "@")
			pid, err := peer.Decode(id)
			if err != nil {
				return err
			}
			ai := peer.AddrInfo{ID: pid}
			for _, a := range strings.Split(addrs, "+") {
				if a := ma.StringCast(a); p2p.IsQUIC(a) == (i%2 == 0) {
					ai.Addrs = append(ai.Addrs, a)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err = h.Connect(ctx, ai)
			cancel()
			if err != nil {
				return fmt.Errorf("connect %s: %w", entry, err)
			}
		}
		return nil
	}
	wait := func() { io.Copy(io.Discard, os.Stdin) } // until the test closes stdin
	switch role {
	case "public":
		for i, ip := range p2ptest.PublicIPs {
			nat := p2p.NATConfig{Reachability: p2p.ReachPublic, HolePunching: true}
			if i == 0 {
				// The lab's relay vouches for every peer: its hosts have
				// no book to hold the provider's offer (the daemons of
				// cmd's NAT test do).
				nat.RelayService, nat.Relay = true, p2p.DefaultRelayLimits
				nat.Vouch = func(peer.ID) bool { return true }
			}
			h, err := newHost(ip, nat)
			if err != nil {
				return fail(err)
			}
			defer h.Close()
			out.Encode(natReport{ID: h.ID().String(), Addrs: []string{"/ip4/" + ip + "/tcp/4001", "/ip4/" + ip + "/udp/4001/quic-v1"}})
		}
		wait()
	case "mapped":
		// A provider behind r1 that asks it for a port mapping and takes
		// no relay; it reports the mapped TCP address once it has one.
		h, err := newHost("0.0.0.0", p2p.NATConfig{Reachability: p2p.ReachAuto, PortMap: true})
		if err != nil {
			return fail(err)
		}
		defer h.Close()
		if err := connect(h); err != nil {
			return fail(err)
		}
		deadline := time.Now().Add(45 * time.Second)
		for {
			for _, a := range h.Addrs() {
				if strings.HasPrefix(a.String(), "/ip4/11.0.0.2/tcp/") {
					out.Encode(natReport{ID: h.ID().String(), Addrs: []string{a.String()}})
					wait()
					return 0
				}
			}
			if time.Now().After(deadline) {
				return fail(fmt.Errorf("no mapped address on 11.0.0.2 after 45 s; addresses %v", h.Addrs()))
			}
			time.Sleep(100 * time.Millisecond)
		}
	case "provider", "renter":
		nat := p2p.NATConfig{Reachability: p2p.ReachAuto, HolePunching: true, AutoRelay: role == "provider"}
		h, err := newHost("0.0.0.0", nat)
		if err != nil {
			return fail(err)
		}
		defer h.Close()
		reach, err := p2p.WatchReachability(h)
		if err != nil {
			return fail(err)
		}
		defer reach.Close()
		if err := connect(h); err != nil {
			return fail(err)
		}
		if role == "provider" {
			for {
				r := reach.Now()
				if r.How == p2p.ReachRelayed {
					out.Encode(natReport{ID: h.ID().String(), Addrs: r.Addrs, Reach: r.State})
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			wait()
			return 0
		}
		ai, err := peer.AddrInfoFromString(os.Getenv("IDLEGRID_NAT_TARGET"))
		if err != nil {
			return fail(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := h.Connect(ctx, *ai); err != nil {
			return fail(fmt.Errorf("connect to the provider through the relay: %w", err))
		}
		s, err := p2p.OpenStream(ctx, h, ai.ID, echo)
		if err != nil {
			return fail(err)
		}
		s.Write([]byte("hello\n"))
		line, err := bufio.NewReader(s).ReadString('\n')
		if err != nil {
			return fail(fmt.Errorf("echo: %w", err))
		}
		t0 := time.Now()
		s2, err := p2p.OpenStream(ctx, h, ai.ID, echo)
		if err != nil {
			return fail(fmt.Errorf("second stream: %w", err))
		}
		s2.Reset()
		var direct []string
		for _, c := range h.Network().ConnsToPeer(ai.ID) {
			if !c.Stat().Limited {
				direct = append(direct, c.RemoteMultiaddr().String())
			}
		}
		out.Encode(natReport{Echo: strings.TrimSpace(line), Limited: s.Conn().Stat().Limited,
			SecondMs: time.Since(t0).Milliseconds(), SecondLimited: s2.Conn().Stat().Limited,
			Conn: fmt.Sprintf("%s -> %s", s.Conn().LocalMultiaddr(), s.Conn().RemoteMultiaddr()), Direct: direct})
	default:
		return fail(fmt.Errorf("no role %q", role))
	}
	return 0
}

// A public node relays for its swarm's peers only, and within its limits:
// a libp2p host that serves none of the swarm's protocols gets no
// reservation (even one the relay would vouch for), a swarm peer it
// vouches for does, and a relayed connection is reset once
// p2p.RelayLimits.Bytes have passed.
func TestTheRelayServesItsSwarmWithinItsLimits(t *testing.T) {
	sw := p2p.Swarm{Name: p2p.PublicSwarm}
	loop := []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/0")}
	mk := func(nat p2p.NATConfig) host.Host {
		key, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		h, err := p2p.NewHost(p2p.HostConfig{Identity: key, Swarm: sw, ListenAddrs: loop, ConnLow: 16, ConnHigh: 32, Limits: p2p.DefaultLimits, NAT: nat})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		return h
	}
	vouched := &vouchSet{ps: map[peer.ID]bool{}}
	relay := mk(p2p.NATConfig{Reachability: p2p.ReachPublic, RelayService: true, Relay: p2p.RelayLimits{Reservations: 4, CircuitsPerPeer: 2, Duration: time.Minute, Bytes: 64 << 10}, Vouch: vouched.has})
	relayInfo := peer.AddrInfo{ID: relay.ID(), Addrs: relay.Addrs()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The relay service starts once the host knows it is public;
	// identify pushes the new protocol to connected peers.
	stranger := mk(p2p.NATConfig{Reachability: p2p.ReachPrivate})
	vouched.add(stranger.ID())
	if err := stranger.Connect(ctx, relayInfo); err != nil {
		t.Fatal(err)
	}
	waitServes(ctx, t, stranger, relay.ID(), proto.ProtoIDv2Hop)
	if _, err := client.Reserve(ctx, stranger, relayInfo); err == nil {
		t.Error("a host outside the swarm got a reservation")
	}

	member := mk(p2p.NATConfig{Reachability: p2p.ReachPrivate})
	vouched.add(member.ID())
	echo := sw.Protocol("/idlegrid/echo/1.0.0")
	member.SetStreamHandler(echo, func(s network.Stream) { io.Copy(s, s); s.Close() })
	if err := reserve(ctx, t, member, relay, echo); err != nil {
		t.Fatalf("a swarm peer's reservation: %v", err)
	}
	renter := mk(p2p.NATConfig{Reachability: p2p.ReachPrivate})
	renter.SetStreamHandler(echo, func(s network.Stream) { s.Close() })
	// The relay opens a circuit between two peers of its swarm only.
	known(ctx, t, renter, relay, echo)
	circuit := ma.StringCast("/p2p/" + relay.ID().String() + "/p2p-circuit")
	if err := renter.Connect(ctx, peer.AddrInfo{ID: member.ID(), Addrs: []ma.Multiaddr{relay.Addrs()[0].Encapsulate(circuit)}}); err != nil {
		t.Fatalf("connect through the relay: %v", err)
	}
	s, err := p2p.OpenStream(ctx, renter, member.ID(), echo)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Conn().Stat().Limited {
		t.Fatal("the stream is not on the relayed connection")
	}
	// 64 KiB each way, then the relay resets the connection.
	chunk := make([]byte, 16<<10)
	go func() {
		for range 16 {
			if _, err := s.Write(chunk); err != nil {
				return
			}
		}
		s.CloseWrite()
	}()
	n, err := io.Copy(io.Discard, s)
	if err == nil || n > 64<<10 {
		t.Errorf("relayed %d bytes back (err %v), want a reset by 64 KiB", n, err)
	}
}
