package executor_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"

	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/idlegrid/idlegrid/node/executor/executortest"
)

// An image saved on one side loads on the other without the layers the
// other has: here the engine is both, so the image is removed between.
func TestALocalImageLoadsWithoutTheLayersPresent(t *testing.T) {
	e := newDockerEnv(t)
	ref := executortest.BuildImage(t, "idlegrid-test/local:"+leaseID(t)[len(leaseID(t))-8:], payload)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	li, err := e.d.SaveImage(ctx, ref, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer li.Close()
	if len(li.DiffIDs) != 2 {
		t.Fatalf("%s has %d layers, want the base's and the payload's", ref, len(li.DiffIDs))
	}
	var whole bytes.Buffer
	if _, err := li.WriteTar(&whole, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.ImageRemove(ctx, ref, image.RemoveOptions{PruneChildren: true}); err != nil {
		t.Fatal(err)
	}
	have, err := e.d.LayersPresent(ctx, li.DiffIDs)
	if err != nil || have != 1 {
		t.Fatalf("layers present: %d, %v; want the base's", have, err)
	}
	var part bytes.Buffer
	if _, err := li.WriteTar(&part, have); err != nil {
		t.Fatal(err)
	}
	if part.Len() < payload || part.Len() >= whole.Len() {
		t.Errorf("the tar without the base layer: %d bytes, the whole %d; want the payload and less than the whole", part.Len(), whole.Len())
	}
	if _, err := e.d.Load(ctx, bytes.NewReader(part.Bytes()), li.ID, executor.PullRules{MaxBytes: 1 << 20}); !errors.Is(err, executor.ErrImageTooLarge) {
		t.Errorf("a %d-byte load under a 1 MiB bound: %v, want ErrImageTooLarge", part.Len(), err)
	}
	if _, err := e.d.Load(ctx, bytes.NewReader(part.Bytes()), li.ID, executor.PullRules{Images: executor.ImagePolicy{Deny: []string{li.ID}}}); !errors.Is(err, executor.ErrImageRefused) {
		t.Errorf("a load of an image denied by its ID: %v, want ErrImageRefused", err)
	}
	if _, err := e.cli.ImageInspect(ctx, li.ID); !cerrdefs.IsNotFound(err) {
		t.Errorf("a refused load left the image: %v", err)
	}
	img, err := e.d.Load(ctx, bytes.NewReader(part.Bytes()), li.ID, executor.PullRules{})
	if err != nil || img.ID != li.ID {
		t.Fatalf("load: %+v, %v", img, err)
	}
	s := e.spec(t, "wc -c < /payload")
	s.Image = li.ID
	j := start(t, e.d, s)
	if code := wait(t, j.job); code != 0 || strings.TrimSpace(j.stdout.String()) != "2097152" {
		t.Errorf("the loaded image ran with code %d, printing %q", code, j.stdout.String())
	}
}
