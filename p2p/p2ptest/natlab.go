package p2ptest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// NATLab is a small internet of network namespaces that a test makes and
// removes: an "inet" namespace whose bridge holds the public-looking
// addresses PublicIPs (11.0.0.0/24, routed nowhere outside the lab), and
// two home networks, host "h1" at 192.168.1.2 behind router "r1" (public
// 11.0.0.2) and "h2" at 192.168.2.2 behind "r2" (11.0.0.3). Each router
// masquerades and, as a home router's firewall does, drops what nobody
// inside asked for. A swarm has many public peers, and libp2p trusts an
// address it is seen at only from four observers: so the lab has four
// public addresses.
//
// A socket belongs to the namespace of the thread that made it, so what
// runs in a namespace runs as its own process: Command.
type NATLab struct {
	t       testing.TB
	suffix  string
	upnpLog *Log // nil: no UPnP daemon
}

// PublicIPs are the inet namespace's addresses, a relay's first.
var PublicIPs = []string{"11.0.0.1", "11.0.0.11", "11.0.0.12", "11.0.0.13"}

// NewNATLab builds the lab; with symmetric, router r1 maps every
// connection to a random port (--random-fully), which hole punching
// cannot predict. It skips the test when not run as root (CI runs as
// root), and removes the namespaces when the test ends.
func NewNATLab(t testing.TB, symmetric bool) *NATLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root (CI runs as root)")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v (apt-get install iproute2 iptables)", tool, err)
		}
	}
	b := make([]byte, 3)
	rand.Read(b)
	l := &NATLab{t: t, suffix: hex.EncodeToString(b)}
	t.Cleanup(func() {
		for _, ns := range []string{"inet", "r1", "r2", "h1", "h2"} {
			exec.Command("ip", "netns", "del", l.NS(ns)).Run()
		}
	})
	l.build(symmetric)
	return l
}

// NS is the name of one of the lab's namespaces: inet, r1, r2, h1, h2.
func (l *NATLab) NS(name string) string { return "ig" + name + l.suffix }

// Command is name with args, to run in namespace ns.
func (l *NATLab) Command(ns, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", l.NS(ns), name}, args...)...)
}

// dev names an interface (at most 15 bytes).
func (l *NATLab) dev(name string) string { return name + l.suffix }

func (l *NATLab) run(args ...string) {
	l.t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		l.t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (l *NATLab) in(ns string, args ...string) {
	l.t.Helper()
	l.run(append([]string{"ip", "netns", "exec", l.NS(ns)}, args...)...)
}

func (l *NATLab) build(symmetric bool) {
	l.t.Helper()
	for _, ns := range []string{"inet", "r1", "r2", "h1", "h2"} {
		l.run("ip", "netns", "add", l.NS(ns))
		l.run("ip", "-n", l.NS(ns), "link", "set", "lo", "up")
	}
	inet := l.NS("inet")
	l.run("ip", "-n", inet, "link", "add", "br0", "type", "bridge")
	l.run("ip", "-n", inet, "link", "set", "br0", "up")
	for _, a := range PublicIPs {
		l.run("ip", "-n", inet, "addr", "add", a+"/24", "dev", "br0")
	}
	for i, r := range []string{"r1", "r2"} {
		wan, port, lan, eth := l.dev("w"+r), l.dev("p"+r), l.dev("l"+r), l.dev("e"+r)
		h := fmt.Sprintf("h%d", i+1)
		l.run("ip", "link", "add", wan, "netns", l.NS(r), "type", "veth", "peer", "name", port, "netns", inet)
		l.run("ip", "-n", inet, "link", "set", port, "master", "br0", "up")
		l.run("ip", "-n", l.NS(r), "addr", "add", fmt.Sprintf("11.0.0.%d/24", i+2), "dev", wan)
		l.run("ip", "-n", l.NS(r), "link", "set", wan, "up")
		l.run("ip", "link", "add", lan, "netns", l.NS(r), "type", "veth", "peer", "name", eth, "netns", l.NS(h))
		l.run("ip", "-n", l.NS(r), "addr", "add", fmt.Sprintf("192.168.%d.1/24", i+1), "dev", lan)
		l.run("ip", "-n", l.NS(r), "link", "set", lan, "up")
		l.run("ip", "-n", l.NS(h), "addr", "add", fmt.Sprintf("192.168.%d.2/24", i+1), "dev", eth)
		l.run("ip", "-n", l.NS(h), "link", "set", eth, "up")
		l.run("ip", "-n", l.NS(h), "route", "add", "default", "via", fmt.Sprintf("192.168.%d.1", i+1))
		l.in(r, "sysctl", "-qw", "net.ipv4.ip_forward=1")
		masq := []string{"iptables", "-t", "nat", "-A", "POSTROUTING", "-o", wan, "-j", "MASQUERADE"}
		if symmetric && r == "r1" {
			masq = append(masq, "--random-fully")
		}
		l.in(r, masq...)
		// Dropped, not refused: a refusal would end a hole punch's first
		// SYN before the other side's arrives.
		l.in(r, "iptables", "-A", "INPUT", "-i", wan, "-m", "conntrack", "--ctstate", "NEW,INVALID", "-j", "DROP")
		// What the router forwards on purpose (a port mapping, see
		// StartUPnP) passes its firewall.
		l.in(r, "iptables", "-A", "FORWARD", "-i", wan, "-m", "conntrack", "--ctstate", "DNAT", "-j", "ACCEPT")
		l.in(r, "iptables", "-A", "FORWARD", "-i", wan, "-m", "conntrack", "--ctstate", "NEW,INVALID", "-j", "DROP")
	}
}

// miniupnpd is Debian's UPnP IGD and NAT-PMP daemon (miniupnpd-nftables).
const miniupnpd = "/usr/sbin/miniupnpd"

// StartUPnP runs miniupnpd on router r1, as a home router offers port
// mapping: UPnP IGD and NAT-PMP on its LAN side, for the LAN's hosts and
// ports 1024 and up, mapping on its public address 11.0.0.2. It returns
// once the daemon listens, and stops it when the test ends.
func (l *NATLab) StartUPnP() {
	l.t.Helper()
	if _, err := os.Stat(miniupnpd); err != nil {
		l.t.Fatalf("%s: %v (apt-get install miniupnpd-nftables)", miniupnpd, err)
	}
	if _, err := exec.LookPath("nft"); err != nil {
		l.t.Fatalf("nft: %v (apt-get install nftables)", err)
	}
	dir := l.t.TempDir()
	// The tables and chains miniupnpd adds its rules to (its nft_init.sh,
	// whose helper script Debian does not ship).
	rules := filepath.Join(dir, "miniupnpd.nft")
	os.WriteFile(rules, []byte(`table inet filter {
	chain forward { type filter hook forward priority 0; policy accept; jump miniupnpd; }
	chain miniupnpd { }
	chain prerouting { type nat hook prerouting priority -100; policy accept; jump prerouting_miniupnpd; }
	chain postrouting { type nat hook postrouting priority 100; policy accept; jump postrouting_miniupnpd; }
	chain prerouting_miniupnpd { }
	chain postrouting_miniupnpd { }
}
`), 0o644)
	l.in("r1", "nft", "-f", rules)
	conf := filepath.Join(dir, "miniupnpd.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf(`ext_ifname=%s
listening_ip=%s
enable_natpmp=yes
enable_upnp=yes
secure_mode=yes
system_uptime=no
notify_interval=60
uuid=3d3cec3a-8cf0-11e0-98ee-001a6bd2d07b
allow 1024-65535 192.168.1.0/24 1024-65535
deny 0-65535 0.0.0.0/0 0-65535
`, l.dev("wr1"), l.dev("lr1"))), 0o644)
	cmd := l.Command("r1", miniupnpd, "-d", "-f", conf, "-P", filepath.Join(dir, "miniupnpd.pid"))
	log := &Log{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		l.t.Fatalf("miniupnpd: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	l.t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.After(10 * time.Second)
	for !strings.Contains(log.String(), "Listening for NAT-PMP") {
		select {
		case <-done:
			l.t.Fatalf("miniupnpd exited:\n%s", log.String())
		case <-deadline:
			l.t.Fatalf("miniupnpd does not listen after 10 s:\n%s", log.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	l.upnpLog = log
}

// UPnPLog is what miniupnpd wrote so far.
func (l *NATLab) UPnPLog() string {
	if l.upnpLog == nil {
		return ""
	}
	return l.upnpLog.String()
}

// Conntrack is router r's connection tracking table (r1 or r2): each
// flow's two directions, the mapped port in the reply's destination. A
// test shows it when traffic took a path the NAT should not have let it.
func (l *NATLab) Conntrack(r string) string {
	out, err := l.Command(r, "cat", "/proc/net/nf_conntrack").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s: conntrack: %v %s", r, err, out)
	}
	return string(out)
}

// Log is what a process writes, kept for a test to read while it runs.
type Log struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Log) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Log) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// ForEachNAT runs f in a subtest on a fresh lab for each kind of NAT in
// front of h1: "cone" (port-preserving, which hole punching passes) and
// "symmetric" (which it cannot).
func ForEachNAT(t *testing.T, f func(t *testing.T, lab *NATLab, symmetric bool)) {
	for _, symmetric := range []bool{false, true} {
		name := map[bool]string{false: "cone", true: "symmetric"}[symmetric]
		t.Run(name, func(t *testing.T) { f(t, NewNATLab(t, symmetric), symmetric) })
	}
}
