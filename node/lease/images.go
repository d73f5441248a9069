package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/idlegrid/idlegrid/node/metrics"
	"github.com/libp2p/go-libp2p/core/peer"
)

// concurrentPulls is how many images a provider pulls for renters at
// once; a request beyond waits its turn within its deadline.
const concurrentPulls = 2

// pullBurst is how many fetches a renter may start at once before
// jobs.pulls_per_hour spaces them.
const pullBurst = 5

// imagePulls readies the images renters name before they propose
// leases: present ones are checked, others fetched (pulled, or loaded
// from what the renter sends) under the provider's rules (its offer's
// image_allow and image_deny, jobs.max_image_gib) and its budget: each
// renter's own pace (jobs.pulls_per_hour), bytes on disk per renter
// (jobs.image_renter_gib) and in all (jobs.image_disk_gib), and
// concurrentPulls at a time. What a fetch puts on disk is removed
// jobs.image_keep after no lease uses it.
type imagePulls struct {
	puller executor.Puller
	jobs   config.JobsConfig
	offer  func() (*pb.Offer, bool)
	log    *slog.Logger
	turns  chan struct{}
	budget *imageBudget
	// inUse, when set, names the images of the provider's leases, which
	// stay whatever their age.
	inUse func(context.Context) []string
	// metrics counts the pulls and loads the engine failed; may be nil.
	metrics *metrics.Metrics
	// file, when set, keeps the list of the images held across restarts.
	file   string
	fileMu sync.Mutex
}

func newImagePulls(pl executor.Puller, jobs config.JobsConfig, offer func() (*pb.Offer, bool), log *slog.Logger, m *metrics.Metrics) *imagePulls {
	return &imagePulls{
		puller: pl, jobs: jobs, offer: offer, log: log, metrics: m, turns: make(chan struct{}, concurrentPulls),
		budget: newImageBudget(int64(jobs.ImageDiskGiB)<<30, int64(jobs.ImageRenterGiB)<<30, jobs.ImageKeep.Std(), jobs.PullsPerHour),
	}
}

// ready makes ref present for the renter from, as the image protocol
// asks: its error is the refusal the renter reads.
func (ip *imagePulls) ready(ctx context.Context, from peer.ID, ref string, progress func(*pb.ImageProgress)) (_ *pb.ImageReady, err error) {
	defer func() { ip.failed(metrics.ExecPull, err) }()
	img, err := ip.puller.Pull(ctx, ref, ip.rules(ctx, from), func(p executor.PullProgress) {
		progress(&pb.ImageProgress{DoneBytes: uint64(max(p.DoneBytes, 0)), TotalBytes: uint64(max(p.TotalBytes, 0)), Layers: uint32(p.Layers), LayersDone: uint32(p.LayersDone)})
	})
	return ip.answer(from, ref, img, err)
}

var imageIDPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// load takes an image the renter from sends: one present already is only
// checked; one that is not is loaded without the layers present, under
// the same rules, budget and turns as a pull.
func (ip *imagePulls) load(ctx context.Context, from peer.ID, id string, up *pb.ImageUpload, body func(have int) io.Reader) (_ *pb.ImageReady, err error) {
	defer func() { ip.failed(metrics.ExecLoad, err) }()
	ld, ok := ip.puller.(executor.Loader)
	switch {
	case !ok || !ip.jobs.LoadImages:
		return nil, errors.New("this provider takes no images sent to it (jobs.load_images = false)")
	case !imageIDPattern.MatchString(id):
		return nil, fmt.Errorf("image ID %q: want sha256: and 64 hex digits", id)
	}
	rules := ip.rules(ctx, from)
	if img, ok, err := ld.HasImage(ctx, id, rules); err != nil || ok {
		return ip.answer(from, id, img, err)
	}
	adm, err := rules.Admit()
	if err != nil {
		return nil, err
	}
	rules.MaxBytes, rules.Admit = adm.Limit(rules), nil
	var img executor.Image
	defer func() { adm.Finish(img, err) }()
	have, err := ld.LayersPresent(ctx, up.DiffIds)
	if err != nil {
		return nil, err
	}
	img, err = ld.Load(ctx, body(have), id, rules)
	return ip.answer(from, id, img, err)
}

// failed counts err as a failure of the engine at op when it is one: an
// image the engine could not fetch or load, or no engine; a refusal under
// the provider's rules or budget is none.
func (ip *imagePulls) failed(op string, err error) {
	if errors.Is(err, executor.ErrPullFailed) || errors.Is(err, executor.ErrNoEngine) {
		ip.metrics.ExecutorFailed(op)
	}
}

// answer logs how an image was readied and says so to the renter.
func (ip *imagePulls) answer(from peer.ID, ref string, img executor.Image, err error) (*pb.ImageReady, error) {
	if err != nil {
		ip.log.Info("image not readied for a renter", "renter", from, "image", ref, "err", err)
		return nil, err
	}
	if !img.Pulled {
		ip.budget.touch([]string{img.ID}, time.Now()) // wanted again: kept from now
	} else {
		ip.log.Info("image fetched for a renter", "renter", from, "image", ref, "id", img.ID, "bytes", img.SizeBytes, "took", img.PullTime.Round(time.Millisecond))
	}
	return &pb.ImageReady{Id: img.ID, SizeBytes: uint64(max(img.SizeBytes, 0)), RepoDigests: img.RepoDigests, Pulled: img.Pulled, PullMs: uint64(img.PullTime.Milliseconds())}, nil
}

// rules are the provider's rules for the images it fetches for the
// renter from, as its offer stands. A fetch is admitted within from's
// pace and byte budget and the provider's (removing the least lately
// used images no lease uses to make room), once it has a turn before ctx
// ends; it is bounded by the bytes granted, and what it makes is
// charged to from. An image present takes none of this.
func (ip *imagePulls) rules(ctx context.Context, from peer.ID) executor.PullRules {
	o, _ := ip.offer()
	maxBytes := int64(ip.jobs.MaxImageGiB) << 30
	return executor.PullRules{
		Images:   executor.ImagePolicy{Allow: o.GetImageAllow(), Deny: o.GetImageDeny()},
		MaxBytes: maxBytes,
		NoPull:   !ip.jobs.Pull,
		Admit: func() (executor.Admission, error) {
			if err := ip.budget.start(from); err != nil {
				return executor.Admission{}, err
			}
			grant, err := ip.budget.reserve(from, maxBytes)
			var short *errImageBudget
			if errors.As(err, &short) && short.shortBy > 0 && ip.sweep(ctx, time.Now(), short.shortBy) > 0 {
				grant, err = ip.budget.reserve(from, maxBytes)
			}
			if err != nil {
				return executor.Admission{}, err
			}
			select {
			case ip.turns <- struct{}{}:
			case <-ctx.Done():
				ip.budget.settle(from, grant, executor.Image{}, ctx.Err(), time.Now())
				return executor.Admission{}, fmt.Errorf("no turn to fetch an image before the deadline: %d fetches under way", concurrentPulls)
			}
			return executor.Admission{MaxBytes: grant, Done: func(img executor.Image, err error) {
				<-ip.turns
				ip.budget.settle(from, grant, img, err, time.Now())
				if err == nil && img.Pulled {
					ip.save()
				}
			}}, nil
		},
	}
}
