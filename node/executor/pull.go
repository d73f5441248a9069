package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/pkg/jsonmessage"
)

// Pull errors; callers test for them with errors.Is.
var (
	// ErrImageTooLarge: the image is larger than the provider allows.
	ErrImageTooLarge = errors.New("image too large")
	// ErrPullFailed: the engine could not pull the image (no such image
	// or tag, a registry that does not answer, a digest that does not
	// match).
	ErrPullFailed = errors.New("image pull failed")
)

// PullRules are a provider's rules for the images it pulls for renters.
type PullRules struct {
	Images ImagePolicy
	// MaxBytes bounds an image: its layers as the registry announces them
	// (compressed) while pulling, and its unpacked size once pulled; an
	// image over it is refused and removed. Zero: no bound.
	MaxBytes int64
	// NoPull refuses every image not present already (ErrUnknownImage).
	NoPull bool
	// Admit, when set, is asked before a fetch (a pull or a load) starts,
	// and may wait (for a turn, say); its error refuses the fetch (a
	// provider's budget). The admission may bound the fetch tighter than
	// MaxBytes, and learns how it ended.
	Admit func() (Admission, error)
}

// Admission is a fetch admitted under a provider's budget.
type Admission struct {
	// MaxBytes bounds this fetch as PullRules.MaxBytes does (the budget
	// left to it); zero: MaxBytes alone.
	MaxBytes int64
	// Done, when set, is called once the fetch has ended: the image it
	// made present (on disk now, the caller's to account for and in time
	// remove), or why it failed (an image too large is removed already).
	Done func(Image, error)
}

// Limit is the bound of a fetch under rules and the admission a.
func (a Admission) Limit(rules PullRules) int64 {
	if a.MaxBytes > 0 && (rules.MaxBytes <= 0 || a.MaxBytes < rules.MaxBytes) {
		return a.MaxBytes
	}
	return rules.MaxBytes
}

// Finish tells the admission how its fetch ended.
func (a Admission) Finish(img Image, err error) {
	if a.Done != nil {
		a.Done(img, err)
	}
}

// PullProgress is a pull under way.
type PullProgress struct {
	DoneBytes, TotalBytes int64 // layers' bytes downloaded, and announced
	Layers, LayersDone    int
}

// Image is an image present on the engine.
type Image struct {
	ID          string
	SizeBytes   int64
	RepoDigests []string
	Pulled      bool // false: it was present already
	PullTime    time.Duration
	// Names are the references the fetch gave the image (the name
	// pulled; none for an image loaded, which is only its ID): removing
	// them and then the ID undoes the fetch.
	Names []string
}

// Puller is an executor that can fetch the images its leases name.
type Puller interface {
	// Pull makes ref present under rules, reporting progress as it goes
	// (progress may be nil). An image present already is only checked.
	Pull(ctx context.Context, ref string, rules PullRules, progress func(PullProgress)) (Image, error)
}

var _ Puller = (*Docker)(nil)

// Pull makes ref present on the engine: an image already present is
// judged by every one of its names and returned; one that is not is
// pulled when rules allow its name, and judged again once present.
// A reference with a digest is pulled by it: the engine verifies the
// content against the digest, and Pull checks the image carries it.
// A pull whose announced layers pass rules.MaxBytes is abandoned and
// refused, and an image whose unpacked size passes it is removed.
func (d *Docker) Pull(ctx context.Context, ref string, rules PullRules, progress func(PullProgress)) (_ Image, err error) {
	if err := rules.Images.CheckRef(ref); err != nil {
		return Image{}, err
	}
	if isID(ref) {
		img, err := d.present(ctx, ref, rules)
		if cerrdefs.IsNotFound(err) {
			return Image{}, fmt.Errorf("image %s is not present on this provider, and an ID cannot be pulled: %w", ref, ErrUnknownImage)
		}
		return img, err
	}
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return Image{}, fmt.Errorf("%w: %q is not an image reference: %v", ErrImageRefused, ref, err)
	}
	named = reference.TagNameOnly(named)
	img, err := d.present(ctx, named.String(), rules)
	if !cerrdefs.IsNotFound(err) {
		return img, err
	}
	if rules.NoPull {
		return Image{}, fmt.Errorf("image %s is not present on this provider, and it pulls none: %w", ref, ErrUnknownImage)
	}
	if rules.Admit != nil {
		adm, err := rules.Admit()
		if err != nil {
			return Image{}, fmt.Errorf("pull %s: %w", ref, err)
		}
		rules.MaxBytes = adm.Limit(rules)
		var img Image
		defer func() { adm.Finish(img, err) }()
		img, err = d.pull(ctx, ref, named, rules, progress)
		return img, err
	}
	return d.pull(ctx, ref, named, rules, progress)
}

// pull fetches named, ref as the renter wrote it, under rules.
func (d *Docker) pull(ctx context.Context, ref string, named reference.Named, rules PullRules, progress func(PullProgress)) (Image, error) {
	begin := time.Now()
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := d.disk.watch(d.rootDir(), rules.MaxBytes, cancel)
	body, err := d.cli.ImagePull(pctx, named.String(), image.PullOptions{})
	if err == nil {
		err = readPull(body, rules.MaxBytes, progress)
		body.Close()
	}
	if stop() {
		cancel()
		d.removeImage(named.String())
		return Image{}, fmt.Errorf("pull %s: %w: unpacking it took more than %d bytes of disk, the most this provider gives it", ref, ErrImageTooLarge, rules.MaxBytes)
	}
	if err != nil {
		if errors.Is(err, ErrImageTooLarge) {
			cancel()
			d.removeImage(named.String())
			return Image{}, fmt.Errorf("pull %s: %w", ref, err)
		}
		return Image{}, d.pullErr(ref, err)
	}
	img, err := d.present(ctx, named.String(), rules)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			err = fmt.Errorf("%w: the engine reported the pull of %s done, and has no such image", ErrPullFailed, ref)
		}
		if errors.Is(err, ErrImageRefused) || errors.Is(err, ErrImageTooLarge) {
			d.removeImage(named.String())
		}
		return Image{}, err
	}
	if dg, ok := named.(reference.Digested); ok && !slices.ContainsFunc(img.RepoDigests, func(s string) bool { return strings.HasSuffix(s, "@"+dg.Digest().String()) }) {
		d.removeImage(named.String())
		return Image{}, fmt.Errorf("%w: %s pulled, but the image does not carry digest %s (it has %v)", ErrPullFailed, ref, dg.Digest(), img.RepoDigests)
	}
	img.Pulled, img.PullTime, img.Names = true, time.Since(begin), []string{named.String()}
	return img, nil
}

// present returns ref as the engine has it, judged by rules: a cerrdefs
// not-found error when it has none.
func (d *Docker) present(ctx context.Context, ref string, rules PullRules) (Image, error) {
	info, err := d.cli.ImageInspect(ctx, ref)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return Image{}, err
		}
		return Image{}, d.engineErr("inspect "+ref, err)
	}
	if err := rules.Images.CheckImage(ref, info.ID, append(slices.Clone(info.RepoTags), info.RepoDigests...)); err != nil {
		return Image{}, err
	}
	if rules.MaxBytes > 0 && info.Size > rules.MaxBytes {
		return Image{}, fmt.Errorf("%w: %s unpacks to %d bytes; this provider takes images of at most %d", ErrImageTooLarge, ref, info.Size, rules.MaxBytes)
	}
	return Image{ID: info.ID, SizeBytes: info.Size, RepoDigests: slices.Clone(info.RepoDigests)}, nil
}

// readPull reads the engine's pull messages to their end: the layers it
// announces, with their sizes, and how far each has come. It fails at the
// engine's error, or once the announced layers pass maxBytes (0: none).
func readPull(body io.Reader, maxBytes int64, progress func(PullProgress)) error {
	dec := json.NewDecoder(body)
	total, done := map[string]int64{}, map[string]int64{}
	finished := map[string]bool{}
	for {
		var m jsonmessage.JSONMessage
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("reading the engine's pull messages: %w", err)
		}
		if m.Error != nil {
			return errors.New(m.Error.Message)
		}
		if m.ID == "" {
			continue
		}
		switch {
		case m.Status == "Downloading" && m.Progress != nil:
			total[m.ID], done[m.ID] = max(total[m.ID], m.Progress.Total), m.Progress.Current
		case m.Status == "Download complete" || m.Status == "Already exists" || m.Status == "Pull complete":
			finished[m.ID], done[m.ID] = true, total[m.ID]
		case m.Status == "Pulling fs layer" || m.Status == "Waiting":
			total[m.ID] = max(total[m.ID], 0) // announced; its size comes with its first download
		default:
			continue
		}
		var p PullProgress
		for id, t := range total {
			p.TotalBytes += t
			p.DoneBytes += done[id]
			p.Layers++
			if finished[id] {
				p.LayersDone++
			}
		}
		if maxBytes > 0 && p.TotalBytes > maxBytes {
			return fmt.Errorf("%w: its layers come to more than %d bytes, the most this provider takes", ErrImageTooLarge, maxBytes)
		}
		if progress != nil {
			progress(p)
		}
	}
}

// pullErr says why a pull failed: the engine unreachable, or the pull
// itself (ErrPullFailed).
func (d *Docker) pullErr(ref string, err error) error {
	if errors.Is(err, ErrImageTooLarge) {
		return err
	}
	if e := d.engineErr("pull "+ref, err); errors.Is(e, ErrNoEngine) {
		return e
	}
	return fmt.Errorf("%w: %s: %v", ErrPullFailed, ref, err)
}

// removeImage removes an image a pull should not have left; what cannot
// be removed (a container of a lease uses it) stays.
func (d *Docker) removeImage(ref string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = d.cli.ImageRemove(ctx, ref, image.RemoveOptions{PruneChildren: true})
}
