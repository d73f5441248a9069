package renter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/idlegrid/idlegrid/node/fault"
	"github.com/idlegrid/idlegrid/node/views"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/multiformats/go-multistream"
)

// A rental's image is made present on each provider it tries, before
// the lease: pulled there, or sent from this machine's engine.

// readyImage asks provider p to make ref present before the lease, within
// ctx and pullLimit, showing its pull's progress; the time it takes adds
// to t.Pull. A provider that does not speak the image protocol is left
// to its lease check. A reference pinned by digest must come back with
// that digest.
func (r *Renter) readyImage(ctx context.Context, p peer.ID, ref string, out RentOutput, t *api.RentTimings) error {
	begin := r.Clock.Now()
	defer func() { t.Pull += r.Clock.Since(begin) }()
	if local := r.localImage(ref); local != nil {
		return r.sendImage(ctx, p, local, out)
	}
	got, err := r.Net.ReadyImage(ctx, p, ref, pullLimit, func(pr *pb.ImageProgress) {
		out.status("%s: pulling %s: %s of %s, %d of %d layers", Short(p), ref, views.FormatBytes(pr.DoneBytes), views.FormatBytes(pr.TotalBytes), pr.LayersDone, pr.Layers)
	})
	var unsupported multistream.ErrNotSupported[protocol.ID]
	if errors.As(err, &unsupported) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, digest, ok := strings.Cut(ref, "@"); ok && !slices.ContainsFunc(got.RepoDigests, func(d string) bool { return strings.HasSuffix(d, "@"+digest) }) {
		return fmt.Errorf("the provider's %s does not carry digest %s (it has %v)", ref, digest, got.RepoDigests)
	}
	if got.Pulled {
		out.say("%s: pulled %s (%s unpacked) in %s; the pull is not billed", Short(p), ref, views.FormatBytes(got.SizeBytes), (time.Duration(got.PullMs) * time.Millisecond).Round(time.Millisecond))
	}
	return nil
}

// saveLocal saves an image of this machine's engine, to send to the
// providers a rental tries; dropLocal removes the save.
func (r *Renter) saveLocal(ctx context.Context, ref string, out RentOutput) (*executor.LocalImage, error) {
	d, err := executor.NewDocker()
	if err != nil {
		return nil, err
	}
	defer d.Close()
	out.status("saving %s from this machine's Docker engine", ref)
	local, err := d.SaveImage(ctx, ref, "")
	if err != nil {
		return nil, fault.Invalidf("image_from_docker %s: %w", ref, err)
	}
	out.say("saved %s (%s, %d layers) from this machine's engine: providers get the layers they lack", ref, views.FormatBytes(uint64(max(local.Size, 0))), len(local.DiffIDs))
	r.localMu.Lock()
	defer r.localMu.Unlock()
	if r.locals == nil {
		r.locals = map[string]*executor.LocalImage{}
	}
	r.locals[local.ID] = local
	return local, nil
}

func (r *Renter) dropLocal(local *executor.LocalImage) {
	r.localMu.Lock()
	defer r.localMu.Unlock()
	if r.locals[local.ID] == local {
		delete(r.locals, local.ID)
	}
	local.Close()
}

// localImage is the saved local image of ID id, or nil.
func (r *Renter) localImage(id string) *executor.LocalImage {
	r.localMu.Lock()
	defer r.localMu.Unlock()
	return r.locals[id]
}

// sendImage sends provider p the local image, without the layers it has.
func (r *Renter) sendImage(ctx context.Context, p peer.ID, local *executor.LocalImage, out RentOutput) error {
	var sent int64
	var from int
	up := &pb.ImageUpload{DiffIds: local.DiffIDs, Tags: local.Tags, SizeBytes: uint64(max(local.Size, 0))}
	got, err := r.Net.SendImage(ctx, p, local.ID, up, pullLimit, func(w io.Writer, have int) error {
		from = have
		out.status("%s: sending the image: %d of %d layers (it has the others)", Short(p), len(local.DiffIDs)-have, len(local.DiffIDs))
		n, err := local.WriteTar(w, have)
		sent = n
		return err
	})
	if err != nil {
		return err
	}
	if got.Id != local.ID {
		return fmt.Errorf("the provider readied image %s, not %s", got.Id, local.ID)
	}
	if got.Pulled {
		out.say("%s: sent the image (%s: %d of %d layers) in %s; not billed", Short(p), views.FormatBytes(uint64(sent)), len(local.DiffIDs)-from, len(local.DiffIDs), (time.Duration(got.PullMs) * time.Millisecond).Round(time.Millisecond))
	}
	return nil
}
