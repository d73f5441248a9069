package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
)

// A detached lease is extended from the command line: the provider
// countersigns, its lease's end moves, an extension past its longest
// lease is refused and a bad --hours is a usage error. The extension
// survives a SIGKILL of the provider: the renter that attaches after the
// restart settles a receipt both signed that names it, on both sides.
func TestExtendThroughProcesses(t *testing.T) {
	overTransports(t, extendThroughProcesses)
}

func extendThroughProcesses(t *testing.T, transport string) {
	image := executortest.BusyboxImage(t)
	docker := executortest.Docker(t)
	bin := buildBinary(t)
	prov, d, _, addr := restartableProvider(t, bin, docker, transport, [2]string{"provider.max_duration", "3h"})
	renter := renterRepo(t, bin, "renter", "--bootstrap", addr)

	id := strings.TrimSpace(cli(t, bin, "rent", "--detach", "--repo", renter, "--gpu", "H100", "--hours", "1",
		"--max-price", "5", "--gather", "5s", "--image", image, "--", "sh", "-c", "echo up; sleep 4; echo down"))
	var res extendResult
	if err := json.Unmarshal([]byte(cli(t, bin, "extend", id, "--hours", "1.5", "--json", "--repo", renter)), &res); err != nil {
		t.Fatal(err)
	}
	ls := mustJSON[[]api.LeaseView](t, bin, "leases", "--json", "--repo", prov)
	if len(ls) != 1 || res.Seq != 1 || !ls[0].End.Equal(ls[0].Start.Add(150*time.Minute)) || !res.End.Equal(ls[0].End) {
		t.Fatalf("extended by 1.5 hours: %+v; the provider's lease %+v", res, ls)
	}
	// The renter's record says so too, with no attach between.
	if mine := mustJSON[[]api.LeaseView](t, bin, "leases", "--json", "--repo", renter); len(mine) != 1 || !mine[0].End.Equal(ls[0].End) {
		t.Errorf("the renter's lease after extend: %+v; want it to end at %s, as the provider's", mine, ls[0].End)
	}
	out, err := exec.Command(bin, "extend", id, "--hours", "2", "--repo", renter).CombinedOutput()
	if code := exitCode(err); code != exitFailure || !strings.Contains(string(out), "longer than this provider's longest lease") {
		t.Errorf("an extension past the longest lease: exit %d, want %d and why\n%s", code, exitFailure, out)
	}
	out, err = exec.Command(bin, "extend", id, "--hours", "-1", "--repo", renter).CombinedOutput()
	if code := exitCode(err); code != exitUsage || !strings.Contains(string(out), "--hours -1") {
		t.Errorf("extend --hours -1: exit %d, want %d and the flag named\n%s", code, exitUsage, out)
	}

	d.cmd.Process.Kill()
	<-d.done
	d = startDaemon(t, bin, prov)
	waitUp(t, bin, d)
	att := attachProc(t, bin, renter, id)
	if code := att.wait(t, 60*time.Second); code != 0 || !strings.Contains(att.stderr.String(), "signed by renter and provider") {
		t.Fatalf("attach after the restart: exit %d, want 0 and a receipt both signed\n%s", code, att.stderr)
	}
	for _, repo := range []string{renter, prov} {
		rs := mustJSON[[]api.ReceiptView](t, bin, "receipts", "--json", "--repo", repo)
		if len(rs) != 1 || len(rs[0].SignedBy) != 2 || len(rs[0].Extension) != 64 {
			t.Errorf("receipts in %s: %+v; want one, both signed, naming the extension", repo, rs)
		}
	}
	d.stop(t)
}
