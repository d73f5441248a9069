package executor_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
)

const payload = 2 << 20 // random, so it packs to about as much

// An image the engine has never seen is pulled from a registry with its
// progress reported, runs, and is only checked the second time.
func TestPullFetchesFromARegistry(t *testing.T) {
	e := newDockerEnv(t)
	byTag, _ := executortest.PushImage(t, executortest.Registry(t), "idlegrid-test/pulled", payload)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if _, err := e.cli.ImageInspect(ctx, byTag); !cerrdefs.IsNotFound(err) {
		t.Fatalf("%s present before the pull: %v", byTag, err)
	}
	var mu sync.Mutex
	var last executor.PullProgress
	calls, admitted, released := 0, 0, 0
	admit := func() (executor.Admission, error) {
		admitted++
		return executor.Admission{Done: func(executor.Image, error) { released++ }}, nil
	}
	img, err := e.d.Pull(ctx, byTag, executor.PullRules{Images: executor.ImagePolicy{Allow: []string{strings.Split(byTag, "/")[0] + "/"}}, Admit: admit},
		func(p executor.PullProgress) {
			mu.Lock()
			defer mu.Unlock()
			last, calls = p, calls+1
		})
	if err != nil {
		t.Fatalf("pull %s: %v", byTag, err)
	}
	if !img.Pulled || img.ID == "" || img.SizeBytes < payload || len(img.RepoDigests) == 0 {
		t.Errorf("pulled %+v", img)
	}
	mu.Lock()
	if calls == 0 || last.TotalBytes < payload || last.DoneBytes != last.TotalBytes || last.LayersDone != last.Layers || last.Layers == 0 {
		t.Errorf("progress: %d reports, the last %+v; want the payload's %d bytes at least, all done", calls, last, payload)
	}
	mu.Unlock()
	s := e.spec(t, "wc -c < /payload")
	s.Image = byTag
	j := start(t, e.d, s)
	if code := wait(t, j.job); code != 0 || strings.TrimSpace(j.stdout.String()) != "2097152" {
		t.Errorf("the pulled image ran with code %d, printing %q", code, j.stdout.String())
	}
	again, err := e.d.Pull(ctx, byTag, executor.PullRules{Admit: admit}, nil)
	if err != nil || again.Pulled || again.ID != img.ID {
		t.Errorf("second pull: %+v, %v; want the image present, not pulled again", again, err)
	}
	// Only the pull itself asked for a turn, and gave it back.
	if admitted != 1 || released != 1 {
		t.Errorf("admitted %d times and released %d, want 1 and 1: an image present takes no turn", admitted, released)
	}
}

// A reference with a digest pulls exactly that image; a digest the
// registry does not have pulls nothing.
func TestPullPinsTheDigest(t *testing.T) {
	e := newDockerEnv(t)
	_, byDigest := executortest.PushImage(t, executortest.Registry(t), "idlegrid-test/pinned", 1<<10)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	img, err := e.d.Pull(ctx, byDigest, executor.PullRules{}, nil)
	if err != nil || !img.Pulled {
		t.Fatalf("pull %s: %+v, %v", byDigest, img, err)
	}
	if !strings.Contains(strings.Join(img.RepoDigests, " "), byDigest[strings.Index(byDigest, "@"):]) {
		t.Errorf("pulled %s: digests %v", byDigest, img.RepoDigests)
	}
	other := byDigest[:strings.Index(byDigest, "@")] + "@sha256:" + strings.Repeat("ab", 32)
	if _, err := e.d.Pull(ctx, other, executor.PullRules{}, nil); !errors.Is(err, executor.ErrPullFailed) {
		t.Errorf("pull of a digest the registry lacks: %v, want ErrPullFailed", err)
	}
	if _, err := e.cli.ImageInspect(ctx, other); !cerrdefs.IsNotFound(err) {
		t.Errorf("%s present after a failed pull: %v", other, err)
	}
}

// The rules hold before and after a pull: a name refused is never
// fetched, and an image larger than allowed is abandoned and removed.
func TestPullHoldsItsRules(t *testing.T) {
	e := newDockerEnv(t)
	reg := executortest.Registry(t)
	byTag, _ := executortest.PushImage(t, reg, "idlegrid-test/big", payload)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	// Port 1 answers nothing: refused by name, the pull never starts.
	if _, err := e.d.Pull(ctx, "127.0.0.1:1/evil/x:1", executor.PullRules{Images: executor.ImagePolicy{Deny: []string{"127.0.0.1:1/evil"}}}, nil); !errors.Is(err, executor.ErrImageRefused) {
		t.Errorf("a denied repository: %v, want ErrImageRefused", err)
	}
	if _, err := e.d.Pull(ctx, byTag, executor.PullRules{Images: executor.ImagePolicy{Allow: []string{"nvcr.io/"}}}, nil); !errors.Is(err, executor.ErrImageRefused) {
		t.Errorf("a registry not allowed: %v, want ErrImageRefused", err)
	}
	if _, err := e.d.Pull(ctx, byTag, executor.PullRules{MaxBytes: 1 << 20}, nil); !errors.Is(err, executor.ErrImageTooLarge) {
		t.Errorf("a %d-byte payload under a 1 MiB bound: %v, want ErrImageTooLarge", payload, err)
	}
	if _, err := e.cli.ImageInspect(ctx, byTag); !cerrdefs.IsNotFound(err) {
		t.Errorf("%s present after it was refused as too large: %v", byTag, err)
	}
	if _, err := e.d.Pull(ctx, "127.0.0.1:1/nothing/here:1", executor.PullRules{}, nil); !errors.Is(err, executor.ErrPullFailed) {
		t.Errorf("a registry that does not answer: %v, want ErrPullFailed", err)
	}
}

// A few hundred KiB of registry data that unpack to hundreds of MiB: the
// pull is ended once the disk fills past its bound (and the slack left
// for the provider's other work), and nothing of it stays. The slack is
// 16 MiB here, not the default 256: the other tests of the package pull,
// load and delete images on the same disk meanwhile, and their deletions
// must not hide 320 MiB of unpacking behind a 260 MiB mark.
func TestAPullThatUnpacksPastItsBoundIsEndedAndRemoved(t *testing.T) {
	e := newDockerEnv(t, executor.DiskSlack(16<<20))
	const zeros = 320 << 20
	byTag, _ := executortest.PushPayload(t, executortest.Registry(t), "idlegrid-test/bomb", make([]byte, zeros))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var announced int64
	_, err := e.d.Pull(ctx, byTag, executor.PullRules{Admit: func() (executor.Admission, error) {
		return executor.Admission{MaxBytes: 4 << 20}, nil
	}}, func(p executor.PullProgress) { announced = p.TotalBytes })
	if !errors.Is(err, executor.ErrImageTooLarge) || !strings.Contains(err.Error(), "bytes of disk") {
		t.Fatalf("a pull of %d MiB of zeros under a 4 MiB bound: %v; want ErrImageTooLarge, for the disk it took", zeros>>20, err)
	}
	t.Logf("announced %d bytes packed; %v", announced, err)
	if _, err := e.cli.ImageInspect(ctx, byTag); !cerrdefs.IsNotFound(err) {
		t.Errorf("%s present after it was ended: %v", byTag, err)
	}
}
