package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node/api"
)

// BenchmarkDaemonIdleRSS measures the resident memory of daemon processes
// in a 5-node loopback swarm after 60 s idle. It reports the median over
// the five, and as the reference from the same run the median right after
// the swarm formed.
//
//	go test ./cmd/idlegrid -run '^$' -bench DaemonIdleRSS -benchtime 1x
func BenchmarkDaemonIdleRSS(b *testing.B) {
	bin := buildBinary(b)
	for i := 0; i < b.N; i++ {
		var procs []*daemon
		var boot string
		for j := range 5 {
			dir := filepath.Join(b.TempDir(), fmt.Sprint("n", j))
			args := []string{"init", "--repo", dir, "--listen-port", "0", "--api-port", "0"}
			if boot != "" {
				args = append(args, "--bootstrap", boot)
			}
			cli(b, bin, args...)
			cli(b, bin, "config", "set", "--repo", dir, "network.listen", `["/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"]`)
			d := startDaemon(b, bin, dir)
			procs = append(procs, d)
			if boot == "" {
				id := waitJSON(b, time.Minute, "the first daemon answers", bin, func(v struct {
					Addrs []string `json:"addrs"`
				}) bool {
					return len(v.Addrs) > 0
				}, "id", "--json", "--repo", dir)
				boot = id.Addrs[0]
			}
		}
		for _, d := range procs {
			waitJSON(b, time.Minute, "every daemon sees the other four", bin, func(s api.Status) bool { return s.Peers == 4 }, "status", "--json", "--repo", d.repo)
		}
		formed := medianRSS(b, procs)
		time.Sleep(60 * time.Second) // the measurement is of a minute's idling
		idle := medianRSS(b, procs)
		b.ReportMetric(idle/(1<<20), "MiB-rss-idle60s-p50")
		b.ReportMetric(formed/(1<<20), "MiB-rss-formed-p50")
		b.ReportMetric(idle/formed, "idle/formed")
		for _, d := range procs {
			d.cmd.Process.Signal(os.Interrupt)
		}
		for _, d := range procs {
			<-d.done
		}
	}
}

func medianRSS(b *testing.B, procs []*daemon) float64 {
	var rss []float64
	for _, d := range procs {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseFloat(f[1], 64)
				rss = append(rss, kb*1024)
			}
		}
	}
	slices.Sort(rss)
	return rss[len(rss)/2]
}
