package main

import (
	"fmt"
	"math/rand"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
)

// crashTest is TestProviderSurvivesSIGKILLAtRandomPoints' world: one
// provider daemon, restarted on one repository and one port, and renters
// renting from it, each with its own repository (rent holds its lock).
type crashTest struct {
	t       *testing.T
	bin     string
	image   string
	docker  *client.Client
	prov    string  // provider repository
	d       *daemon // the provider's daemon now
	peerID  string
	addr    string      // the provider's multiaddr, on a port kept across restarts
	renters []string    // renter repositories
	rents   []*rentProc // by renter: the last rent started there
	all     []*rentProc
	// seen holds every lease the provider has shown, with the state it
	// was last seen in: none may go missing, an ended one stays as it ended.
	seen    map[string]string
	kills   int
	daemons []*daemon // every start of the provider, for its log
}

// fixedPort finds a loopback port, free for TCP and UDP, outside the range the kernel hands
// out to outgoing connections, so no renter's dial can take it while the
// provider is down between a kill and its restart.
func fixedPort(t *testing.T) int {
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			lo, _ = strconv.Atoi(f[0])
		}
	}
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	for range 100 {
		port := 10000 + rng.Intn(max(lo-10000, 1000))
		// Free for TCP and for UDP: the provider may listen on QUIC.
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		if u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no free port below the ephemeral range")
	return 0
}

func newCrashTest(t *testing.T, renters int, transport string) *crashTest {
	c := &crashTest{t: t, image: executortest.BusyboxImage(t), docker: executortest.Docker(t), bin: buildBinary(t), seen: map[string]string{}}
	port := fixedPort(t)
	listen := fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", port)
	if transport == "quic-v1" {
		listen = fmt.Sprintf("/ip4/127.0.0.1/udp/%d/quic-v1", port)
	}
	c.prov = providerRepo(t, c.bin, listen)
	c.peerID = mustJSON[daemonID](t, c.bin, "id", "--json", "--repo", c.prov).PeerID
	c.addr = listen + "/p2p/" + c.peerID
	removeJobContainers(t, c.docker, c.peerID)
	for i := range renters {
		c.renters = append(c.renters, renterRepo(t, c.bin, fmt.Sprintf("renter%d", i), "--bootstrap", c.addr))
	}
	c.rents = make([]*rentProc, renters)
	c.start()
	return c
}

// start starts the provider's daemon; up waits until it answers.
func (c *crashTest) start() {
	c.d = startDaemon(c.t, c.bin, c.prov)
	c.daemons = append(c.daemons, c.d)
}
func (c *crashTest) up() { waitUp(c.t, c.bin, c.d) }

// killProvider SIGKILLs the provider's daemon and reaps it.
func (c *crashTest) killProvider() {
	c.d.cmd.Process.Kill()
	<-c.d.done
	c.kills++
}

// freeRenter returns a renter whose last rent has exited, waiting for
// one when every renter is busy.
func (c *crashTest) freeRenter(first int) int {
	free := -1
	if !poll(40*time.Second, 50*time.Millisecond, func() bool {
		for k := range c.rents {
			i := (first + k) % len(c.rents)
			if p := c.rents[i]; p == nil || isDone(p) {
				free = i
				return true
			}
		}
		return false
	}) {
		for _, p := range c.rents {
			c.t.Logf("rent of round %d on %s:\n%s", p.round, p.repo, p.stderr)
		}
		c.t.Fatal("no rent exited within 40s")
	}
	return free
}

func isDone(p *rentProc) bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// The job of every rental, and when the kills fall: from the rent's
// start to a little past the job's end (it starts some 0.4 s after the
// rent), so a kill hits every step of a rental, receipt included.
var (
	crashJob      = []string{"sh", "-c", "echo start; sleep 3; echo end"}
	crashKillSpan = 3600 * time.Millisecond
)

// crashRound is what one round does, drawn from the seed before it runs.
type crashRound struct {
	renterFirst int           // where to look for a free renter first
	gpus        int           // how many of the provider's 8 GPUs the rent asks for
	delay       time.Duration // from starting the rent to killing the provider
	again       time.Duration // > 0: kill the restarted provider again this soon, as it recovers
	// victim picks a running rent to kill too, or is -1: with the
	// provider (victimAfter 0) or this long after the provider is back.
	victim      int
	victimAfter time.Duration
}

func drawRound(rng *rand.Rand, renters int) crashRound {
	r := crashRound{
		renterFirst: rng.Intn(renters),
		gpus:        []int{1, 2, 4, 8}[rng.Intn(4)],
		delay:       time.Duration(rng.Int63n(int64(crashKillSpan))),
		again:       time.Duration(1 + rng.Int63n(int64(400*time.Millisecond))),
		victim:      rng.Intn(renters),
		victimAfter: time.Duration(rng.Int63n(int64(1500 * time.Millisecond))),
	}
	if rng.Intn(5) != 0 { // one round in five
		r.again = 0
	}
	switch rng.Intn(6) { // one in three: half with the provider, half later
	case 0:
		r.victimAfter = 0
	case 1:
	default:
		r.victim = -1
	}
	return r
}

func (r crashRound) String() string {
	s := fmt.Sprintf("%d GPUs; kill the provider %s after the rent started", r.gpus, r.delay.Round(time.Millisecond))
	if r.again > 0 {
		s += fmt.Sprintf(", again %s after its restart", r.again.Round(time.Millisecond))
	}
	switch {
	case r.victim >= 0 && r.victimAfter == 0:
		s += "; kill a rent with it"
	case r.victim >= 0:
		s += fmt.Sprintf("; kill a rent %s after it is back", r.victimAfter.Round(time.Millisecond))
	}
	return s
}

// killRent SIGKILLs one of the rents still running, the n-th modulo
// their number, and says which; none when none runs.
func (c *crashTest) killRent(n int) string {
	var running []*rentProc
	for _, p := range c.rents {
		if p != nil && !isDone(p) {
			running = append(running, p)
		}
	}
	if len(running) == 0 {
		return "no rent left to kill"
	}
	p := running[n%len(running)]
	p.killed = true
	p.cmd.Process.Kill()
	<-p.done
	return fmt.Sprintf("killed the rent of round %d", p.round)
}

// TestProviderSurvivesSIGKILLAtRandomPoints kills a provider daemon
// process, and some renters' rent processes, at random points of their
// rentals, and checks after each restart that the provider's records and
// the engine agree: no lease lost, none duplicated, none open past its
// end, no container for a lease that ended. It runs over TCP and over
// QUIC side by side, each with a provider of its own and half the rounds.
// IDLEGRID_KILL_SEED replays a run's random draws (each transport's);
// IDLEGRID_KILL_ROUNDS sets the number of rounds of each transport.
func TestProviderSurvivesSIGKILLAtRandomPoints(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv("IDLEGRID_KILL_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	rounds := 10
	if s := os.Getenv("IDLEGRID_KILL_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	overTransports(t, func(t *testing.T, transport string) {
		providerSurvivesSIGKILLAtRandomPoints(t, transport, seed, rounds)
	})
}

func providerSurvivesSIGKILLAtRandomPoints(t *testing.T, transport string, seed int64, rounds int) {
	t.Logf("seed %d (IDLEGRID_KILL_SEED=%d replays these draws)", seed, seed)
	rng := rand.New(rand.NewSource(seed))
	const renters = 3
	c := newCrashTest(t, renters, transport)
	c.up()
	t0 := time.Now()
	for round := 1; round <= rounds; round++ {
		r := drawRound(rng, renters)
		i := c.freeRenter(r.renterFirst)
		p := startRent(t, c.bin, c.renters[i], c.addr, rental{c.image, "0.017", r.gpus}, crashJob...)
		p.round = round
		c.rents[i], c.all = p, append(c.all, p)
		t.Logf("round %d (%s): renter%d rents; %s", round, time.Since(t0).Round(time.Millisecond), i, r)
		time.Sleep(r.delay) // the random kill point is the test, not a synchronisation
		if r.victim >= 0 && r.victimAfter == 0 {
			t.Logf("round %d: %s", round, c.killRent(r.victim))
		}
		c.killProvider()
		c.start()
		if r.again > 0 {
			time.Sleep(r.again) // a kill while the provider recovers
			c.killProvider()
			c.start()
		}
		c.up()
		if r.victim >= 0 && r.victimAfter > 0 {
			time.Sleep(r.victimAfter) // a renter killed while the provider runs
			t.Logf("round %d: %s", round, c.killRent(r.victim))
		}
		c.check(round)
		if t.Failed() {
			t.Fatalf("round %d failed (seed %d)\nthe provider's last run logged:\n%s", round, seed, c.d.stderr)
		}
	}
	t.Logf("%d rounds, %d kills in %s", rounds, c.kills, time.Since(t0).Round(time.Millisecond))
	c.settle(seed)
	t.Logf("settled after %s; recoveries: %v", time.Since(t0).Round(time.Millisecond), c.recoveries())
}
