package lease

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// pullsOn is a provider's image server on the local engine, with jobs.
func pullsOn(t *testing.T, jobs config.JobsConfig) (*imagePulls, *executor.Docker) {
	t.Helper()
	executortest.BusyboxImage(t)
	d, err := executor.NewDocker()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	offer := func() (*pb.Offer, bool) { return &pb.Offer{}, true }
	return newImagePulls(d, jobs, offer, slog.New(slog.NewTextHandler(io.Discard, nil)), nil), d
}

// A renter's requests spend its own budget of pulls and nobody else's:
// five that fail, from a stranger, leave an honest renter's pull to go
// through.
func TestAStrangersFailingPullsDoNotSpendAnotherRentersBudget(t *testing.T) {
	reg := executortest.Registry(t)
	honest, _ := executortest.PushImage(t, reg, "idlegrid-test/honest", 1<<10)
	ip, _ := pullsOn(t, config.DefaultJobsConfig())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stranger, renter := peer.ID("stranger"), peer.ID("renter")
	for i := range pullBurst {
		if _, err := ip.ready(ctx, stranger, fmt.Sprintf("%s/nothing/here:%d", reg, i), func(*pb.ImageProgress) {}); err == nil {
			t.Fatalf("a pull of an image the registry lacks went through")
		}
	}
	if _, err := ip.ready(ctx, stranger, reg+"/nothing/here:x", func(*pb.ImageProgress) {}); err == nil || !strings.Contains(err.Error(), "pulls_per_hour") {
		t.Errorf("the stranger's request past its burst: %v, want its own pulls_per_hour spent", err)
	}
	got, err := ip.ready(ctx, renter, honest, func(*pb.ImageProgress) {})
	if err != nil || !got.Pulled {
		t.Fatalf("the honest renter's pull after the stranger's five: %+v, %v; want it pulled", got, err)
	}
}

// Pulls are budgeted in bytes on disk, per renter and in all: a few
// bytes of registry data that unpack to more than the renter may keep
// are removed at once, and what a fetch keeps is removed once no lease
// has used it for jobs.image_keep; a full disk makes room from images no
// lease uses, never from those a lease names.
func TestPullsAreBudgetedInBytesOnDiskAndFreedOnAClock(t *testing.T) {
	reg := executortest.Registry(t)
	const zeros = 48 << 20
	bomb, _ := executortest.PushPayload(t, reg, "idlegrid-test/zeros", make([]byte, zeros))
	small1, _ := executortest.PushImage(t, reg, "idlegrid-test/small1", 1<<10)
	small2, _ := executortest.PushImage(t, reg, "idlegrid-test/small2", 1<<10)
	small3, _ := executortest.PushImage(t, reg, "idlegrid-test/small3", 1<<10)
	jobs := config.DefaultJobsConfig()
	jobs.MaxImageGiB = 0 // the budget alone bounds a pull
	ip, d := pullsOn(t, jobs)
	cli := executortest.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base, err := cli.ImageInspect(ctx, executortest.BusyboxImageName)
	if err != nil {
		t.Fatal(err)
	}
	// Room for two small images in all, one a renter: not for the bomb,
	// which the registry holds in a few hundred KiB.
	small := base.Size + 64<<10
	perRenter := small + 512<<10 // what is left after one is less than minFetch
	ip.budget = newImageBudget(2*small+1<<20, perRenter, time.Hour, 30)
	stranger, renter, third := peer.ID("stranger"), peer.ID("renter"), peer.ID("third")
	nop := func(*pb.ImageProgress) {}

	_, err = ip.ready(ctx, stranger, bomb, nop)
	if !errors.Is(err, executor.ErrImageTooLarge) {
		t.Fatalf("a pull of %d zeros for a renter who may keep %d bytes: %v, want ErrImageTooLarge", zeros, perRenter, err)
	}
	if id, _ := d.ImageID(ctx, bomb); id != "" {
		t.Errorf("the image too large is on the engine after its pull: %s", id)
	}
	if all, own := ip.budget.usage(stranger); all != 0 || own != 0 {
		t.Errorf("after a pull refused, %d bytes held in all, %d for the stranger; want none", all, own)
	}

	got, err := ip.ready(ctx, renter, small1, nop)
	if err != nil || !got.Pulled {
		t.Fatalf("the honest renter's pull after the bomb: %+v, %v", got, err)
	}
	all, own := ip.budget.usage(renter)
	if own != int64(got.SizeBytes) || all > ip.budget.total {
		t.Errorf("after the renter's pull: %d bytes charged to it (the image is %d), %d in all of %d", own, got.SizeBytes, all, ip.budget.total)
	}
	if _, err := ip.ready(ctx, renter, small2, nop); err == nil || !strings.Contains(err.Error(), "image_renter_gib") {
		t.Errorf("a second image past the renter's own budget: %v, want refused by jobs.image_renter_gib", err)
	}

	// Leases name small1 and small2: a third renter's pull finds the disk
	// full and nothing it may remove.
	if _, err := ip.ready(ctx, stranger, small2, nop); err != nil {
		t.Fatalf("the stranger's small pull within the whole budget: %v", err)
	}
	ip.inUse = func(context.Context) []string { return []string{small1, small2} }
	if _, err := ip.ready(ctx, third, small3, nop); err == nil || !strings.Contains(err.Error(), "image_disk_gib") {
		t.Errorf("a pull past the whole budget with every image in use: %v, want refused by jobs.image_disk_gib", err)
	}
	// Once small2 is named by no lease, it makes room.
	ip.inUse = func(context.Context) []string { return []string{small1} }
	if got, err := ip.ready(ctx, third, small3, nop); err != nil || !got.Pulled {
		t.Fatalf("a pull past the whole budget with an image no lease names: %+v, %v; want room made", got, err)
	}
	if id, _ := d.ImageID(ctx, small2); id != "" {
		t.Errorf("the image removed to make room is still on the engine")
	}
	if id, _ := d.ImageID(ctx, small1); id == "" {
		t.Errorf("the image a lease names was removed to make room")
	}
	if all, _ := ip.budget.usage(third); all > ip.budget.total {
		t.Errorf("%d bytes held in all, past %d", all, ip.budget.total)
	}

	// On the clock: once no lease names them, images go keep after their
	// last use.
	ip.inUse = nil
	ip.sweep(ctx, time.Now().Add(30*time.Minute), 0)
	if id, _ := d.ImageID(ctx, small3); id == "" {
		t.Errorf("an image removed before image_keep")
	}
	ip.sweep(ctx, time.Now().Add(2*time.Hour), 0)
	for _, ref := range []string{small1, small3} {
		if id, _ := d.ImageID(ctx, ref); id != "" {
			t.Errorf("%s is on the engine image_keep after its last use", ref)
		}
	}
	if all, _ := ip.budget.usage(renter); all != 0 {
		t.Errorf("%d bytes held after every image went", all)
	}
}

// A provider restarted still knows what it fetched for renters, and
// frees it on the clock.
func TestImagesFetchedBeforeARestartAreStillFreedOnTheClock(t *testing.T) {
	reg := executortest.Registry(t)
	ref, _ := executortest.PushImage(t, reg, "idlegrid-test/restarted", 1<<10)
	file := filepath.Join(t.TempDir(), FetchedImagesFile)
	before, d := pullsOn(t, config.DefaultJobsConfig())
	if err := before.keepFile(file); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	renter := newKeyID(t)
	got, err := before.ready(ctx, renter, ref, func(*pb.ImageProgress) {})
	if err != nil || !got.Pulled {
		t.Fatalf("pull: %+v, %v", got, err)
	}
	after, _ := pullsOn(t, config.DefaultJobsConfig())
	if err := after.keepFile(file); err != nil {
		t.Fatal(err)
	}
	if _, own := after.budget.usage(renter); own != int64(got.SizeBytes) {
		t.Errorf("after a restart %d bytes are charged to the renter, want the %d it fetched", own, got.SizeBytes)
	}
	after.sweep(ctx, time.Now().Add(config.DefaultJobsConfig().ImageKeep.Std()+time.Minute), 0)
	if id, _ := d.ImageID(ctx, ref); id != "" {
		t.Errorf("the image fetched before the restart is on the engine image_keep after its fetch")
	}
	if all, _ := after.budget.usage(renter); all != 0 {
		t.Errorf("%d bytes held after the sweep", all)
	}
}

// newKeyID is the ID of a fresh key.
func newKeyID(t *testing.T) peer.ID {
	t.Helper()
	_, pub, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
