package executor_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"

	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
)

// An image sent to a provider is content, not a name: a stranger's save
// whose manifest claims a tag the provider's engine already holds loads
// without moving it, and the next lease of that name runs the image the
// name stood for before.
func TestALoadedImageNeverMovesATag(t *testing.T) {
	e := newDockerEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	suffix := leaseID(t)[len(leaseID(t))-8:]
	victim := executortest.BuildImage(t, "victimlib/pytorch:2."+suffix, 1000)
	victimInfo, err := e.cli.ImageInspect(ctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	evil := executortest.BuildImage(t, "idlegrid-test/evil:"+suffix, 2000)
	archive, evilID := hostileSave(t, e, evil, victim)
	img, err := e.d.Load(ctx, bytes.NewReader(archive), evilID, executor.PullRules{})
	if err != nil || img.ID != evilID {
		t.Fatalf("load of the stranger's image: %+v, %v; want it loaded by its ID", img, err)
	}
	defer e.cli.ImageRemove(context.Background(), evilID, image.RemoveOptions{Force: true})
	after, err := e.cli.ImageInspect(ctx, victim)
	if err != nil || after.ID != victimInfo.ID {
		t.Fatalf("after the load %s is %s (%v); want the victim's %s", victim, after.ID, err, victimInfo.ID)
	}
	if loaded, err := e.cli.ImageInspect(ctx, evilID); err != nil || len(loaded.RepoTags) != 0 {
		t.Errorf("the loaded image has tags %v (%v); want none: the archive's names are not taken", loaded.RepoTags, err)
	}
	s := e.spec(t, "wc -c < /payload")
	s.Image = victim
	j := start(t, e.d, s)
	if code := wait(t, j.job); code != 0 || strings.TrimSpace(j.stdout.String()) != "1000" {
		t.Errorf("an honest lease of %s ran with code %d, printing %q; want the victim's 1000-byte payload", victim, code, j.stdout.String())
	}
}

// The names a save claims do not pass a provider's image_allow: the
// image is judged by what it is, and a stranger's image named
// nvcr.io/nvidia/… is refused where only that registry is allowed.
func TestALoadedImageIsJudgedByItsDigestNotItsClaimedName(t *testing.T) {
	e := newDockerEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	suffix := leaseID(t)[len(leaseID(t))-8:]
	evil := executortest.BuildImage(t, "idlegrid-test/evil:"+suffix, 3000)
	archive, evilID := hostileSave(t, e, evil, "nvcr.io/nvidia/pytorch:"+suffix)
	rules := executor.PullRules{Images: executor.ImagePolicy{Allow: []string{"nvcr.io/nvidia"}}}
	if _, err := e.d.Load(ctx, bytes.NewReader(archive), evilID, rules); !errors.Is(err, executor.ErrImageRefused) {
		t.Errorf("a load claiming nvcr.io/nvidia/pytorch where only nvcr.io/nvidia is allowed: %v, want ErrImageRefused", err)
	}
	if _, err := e.cli.ImageInspect(ctx, "nvcr.io/nvidia/pytorch:"+suffix); err == nil {
		t.Errorf("the claimed name nvcr.io/nvidia/pytorch:%s exists on the engine after the load", suffix)
	}
	if _, err := e.cli.ImageInspect(ctx, evilID); err == nil {
		t.Errorf("the refused image %s is still on the engine", evilID)
	}
	// Allowed by its digest, it loads: the rule names what runs.
	rules.Images.Allow = []string{evilID}
	if img, err := e.d.Load(ctx, bytes.NewReader(archive), evilID, rules); err != nil || img.ID != evilID {
		t.Errorf("a load allowed by its ID: %+v, %v", img, err)
	}
	e.cli.ImageRemove(context.Background(), evilID, image.RemoveOptions{Force: true})
}

// hostileSave saves ref as a stranger would send it: its manifest and
// legacy repositories file renamed to claim, and ref removed from the
// engine so the load must make it. It returns the save and the image ID.
func hostileSave(t *testing.T, e dockerEnv, ref, claim string) ([]byte, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	li, err := e.d.SaveImage(ctx, ref, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer li.Close()
	var save bytes.Buffer
	if _, err := li.WriteTar(&save, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.ImageRemove(ctx, ref, image.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	name, tag, _ := strings.Cut(claim, ":")
	var out bytes.Buffer
	tr, tw := tar.NewReader(&save), tar.NewWriter(&out)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		switch h.Name {
		case "manifest.json":
			var m []map[string]any
			if err := json.Unmarshal(body, &m); err != nil {
				t.Fatal(err)
			}
			m[0]["RepoTags"] = []string{claim}
			body, _ = json.Marshal(m)
		case "repositories":
			body, _ = json.Marshal(map[string]map[string]string{name: {tag: strings.TrimPrefix(li.ID, "sha256:")}})
		}
		h.Size = int64(len(body))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write(body)
	}
	tw.Close()
	return out.Bytes(), li.ID
}

// A job runs the image its name stands for as it starts, judged by what
// that image is: an ID the provider's rules deny is refused by any name.
func TestAJobRunsTheImageIDItsNameStandsForUnderTheRules(t *testing.T) {
	e := newDockerEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	ref := executortest.BuildImage(t, "idlegrid-test/named:"+leaseID(t)[len(leaseID(t))-8:], 1000)
	info, err := e.cli.ImageInspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	s := e.spec(t, "true")
	s.Image, s.Images = ref, executor.ImagePolicy{Deny: []string{info.ID}}
	if j, err := e.d.Start(ctx, s, executor.Output{Stdout: io.Discard, Stderr: io.Discard}); !errors.Is(err, executor.ErrImageRefused) {
		if j != nil {
			j.Stop(ctx, 0)
		}
		t.Errorf("start of %s, whose ID is denied: %v, want ErrImageRefused", ref, err)
	}
	s = e.spec(t, "true")
	s.Image = ref
	j := start(t, e.d, s)
	wait(t, j.job)
	c, err := e.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", executor.DefaultLabelPrefix+".lease="+s.LeaseID))})
	if err != nil || len(c) != 1 {
		t.Fatalf("the job's container: %d, %v", len(c), err)
	}
	if got := e.inspect(t, c[0].ID).Image; got != info.ID {
		t.Errorf("the job's container runs %s, want the ID %s stood for, %s", got, ref, info.ID)
	}
}
