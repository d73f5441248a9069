package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/idlegrid/idlegrid/p2p/p2ptest"
)

// TestRentThroughNATs rents end to end (attest, lease, container, output,
// receipt) from a provider daemon behind one NAT with a renter behind
// another, both in p2ptest.NATLab's namespaces; four public daemons are
// the swarm's bootstrap peers, and the first of them relays. Behind two
// port-preserving NATs the job's output comes over a direct connection
// (hole punching); with the provider behind a symmetric NAT it comes
// through the relay, and the rental still completes.
func TestRentThroughNATs(t *testing.T) {
	t.Parallel() // in namespaces of its own
	image := executortest.BusyboxImage(t)
	bin := buildBinary(t)
	p2ptest.ForEachNAT(t, func(t *testing.T, lab *p2ptest.NATLab, symmetric bool) {
		in := func(ns string, args ...string) string {
			t.Helper()
			out, err := lab.Command(ns, bin, args...).Output()
			if err != nil {
				t.Fatalf("idlegrid %v in %s: %v", args, ns, err)
			}
			return string(out)
		}
		// The public daemons: the relay first, each a bootstrap peer.
		var boots, publicRepos []string
		for i, ip := range p2ptest.PublicIPs {
			dir := filepath.Join(t.TempDir(), fmt.Sprint("public", i))
			cli(t, bin, "init", "--repo", dir, "--profile", "bootstrap", "--listen-port", "0", "--api-port", "0")
			setConfig(t, dir, "network.listen", fmt.Sprintf(`["/ip4/%s/tcp/4001", "/ip4/%s/udp/4001/quic-v1"]`, ip, ip))
			setConfig(t, dir, "nat.reachability", "public")
			if i > 0 {
				setConfig(t, dir, "network.bootstrap", `["`+boots[0]+`"]`)
			}
			var id struct {
				PeerID string `json:"peer_id"`
			}
			json.Unmarshal([]byte(in("inet", "id", "--json", "--repo", dir)), &id)
			boots = append(boots, fmt.Sprintf("/ip4/%s/udp/4001/quic-v1/p2p/%s", ip, id.PeerID), fmt.Sprintf("/ip4/%s/tcp/4001/p2p/%s", ip, id.PeerID))
			startIn(t, lab.Command("inet", bin, "daemon", "--repo", dir, "--log-format", "json"))
			publicRepos = append(publicRepos, dir)
		}
		bootList := `["` + strings.Join(boots, `", "`) + `"]`

		prov := providerRepo(t, bin, "/ip4/0.0.0.0/tcp/4001")
		setConfig(t, prov, "network.listen", `["/ip4/0.0.0.0/tcp/4001", "/ip4/0.0.0.0/udp/4001/quic-v1"]`)
		setConfig(t, prov, "network.bootstrap", bootList)
		// Hole punching's own log, shown where the test fails.
		setConfig(t, prov, "log.subsystems", `{libp2p = "warn", "dht/rtrefreshmanager" = "error", "p2p-holepunch" = "debug"}`)
		provLog := startIn(t, lab.Command("h1", bin, "daemon", "--repo", prov, "--log-format", "json"))
		start := time.Now()
		var st api.Status
		for st.Reachability.How != "relayed" {
			if time.Since(start) > 90*time.Second {
				t.Fatalf("the provider never took a relay reservation: %+v\n%s", st.Reachability, provLog)
			}
			time.Sleep(500 * time.Millisecond)
			out, _ := lab.Command("h1", bin, "status", "--json", "--repo", prov).Output()
			json.Unmarshal(out, &st)
		}
		t.Logf("provider reachable %s (%s) after %s", st.Reachability.How, st.Reachability.State, time.Since(start).Round(time.Second))

		// The rent behind the other NAT, then the same rent from the
		// provider's own network (its LAN address, no NAT between) as the
		// reference, in the same run.
		nat, natLog := rentIn(t, lab, "h2", bin, image, boots)
		lan, _ := rentIn(t, lab, "h1", bin, image, boots)
		var relayed int64 // every public daemon relays
		for _, dir := range publicRepos {
			relayed += relayBytes(t, lab, dir)
		}
		t.Logf("first output: through the NATs %s, on the provider's LAN %s (ratio %.2f); through the NATs the output came relayed: %v; the relays carried %.1f KB in all",
			nat.Timings.FirstOutput, lan.Timings.FirstOutput, float64(nat.Timings.FirstOutput)/float64(lan.Timings.FirstOutput), nat.Relayed, float64(relayed)/1e3)
		if nat.Relayed != symmetric {
			t.Errorf("output relayed: %v, want %v (hole punching %s possible)", nat.Relayed, symmetric, map[bool]string{false: "was", true: "was not"}[symmetric])
			t.Logf("the provider's log:\n%s\nthe renter's:\n%s", provLog, natLog)
			t.Logf("r1's connections:\n%s\nr2's connections:\n%s", lab.Conntrack("r1"), lab.Conntrack("r2"))
		}
		if lan.Relayed {
			t.Error("the rent on the provider's LAN went through the relay")
		}
	})
}

// rentIn runs `idlegrid rent --json` in namespace ns, with a throw-away
// identity and the lab's bootstrap peers, and checks its output and
// receipt; it returns the result and what rent wrote to stderr.
func rentIn(t *testing.T, lab *p2ptest.NATLab, ns, bin, image string, boots []string) (api.RentResult, string) {
	t.Helper()
	args := []string{"rent", "--repo", filepath.Join(t.TempDir(), "renter"), "--gpu", "H100", "--hours", "0.05", "--max-price", "5",
		"--gather", "10s", "--image", image, "--json"}
	for _, b := range boots {
		args = append(args, "--bootstrap", b)
	}
	args = append(args, "--", "echo", "hello from "+ns)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", lab.NS(ns), bin}, args...)...)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("rent from %s: %v\n%s", ns, err, stderr.String())
	}
	// --json: the result alone on stdout, the job's output on stderr.
	out := stdout.String()
	var res api.RentResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("rent --json from %s: %v\n%s", ns, err, out)
	}
	if !strings.Contains(stderr.String(), "hello from "+ns) || res.Receipt.Amount == "" {
		t.Errorf("rent from %s: no output or receipt:\n%s\n%s", ns, out, stderr.String())
	}
	return res, stderr.String()
}

// relayBytes reads what the relay daemon of repo dir carried, both ways,
// from its /metrics (libp2p_relaysvc_data_transferred_bytes_total).
func relayBytes(t *testing.T, lab *p2ptest.NATLab, dir string) int64 {
	t.Helper()
	addr, err := os.ReadFile(filepath.Join(dir, "api"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := lab.Command("inet", "busybox", "wget", "-qO-", strings.TrimSpace(string(addr))+"/metrics")
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("relay metrics from %s: %v: %s", addr, err, errb.String())
	}
	var total int64
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "libp2p_relaysvc_data_transferred_bytes_total") {
			var v float64
			fmt.Sscanf(line[strings.LastIndex(line, " ")+1:], "%g", &v)
			total += int64(v)
		}
	}
	return total
}

// startIn starts cmd and kills it when the test ends; its stderr is
// returned for failure messages.
func startIn(t *testing.T, cmd *exec.Cmd) *syncBuffer {
	t.Helper()
	var errb syncBuffer
	cmd.Stderr = &errb
	cmd.WaitDelay = childPipeWait
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		checkPipesClosed(t, cmd.Wait())
	})
	return &errb
}
