package lease

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/idlegrid/idlegrid/node/views"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
)

// Bounds of the images a provider fetches for renters.
const (
	// minFetch is the least budget a fetch is admitted with: a renter
	// or a provider with less left fetches nothing.
	minFetch = 1 << 20
	// maxHeldImages bounds the images fetched for renters that a
	// provider keeps account of, all renters together.
	maxHeldImages = 4096
	// maxFetchers bounds the renters whose pulls a provider keeps count
	// of; a renter whose count is back to its burst is forgotten first.
	maxFetchers = 4096
	// maxEvictions bounds the images one fetch may remove to make room.
	maxEvictions = 64
)

// imageBudget accounts for the bytes on disk of the images fetched for
// renters (pulled or loaded): each renter within perRenter, all within
// total, counting the fetches under way at the most each may take. An
// image is charged to the renter whose fetch made it, and removed keep
// after its last use when no lease uses it. It holds no I/O: the engine
// work is the caller's.
type imageBudget struct {
	total, perRenter int64
	keep             time.Duration
	perHour          int // fetches a renter starts per hour, after a burst of pullBurst

	mu       sync.Mutex
	held     map[string]*heldImage // by image ID
	renters  map[peer.ID]int64     // bytes held and reserved, by renter; none at zero
	used     int64                 // bytes held
	reserved int64                 // bytes granted to fetches under way
	rates    map[peer.ID]*rate.Limiter
}

// heldImage is an image fetched for a renter.
type heldImage struct {
	img     executor.Image
	renter  peer.ID
	touched time.Time // fetched, or last found in use
}

func newImageBudget(total, perRenter int64, keep time.Duration, perHour int) *imageBudget {
	return &imageBudget{total: total, perRenter: perRenter, keep: keep, perHour: max(perHour, 1),
		held: map[string]*heldImage{}, renters: map[peer.ID]int64{}, rates: map[peer.ID]*rate.Limiter{}}
}

// errImageBudget is a fetch refused for want of room; shortBy says how
// much the whole budget lacks (zero: the renter's own is what lacks).
type errImageBudget struct {
	msg     string
	shortBy int64
}

func (e *errImageBudget) Error() string { return e.msg }

// start counts a fetch renter starts against its own pace: a renter's
// requests, failing ones too, spend its count and nobody else's.
func (b *imageBudget) start(renter peer.ID) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	lim, ok := b.rates[renter]
	if !ok {
		if len(b.rates) >= maxFetchers {
			for id, l := range b.rates {
				if l.Tokens() >= pullBurst {
					delete(b.rates, id)
				}
			}
		}
		if len(b.rates) >= maxFetchers {
			return fmt.Errorf("this provider is fetching for %d renters already; try another or later", maxFetchers)
		}
		lim = rate.NewLimiter(rate.Every(time.Hour/time.Duration(b.perHour)), pullBurst)
		b.rates[renter] = lim
	}
	if !lim.Allow() {
		return fmt.Errorf("you have started %d fetches of images here this hour (jobs.pulls_per_hour, a renter); try another or later", b.perHour)
	}
	return nil
}

// reserve grants renter's fetch up to want bytes on disk, as much as its
// own budget and the whole one leave, and at least minFetch. Refused for
// the whole budget, the error is an *errImageBudget saying how much room
// removing others' images would make.
func (b *imageBudget) reserve(renter peer.ID, want int64) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	own := b.perRenter - b.renters[renter]
	if own < minFetch {
		return 0, &errImageBudget{msg: fmt.Sprintf("your images here come to %s, all this provider keeps for a renter (jobs.image_renter_gib %s); they go %s after their last use", views.FormatBytes(uint64(b.renters[renter])), views.FormatBytes(uint64(b.perRenter)), b.keep)}
	}
	grant := own
	if want > 0 {
		grant = min(grant, want)
	}
	room := b.total - b.used - b.reserved
	if room < grant || len(b.held) >= maxHeldImages {
		return 0, &errImageBudget{msg: fmt.Sprintf("this provider's disk for renters' images is full: %s held, %s being fetched, of %s (jobs.image_disk_gib); try another or later",
			views.FormatBytes(uint64(b.used)), views.FormatBytes(uint64(b.reserved)), views.FormatBytes(uint64(b.total))), shortBy: max(grant-room, 1)}
	}
	b.reserved += grant
	b.renters[renter] += grant
	return grant, nil
}

// settle ends a fetch granted grant bytes: the image it made, if it made
// one, is charged to renter from now.
func (b *imageBudget) settle(renter peer.ID, grant int64, img executor.Image, err error, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reserved -= grant
	b.credit(renter, grant)
	if err != nil || !img.Pulled || img.ID == "" {
		return
	}
	if h, ok := b.held[img.ID]; ok {
		h.touched = now // two fetches made it: charged once
		h.img.Names = append(h.img.Names, img.Names...)
		return
	}
	b.held[img.ID] = &heldImage{img: img, renter: renter, touched: now}
	b.used += img.SizeBytes
	b.renters[renter] += img.SizeBytes
}

// credit takes n bytes off renter's account.
func (b *imageBudget) credit(renter peer.ID, n int64) {
	if b.renters[renter] -= n; b.renters[renter] <= 0 {
		delete(b.renters, renter)
	}
}

// touch marks the images of ids used at now.
func (b *imageBudget) touch(ids []string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, id := range ids {
		if h, ok := b.held[id]; ok {
			h.touched = now
		}
	}
}

// forget drops the image id from the account: removed, or the
// provider's now.
func (b *imageBudget) forget(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h, ok := b.held[id]; ok {
		delete(b.held, id)
		b.used -= h.img.SizeBytes
		b.credit(h.renter, h.img.SizeBytes)
	}
}

// expired are the images not used since keep before now, oldest first.
func (b *imageBudget) expired(now time.Time) []executor.Image {
	return b.oldest(func(h *heldImage) bool { return now.Sub(h.touched) >= b.keep })
}

// oldest are the images held that pass ok, least lately used first.
func (b *imageBudget) oldest(ok func(*heldImage) bool) []executor.Image {
	b.mu.Lock()
	defer b.mu.Unlock()
	var hs []*heldImage
	for _, h := range b.held {
		if ok(h) {
			hs = append(hs, h)
		}
	}
	slices.SortFunc(hs, func(x, y *heldImage) int { return x.touched.Compare(y.touched) })
	imgs := make([]executor.Image, len(hs))
	for i, h := range hs {
		imgs[i] = h.img
	}
	return imgs
}

// usage says the bytes held in all, and renter's.
func (b *imageBudget) usage(renter peer.ID) (all, own int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.renters[renter]
}

// sweep removes the images fetched for renters that no lease has used
// for keep, and, with room > 0, as many more of the least lately used as
// it takes to free room bytes: an image a lease uses (inUse, by ID), or
// a container, stays; one the provider has given a name of its own is
// the provider's from then on. It returns the bytes freed.
func (ip *imagePulls) sweep(ctx context.Context, now time.Time, room int64) int64 {
	fx, ok := ip.puller.(executor.Fetcher)
	if !ok {
		return 0
	}
	inUse := ip.leaseImageIDs(ctx, fx)
	ip.budget.touch(inUse, now)
	var freed int64
	candidates := ip.budget.expired(now)
	if room > 0 {
		candidates = ip.budget.oldest(func(h *heldImage) bool { return !slices.Contains(inUse, h.img.ID) })
	}
	defer func() {
		if freed > 0 {
			ip.save()
		}
	}()
	for i, img := range candidates {
		if room > 0 && (freed >= room || i >= maxEvictions) {
			break
		}
		kept, err := fx.RemoveFetched(ctx, img)
		switch {
		case err != nil:
			ip.log.Warn("an image fetched for a renter not removed", "image", img.ID, "err", err)
		case kept == executor.KeptInUse:
			ip.budget.touch([]string{img.ID}, now)
		default: // removed, or pinned by the provider
			ip.budget.forget(img.ID)
			freed += img.SizeBytes
			ip.log.Info("an image fetched for a renter removed from the budget", "image", img.ID, "bytes", img.SizeBytes, "how", kept)
		}
	}
	return freed
}

// leaseImageIDs are the IDs of the images the provider's leases name.
func (ip *imagePulls) leaseImageIDs(ctx context.Context, fx executor.Fetcher) []string {
	if ip.inUse == nil {
		return nil
	}
	var ids []string
	for _, ref := range ip.inUse(ctx) {
		if imageIDPattern.MatchString(ref) {
			ids = append(ids, ref)
		} else if id, err := fx.ImageID(ctx, ref); err == nil && id != "" {
			ids = append(ids, id)
		}
	}
	return ids
}

// run sweeps the images fetched for renters on a clock until ctx ends.
func (ip *imagePulls) run(ctx context.Context) {
	t := time.NewTicker(min(max(ip.budget.keep/4, time.Second), 10*time.Minute))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			ip.sweep(ctx, time.Now(), 0)
		}
	}
}
