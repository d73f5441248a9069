package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
)

// concurrentPulls is how many images a provider pulls for renters at
// once; a request beyond waits its turn within its deadline.
const concurrentPulls = 2

// pullBurst is how many pulls may start at once before
// jobs.pulls_per_hour spaces them.
const pullBurst = 5

// imagePulls readies the images renters name before they propose
// leases: present ones are checked, others pulled under the provider's
// rules (its offer's image_allow and image_deny, jobs.max_image_gib) and
// its budget (jobs.pulls_per_hour, concurrentPulls at a time).
type imagePulls struct {
	puller executor.Puller
	jobs   JobsConfig
	offer  func() (*pb.Offer, bool)
	log    *slog.Logger
	turns  chan struct{}
	budget *rate.Limiter
	// metrics counts the pulls and loads the engine failed; may be nil.
	metrics *metrics
}

func newImagePulls(pl executor.Puller, jobs JobsConfig, offer func() (*pb.Offer, bool), log *slog.Logger, m *metrics) *imagePulls {
	return &imagePulls{
		puller: pl, jobs: jobs, offer: offer, log: log, metrics: m, turns: make(chan struct{}, concurrentPulls),
		budget: rate.NewLimiter(rate.Every(time.Hour/time.Duration(max(jobs.PullsPerHour, 1))), pullBurst),
	}
}

// ready makes ref present for the renter from, as the image protocol
// asks: its error is the refusal the renter reads.
func (ip *imagePulls) ready(ctx context.Context, from peer.ID, ref string, progress func(*pb.ImageProgress)) (_ *pb.ImageReady, err error) {
	defer func() { ip.failed(execPull, err) }()
	img, err := ip.puller.Pull(ctx, ref, ip.rules(ctx), func(p executor.PullProgress) {
		progress(&pb.ImageProgress{DoneBytes: uint64(max(p.DoneBytes, 0)), TotalBytes: uint64(max(p.TotalBytes, 0)), Layers: uint32(p.Layers), LayersDone: uint32(p.LayersDone)})
	})
	return ip.answer(from, ref, img, err)
}

var imageIDPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// load takes an image the renter from sends: one present already is only
// checked; one that is not is loaded without the layers present, under
// the same rules, budget and turns as a pull.
func (ip *imagePulls) load(ctx context.Context, from peer.ID, id string, up *pb.ImageUpload, body func(have int) io.Reader) (_ *pb.ImageReady, err error) {
	defer func() { ip.failed(execLoad, err) }()
	ld, ok := ip.puller.(executor.Loader)
	switch {
	case !ok || !ip.jobs.LoadImages:
		return nil, errors.New("this provider takes no images sent to it (jobs.load_images = false)")
	case !imageIDPattern.MatchString(id):
		return nil, fmt.Errorf("image ID %q: want sha256: and 64 hex digits", id)
	}
	rules := ip.rules(ctx)
	if img, ok, err := ld.HasImage(ctx, id, rules); err != nil || ok {
		return ip.answer(from, id, img, err)
	}
	release, err := rules.Admit()
	if err != nil {
		return nil, err
	}
	defer release()
	have, err := ld.LayersPresent(ctx, up.DiffIds)
	if err != nil {
		return nil, err
	}
	img, err := ld.Load(ctx, body(have), id, rules)
	return ip.answer(from, id, img, err)
}

// failed counts err as a failure of the engine at op when it is one: an
// image the engine could not fetch or load, or no engine; a refusal under
// the provider's rules or budget is none.
func (ip *imagePulls) failed(op string, err error) {
	if errors.Is(err, executor.ErrPullFailed) || errors.Is(err, executor.ErrNoEngine) {
		ip.metrics.executorFailed(op)
	}
}

// answer logs how an image was readied and says so to the renter.
func (ip *imagePulls) answer(from peer.ID, ref string, img executor.Image, err error) (*pb.ImageReady, error) {
	if err != nil {
		ip.log.Info("image not readied for a renter", "renter", from, "image", ref, "err", err)
		return nil, err
	}
	if img.Pulled {
		ip.log.Info("image fetched for a renter", "renter", from, "image", ref, "id", img.ID, "bytes", img.SizeBytes, "took", img.PullTime.Round(time.Millisecond))
	}
	return &pb.ImageReady{Id: img.ID, SizeBytes: uint64(max(img.SizeBytes, 0)), RepoDigests: img.RepoDigests, Pulled: img.Pulled, PullMs: uint64(img.PullTime.Milliseconds())}, nil
}

// rules are the provider's rules for the images it fetches, as its
// offer stands; a fetch is admitted within the budget, once it has a
// turn before ctx ends. An image present takes neither.
func (ip *imagePulls) rules(ctx context.Context) executor.PullRules {
	o, _ := ip.offer()
	return executor.PullRules{
		Images:   executor.ImagePolicy{Allow: o.GetImageAllow(), Deny: o.GetImageDeny()},
		MaxBytes: int64(ip.jobs.MaxImageGiB) << 30,
		NoPull:   !ip.jobs.Pull,
		Admit: func() (func(), error) {
			if !ip.budget.Allow() {
				return nil, fmt.Errorf("this provider has started its %d pulls of the hour (jobs.pulls_per_hour); try another or later", ip.jobs.PullsPerHour)
			}
			select {
			case ip.turns <- struct{}{}:
				return func() { <-ip.turns }, nil
			case <-ctx.Done():
				return nil, fmt.Errorf("no turn to fetch an image before the deadline: %d fetches under way", concurrentPulls)
			}
		},
	}
}
