package executor

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
)

// LocalImage is an image of this machine's engine, saved to a file in
// the engine's save format, to send to a provider that lacks some of its
// layers.
type LocalImage struct {
	ID      string   // sha256:…
	DiffIDs []string // its layers, bottom first
	Tags    []string
	Size    int64 // unpacked
	path    string
	layers  []string // the layer files in the save, as DiffIDs
}

// saveManifest is the manifest.json of a save.
type saveManifest []struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// Loader is an executor that takes images sent to it.
type Loader interface {
	// HasImage reports whether id is present, judged by rules.
	HasImage(ctx context.Context, id string, rules PullRules) (Image, bool, error)
	// LayersPresent says how many of diffIDs, bottom first, are present.
	LayersPresent(ctx context.Context, diffIDs []string) (int, error)
	// Load loads an image save and checks it is id, under rules.
	Load(ctx context.Context, r io.Reader, id string, rules PullRules) (Image, error)
}

var _ Loader = (*Docker)(nil)

// maxSaveManifest bounds the manifest read from a save.
const maxSaveManifest = 1 << 20

// SaveImage saves ref from the engine into a file in dir (the system's
// temporary folder if empty), for WriteTar; Close removes the file.
func (d *Docker) SaveImage(ctx context.Context, ref, dir string) (*LocalImage, error) {
	info, err := d.cli.ImageInspect(ctx, ref)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("image %s is not on this machine's engine: %w", ref, ErrUnknownImage)
		}
		return nil, d.engineErr("inspect "+ref, err)
	}
	li := &LocalImage{ID: info.ID, DiffIDs: info.RootFS.Layers, Tags: info.RepoTags, Size: info.Size}
	f, err := os.CreateTemp(dir, "idlegrid-image-*.tar")
	if err != nil {
		return nil, err
	}
	li.path = f.Name()
	body, err := d.cli.ImageSave(ctx, []string{ref})
	if err == nil {
		_, err = io.Copy(f, body)
		body.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		li.Close()
		return nil, d.engineErr("save "+ref, err)
	}
	if err := li.readManifest(); err != nil {
		li.Close()
		return nil, fmt.Errorf("save %s: %w", ref, err)
	}
	return li, nil
}

// readManifest finds the save's layer files.
func (li *LocalImage) readManifest() error {
	f, err := os.Open(li.path)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return errors.New("no manifest.json in the engine's save")
		}
		if err != nil {
			return err
		}
		if h.Name != "manifest.json" {
			continue
		}
		var m saveManifest
		if err := json.NewDecoder(io.LimitReader(tr, maxSaveManifest)).Decode(&m); err != nil {
			return fmt.Errorf("manifest.json: %w", err)
		}
		if len(m) != 1 || len(m[0].Layers) != len(li.DiffIDs) {
			return fmt.Errorf("manifest.json: %d images, want one of %d layers", len(m), len(li.DiffIDs))
		}
		li.layers = m[0].Layers
		return nil
	}
}

// Close removes the saved file.
func (li *LocalImage) Close() error { return os.Remove(li.path) }

// WriteTar writes the save with the files of layers [0, from) left out:
// a provider that has those layers loads the image without them. It
// returns the bytes written.
func (li *LocalImage) WriteTar(w io.Writer, from int) (int64, error) {
	skip := map[string]bool{}
	for _, l := range li.layers[:min(max(from, 0), len(li.layers))] {
		skip[l] = true
	}
	f, err := os.Open(li.path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	cw := &countingWriter{w: w}
	tr, tw := tar.NewReader(f), tar.NewWriter(cw)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return cw.n, err
		}
		if skip[h.Name] {
			continue
		}
		if err := tw.WriteHeader(h); err != nil {
			return cw.n, err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return cw.n, err
		}
	}
	err = tw.Close()
	return cw.n, err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// maxImagesScanned bounds the images LayersPresent looks through.
const maxImagesScanned = 2000

// LayersPresent says how many of diffIDs, bottom first, the engine has:
// the longest run its images share with them from the bottom (a layer
// exists on the engine only on top of the ones below it).
func (d *Docker) LayersPresent(ctx context.Context, diffIDs []string) (int, error) {
	list, err := d.cli.ImageList(ctx, image.ListOptions{All: true})
	if err != nil {
		return 0, d.engineErr("list images", err)
	}
	best := 0
	for _, s := range list[:min(len(list), maxImagesScanned)] {
		info, err := d.cli.ImageInspect(ctx, s.ID)
		if err != nil {
			continue
		}
		n := 0
		for n < len(diffIDs) && n < len(info.RootFS.Layers) && info.RootFS.Layers[n] == diffIDs[n] {
			n++
		}
		best = max(best, n)
		if best == len(diffIDs) {
			break
		}
	}
	return best, nil
}

// Load loads the save r carries and checks the image it makes: it must
// be id, and pass rules (an image refused or too large is removed).
// More than rules.MaxBytes of save is refused before the engine has it
// all.
func (d *Docker) Load(ctx context.Context, r io.Reader, id string, rules PullRules) (Image, error) {
	begin := time.Now()
	if rules.MaxBytes > 0 {
		r = &cappedReader{r: r, left: rules.MaxBytes}
	}
	// The engine reads the save with none of the names it claims: a
	// loaded image is its ID, and moves no tag the engine holds.
	pr, pw := io.Pipe()
	filtered := make(chan error, 1)
	go func() {
		err := unnamedSave(pw, r, id)
		pw.CloseWithError(err)
		filtered <- err
	}()
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := d.disk.watch(d.rootDir(), rules.MaxBytes, cancel)
	resp, err := d.cli.ImageLoad(lctx, pr, client.ImageLoadWithQuiet(true))
	if err == nil {
		err = readPull(resp.Body, 0, nil)
		resp.Body.Close()
	}
	pr.CloseWithError(errLoadEnded)
	if ferr := <-filtered; ferr != nil && !errors.Is(ferr, errLoadEnded) && !errors.Is(ferr, io.ErrClosedPipe) {
		err = ferr // the engine's error is only what followed from it
	}
	if stop() {
		d.removeImage(id)
		return Image{}, fmt.Errorf("%w: loading it took more than %d bytes of disk, the most this provider gives it", ErrImageTooLarge, rules.MaxBytes)
	}
	if err != nil {
		return Image{}, d.loadErr(err)
	}
	img, err := d.present(ctx, id, rules)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return Image{}, fmt.Errorf("%w: the load made no image %s", ErrPullFailed, id)
		}
		if errors.Is(err, ErrImageRefused) || errors.Is(err, ErrImageTooLarge) {
			d.removeImage(id)
		}
		return Image{}, err
	}
	img.Pulled, img.PullTime = true, time.Since(begin)
	return img, nil
}

// errLoadEnded ends the copy of a save the engine no longer reads.
var errLoadEnded = errors.New("the engine's load ended")

func (d *Docker) loadErr(err error) error {
	if errors.Is(err, ErrImageTooLarge) {
		return err
	}
	if e := d.engineErr("load", err); errors.Is(e, ErrNoEngine) {
		return e
	}
	return fmt.Errorf("%w: load: %v", ErrPullFailed, err)
}

// cappedReader fails once more than left bytes have come.
type cappedReader struct {
	r    io.Reader
	left int64
}

func (c *cappedReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	if c.left -= int64(n); c.left < 0 {
		return 0, fmt.Errorf("%w: the image sent passes the most this provider takes", ErrImageTooLarge)
	}
	return n, err
}

// HasImage reports whether the engine has id, judged by rules.
func (d *Docker) HasImage(ctx context.Context, id string, rules PullRules) (Image, bool, error) {
	img, err := d.present(ctx, id, rules)
	if cerrdefs.IsNotFound(err) {
		return Image{}, false, nil
	}
	return img, err == nil, err
}
