package node

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
)

// BenchmarkJoinSwarm20 measures how long a new node takes to see (hold a
// connection to) every peer of a 20-node loopback swarm it knows only one
// bootstrap peer of. Each iteration is one join of a fresh node; it reports
// the median join time and, as the reference from the same run, the median
// time of the node's first step, dialling its bootstrap peer.
//
//	go test ./node -run '^$' -bench JoinSwarm20 -benchtime 5x
func BenchmarkJoinSwarm20(b *testing.B) {
	boot := startNode(b, testRepo(b, "boot", nil), Options{})
	swarm := []*Node{boot}
	for i := range 19 {
		swarm = append(swarm, startNode(b, testRepo(b, fmt.Sprint("n", i), bootstrapFrom(boot)), Options{}))
	}
	waitFor(b, time.Minute, "the 20-node swarm is fully connected", connectedToAll(swarm))

	var joins, dials []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		r := testRepo(b, fmt.Sprint("new", i), bootstrapFrom(boot))
		n := newNode(b, r, Options{})
		b.StartTimer()
		start := time.Now()
		if err := n.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		dials = append(dials, time.Since(start)) // Start returns once the bootstrap peer answered
		waitFor(b, time.Minute, "the new node sees all 20 peers", func() bool {
			for _, m := range swarm {
				if len(n.host.Network().ConnsToPeer(m.id)) == 0 {
					return false
				}
			}
			return true
		})
		joins = append(joins, time.Since(start))
		b.StopTimer()
		n.Close()
		b.StartTimer()
	}
	b.ReportMetric(ms(median(joins)), "ms/join-p50")
	b.ReportMetric(ms(median(dials)), "ms/bootstrap-dial-p50")
	b.ReportMetric(float64(median(joins))/float64(median(dials)), "join/dial")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkAttestRoundTrip measures a renter's attestation of a provider
// with 8 fake H100s on loopback: challenge, document made and signed over
// the nonce, and verified. It reports the median beside the median ping
// RTT of the same connection.
//
//	go test ./node -run '^$' -bench AttestRoundTrip -benchtime 200x
func BenchmarkAttestRoundTrip(b *testing.B) {
	fake, err := attest.NewFake("dgxh100")
	if err != nil {
		b.Fatal(err)
	}
	// It measures the round trip, many times over, not the provider's limit
	// on one peer's challenges (p2p.AttestLimits): lift it for this run.
	limits := p2p.AttestLimits
	p2p.AttestLimits.Rate = p2p.Rate{}
	b.Cleanup(func() { p2p.AttestLimits = limits })
	renter := startNode(b, testRepo(b, "renter", nil), Options{})
	prov := startNode(b, testRepo(b, "prov", both(bootstrapFrom(renter), func(c *config.Config) {
		c.Provider.Enabled, c.Provider.GPUSource = true, "fake:dgxh100"
	})), Options{GPUSource: fake})
	ctx := context.Background()
	var rtts, pings []time.Duration
	for b.Loop() {
		t0 := time.Now()
		res, err := renter.Attest(ctx, api.AttestRequest{Peer: prov.id.String()})
		rtts = append(rtts, time.Since(t0))
		if err != nil || !res.Verified {
			b.Fatalf("attest: %+v %v", res, err)
		}
		pctx, cancel := context.WithCancel(ctx) // ping.Ping pings until cancelled
		pr := <-ping.Ping(pctx, renter.host, prov.id)
		cancel()
		if pr.Error != nil {
			b.Fatal(pr.Error)
		}
		pings = append(pings, pr.RTT)
	}
	b.ReportMetric(ms(median(rtts)), "ms/attest-p50")
	b.ReportMetric(ms(median(pings)), "ms/ping-p50")
	b.ReportMetric(float64(median(rtts))/float64(median(pings)), "attest/ping")
}

// BenchmarkRentFirstOutput20 measures what a renter waits for: from
// starting a fresh light client to its container's first line of output,
// renting 2 H100s in a loopback swarm of 20 providers (fake DGX machines,
// real Docker containers, the image already present). Each iteration is a
// new renter; the stages are reported as medians: discover (start, join,
// book sync until an offer fits), match, attest, negotiate, start (lease
// accepted to first output). The reference from the same run is the
// executor alone: a container of the same image started directly, to its
// first output.
//
//	go test ./node -run '^$' -bench RentFirstOutput20 -benchtime 5x
func BenchmarkRentFirstOutput20(b *testing.B) {
	image := executortest.BusyboxImage(b)
	boot := startNode(b, testRepo(b, "boot", nil), Options{})
	for i := range 20 {
		fake, err := attest.NewFake(attest.FakeMachines[i%len(attest.FakeMachines)])
		if err != nil {
			b.Fatal(err)
		}
		p := startNode(b, testRepo(b, fmt.Sprint("prov", i), both(bootstrapFrom(boot), func(c *config.Config) {
			c.Provider.Enabled, c.Provider.GPUSource = true, "fake:"+attest.FakeMachines[i%len(attest.FakeMachines)]
			c.Provider.Price = fmt.Sprintf("2.%02d", i)
			c.Jobs.HeartbeatInterval = config.Dur(time.Second)
		})), Options{GPUSource: fake})
		removeJobsOf(b, p)
	}
	waitFor(b, time.Minute, "every provider's offer in the bootstrap node's book", func() bool {
		return boot.market.Snapshot().Len() == 20
	})
	req := rentRequest(image, "sh", "-c", "echo first")
	req.Hours = 1.0 / 60 * 10
	var total, discover, match, att, negotiate, start, direct []time.Duration
	for i := 0; b.Loop(); i++ {
		r := testRepo(b, fmt.Sprint("renter", i), bootstrapFrom(boot))
		t0 := time.Now()
		renter := newNode(b, r, Options{Light: true})
		if err := renter.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		started := time.Since(t0) // the light client is up: bootstrap peer dialled
		var out executortest.Buffer
		res, err := renter.Rent(context.Background(), req, RentOutput{Stdout: &out, Stderr: &out})
		if err != nil || res.Timings.FirstOutput == 0 {
			b.Fatalf("rent: %v %+v", err, res)
		}
		t := res.Timings
		total, discover = append(total, started+t.FirstOutput), append(discover, started+t.Discover)
		match, att, negotiate, start = append(match, t.Match), append(att, t.Attest), append(negotiate, t.Negotiate), append(start, t.Start)
		renter.Close()
		direct = append(direct, directFirstOutput(b, image, i))
	}
	b.ReportMetric(ms(median(total)), "ms/first-output-p50")
	for _, m := range []struct {
		name string
		ds   []time.Duration
	}{{"discover", discover}, {"match", match}, {"attest", att}, {"negotiate", negotiate}, {"start", start}, {"container-alone", direct}} {
		b.ReportMetric(ms(median(m.ds)), "ms/"+m.name+"-p50")
	}
	b.ReportMetric(float64(median(total))/float64(median(direct)), "rent/container-alone")
}

// directFirstOutput starts a container of image through the executor
// alone and returns the time to its first output.
func directFirstOutput(b *testing.B, image string, i int) time.Duration {
	d, err := executor.NewDocker(executor.LabelPrefix("idlegrid-bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	var out executortest.Buffer
	t0 := time.Now()
	job, err := d.Start(context.Background(), executor.Spec{LeaseID: fmt.Sprintf("direct-%d-%d", time.Now().UnixNano(), i), Image: image, Command: []string{"echo", "first"}}, executor.Output{Stdout: &out, Stderr: &out})
	if err != nil {
		b.Fatal(err)
	}
	out.WaitFor(b, "first", time.Minute)
	took := time.Since(t0)
	if err := job.Stop(context.Background(), 0); err != nil {
		b.Fatal(err)
	}
	return took
}
