package main

import (
	"bytes"
	"context"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
)

var firstOutput = regexp.MustCompile(`first output after \S+ \(discover \S+, match \S+, attest \S+, image (\S+), negotiate \S+, start \S+\)`)

// A renter names an image the provider has never seen, in a registry
// the provider allows: the provider pulls it before the lease, the
// renter sees the pull, and the job runs in it. A digest pins it; a
// digest the registry lacks, or a registry the provider does not allow,
// is refused before any lease. Over TCP and over QUIC, each with an
// image of its own, which its provider pulls.
func TestRentPullsFromARegistry(t *testing.T) {
	executortest.BusyboxImage(t)
	overTransports(t, rentPullsFromARegistry)
}

func rentPullsFromARegistry(t *testing.T, transport string) {
	registry := executortest.Registry(t)
	byTag, byDigest := executortest.PushImage(t, registry, "idlegrid-test/rentpull-"+transport, 2<<20)
	bin := buildBinary(t)
	prov := providerRepo(t, bin, listenOn(transport))
	setConfig(t, prov, "jobs.pull", "true")
	setConfig(t, prov, "provider.image_allow", `["`+registry+`/", "idlegrid-test/"]`)
	d := startDaemon(t, bin, prov)
	pid := waitUp(t, bin, d)

	rent := func(repo, image string, job ...string) (stdout, stderr string, code int) {
		args := append([]string{"rent", "--repo", repo, "--bootstrap", pid.Addrs[0], "--gpu", "H100", "--hours", "1",
			"--max-price", "5", "--gather", "5s", "--image", image, "--"}, job...)
		cmd := exec.Command(bin, args...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), exitCode(err)
	}
	renter := renterRepo(t, bin, "renter")
	stdout, stderr, code := rent(renter, byTag, "sh", "-c", "wc -c < /payload")
	if code != 0 || stdout != "2097152\n" {
		t.Fatalf("rent of %s: exit %d, stdout %q; want 0 and the payload's size\n%s", byTag, code, stdout, stderr)
	}
	// The pull came before the lease, and is not billed.
	pulled := strings.Index(stderr, "pulled "+byTag)
	accepted := strings.Index(stderr, " accepted by ")
	if pulled < 0 || accepted < pulled || !strings.Contains(stderr, "the pull is not billed") {
		t.Errorf("rent's progress does not show the pull before the lease:\n%s", stderr)
	}
	if m := firstOutput.FindStringSubmatch(stderr); m == nil {
		t.Errorf("rent printed no timings:\n%s", stderr)
	} else {
		t.Logf("rent of an image pulled from a loopback registry: %s", m[0])
	}

	// Pinned by digest: the same image, present now, runs.
	if _, stderr, code := rent(renterRepo(t, bin, "pinned"), byDigest, "true"); code != 0 {
		t.Errorf("rent of %s: exit %d\n%s", byDigest, code, stderr)
	}
	// A digest the registry lacks: refused before any lease (exit 123),
	// saying why.
	wrong := byDigest[:strings.Index(byDigest, "@")] + "@sha256:" + strings.Repeat("ab", 32)
	_, stderr, code = rent(renterRepo(t, bin, "wrong"), wrong, "true")
	if code != exitNoProvider || !strings.Contains(stderr, "image not ready") || !strings.Contains(stderr, "manifest unknown") {
		t.Errorf("rent of %s: exit %d; want %d, the image not ready, the manifest unknown\n%s", wrong, code, exitNoProvider, stderr)
	}
	// A registry the provider does not allow: its offer says so, and
	// nothing fits (exit 122).
	_, stderr, code = rent(renterRepo(t, bin, "elsewhere"), "127.0.0.1:1/elsewhere:1", "true")
	if code != exitNothingFits || !strings.Contains(stderr, "image not allowed") {
		t.Errorf("rent of an image from a registry not allowed: exit %d; want %d and \"image not allowed\"\n%s", code, exitNothingFits, stderr)
	}
	if ls := mustJSON[[]api.LeaseView](t, bin, "leases", "--json", "--repo", prov); len(ls) != 2 {
		t.Errorf("provider's leases: %d, want the 2 that ran (a refused image leases nothing)", len(ls))
	}
	d.stop(t)
}

// A renter sends an image it built to a provider whose engine has never
// seen it, without the layer the provider has (busybox's); the job runs
// in it, and a second rental finds it present. An image the provider's
// rules refuse by its ID is refused, sent or present. Over TCP and over
// QUIC, each to an engine of its own.
func TestRentSendsALocalImage(t *testing.T) {
	overTransports(t, rentSendsALocalImage)
}

func rentSendsALocalImage(t *testing.T, transport string) {
	ref := executortest.BuildImage(t, "idlegrid-test/sent-"+transport+":"+strconv.FormatInt(time.Now().UnixNano(), 36), 2<<20)
	engine := executortest.SecondEngine(t, true)
	bin := buildBinary(t)
	prov := providerRepo(t, bin, listenOn(transport))
	setConfig(t, prov, "jobs.docker_host", engine)
	d := startDaemon(t, bin, prov)
	pid := waitUp(t, bin, d)
	rent := func(repo string, job ...string) (string, string, int) {
		cmd := exec.Command(bin, append([]string{"rent", "--repo", repo, "--bootstrap", pid.Addrs[0], "--gpu", "H100", "--hours", "1",
			"--max-price", "5", "--gather", "5s", "--image-from-docker", ref, "--"}, job...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), exitCode(err)
	}
	stdout, stderr, code := rent(renterRepo(t, bin, "renter"), "sh", "-c", "wc -c < /payload")
	if code != 0 || stdout != "2097152\n" {
		t.Fatalf("rent --image-from-docker %s: exit %d, stdout %q\n%s", ref, code, stdout, stderr)
	}
	if !strings.Contains(stderr, "sent the image (") || !strings.Contains(stderr, "1 of 2 layers") {
		t.Errorf("rent did not say it sent the one layer the provider lacked:\n%s", stderr)
	}
	if m := firstOutput.FindStringSubmatch(stderr); m != nil {
		t.Logf("rent of an image sent from this machine's engine: %s", m[0])
	}
	stdout, stderr, code = rent(renterRepo(t, bin, "again"), "cat", "/payload")
	if code != 0 || len(stdout) != 2<<20 || strings.Contains(stderr, "sent the image") {
		t.Errorf("a second rental of %s: exit %d, %d bytes; want the image found present, not sent\n%s", ref, code, len(stdout), stderr)
	}
	// An image sent is judged by its ID: the names the renter's engine
	// gives it are not the provider's to trust.
	info, err := executortest.Docker(t).ImageInspect(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	setConfig(t, prov, "provider.image_deny", `["`+info.ID+`"]`)
	d.cmd.Process.Signal(syscall.SIGHUP)
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, stderr, code = rent(renterRepo(t, bin, "denied"), "true")
		if code == exitNothingFits || time.Now().After(deadline) {
			break
		}
	}
	// The offer carries the rule: the renter's match refuses the ID.
	if code != exitNothingFits || !strings.Contains(stderr, "image not allowed") {
		t.Errorf("rent of an image denied by its ID: exit %d; want %d and \"image not allowed\"\n%s", code, exitNothingFits, stderr)
	}
	d.stop(t)
}
