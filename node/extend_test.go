package node

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/idlegrid/idlegrid/node/renter"
)

// A renter extends its running lease from a process of its own (a
// LeaseLink): the provider countersigns, the rent following the job
// learns of it on the job stream, the job runs past the lease's first
// end with its beats verified, and the receipt meters within the new
// term and names the extension. An extension past the provider's longest
// lease, or one sent again, is refused and changes nothing.
func TestARenterExtendsItsRunningLease(t *testing.T) {
	t.Parallel()
	image := executortest.BusyboxImage(t)
	clk := clock.NewFake()
	prov, renter := leaseSwarmOn(t, clk, func(c *config.Config) { c.Provider.MaxDuration = config.Dur(2 * time.Hour) })
	var out executortest.Buffer
	progress, _, lines := watchFor("lease ")
	done := rentAsync(context.Background(), renter, rentRequest(image, "sh", "-c", "echo up; while true; do sleep 0.1; done"), RentOutput{Stdout: &out, Stderr: &out, Progress: progress})
	out.WaitFor(t, "up", firstOutputWait)
	id := activeLease(t, prov).ID
	firstEnd := activeLease(t, prov).End

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	link, err := dialLease(ctx, renter.repo, id)
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()
	term, err := link.Extend(ctx, time.Hour)
	if err != nil {
		t.Fatalf("extend by an hour: %v", err)
	}
	if term.Seq != 1 || !term.End().Equal(firstEnd.Add(time.Hour)) {
		t.Fatalf("extended term: seq %d, end %s; want 1 and %s", term.Seq, term.End(), firstEnd.Add(time.Hour))
	}
	waitFor(t, 20*time.Second, "the rent learns of the extension", func() bool {
		return slices.ContainsFunc(lines(), func(l string) bool { return strings.HasPrefix(l, "lease "+id+" extended") })
	})
	if _, err := link.Extend(ctx, time.Hour); err == nil || !strings.Contains(err.Error(), "longest lease") {
		t.Errorf("an extension to 3 hours past a longest lease of 2: %v", err)
	}
	if reply := resend(t, link, term.Extension); reply.Extension != nil || reply.Code != pb.RejectCode_REJECT_BAD_REQUEST {
		t.Errorf("the same extension again: %v", reply)
	}

	// Past the first end the job runs on, its beats verified.
	if l := activeLease(t, prov); !l.End.Equal(term.End()) {
		t.Errorf("the provider's lease ends at %s, want %s", l.End, term.End())
	}
	clk.Advance(clk.Until(firstEnd) + time.Minute)
	waitFor(t, 20*time.Second, "a beat past the lease's first end", func() bool {
		rec, err := renter.leaseStore().Get(context.Background(), id)
		return err == nil && time.UnixMilli(rec.LastBeat).After(firstEnd)
	})
	if l := activeLease(t, prov); l.ID != id {
		t.Fatalf("the lease ended at its first end")
	}
	clk.Advance(clk.Until(term.End()) + time.Second)
	d := await(t, done, time.Minute, "the rent ends at the extended term's end")
	if d.err != nil {
		t.Fatalf("rent: %v", d.err)
	}
	rc := storedReceiptBody(t, prov, id)
	if len(d.res.Receipt.SignedBy) != 2 || rc.MeteredSeconds <= 3600 || !bytes.Equal(rc.ExtensionHash, market.BodyHash(term.Extension)) {
		t.Errorf("receipt: %+v; metered %d s, extension %x; want signed by both, over an hour, naming the extension", d.res.Receipt, rc.MeteredSeconds, rc.ExtensionHash)
	}
	if slices.ContainsFunc(lines(), func(l string) bool { return strings.Contains(l, "refused") }) {
		t.Errorf("the rent refused something: %q", lines())
	}
}

// resend sends ext to the lease's provider again, as an extension request.
func resend(t *testing.T, l *renter.LeaseLink, ext *pb.CoSigned) *pb.LeaseReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reply, err := l.Request(ctx, &pb.LeaseRequest{Kind: &pb.LeaseRequest_Extend{Extend: ext}})
	if err != nil {
		t.Fatal(err)
	}
	return reply
}
