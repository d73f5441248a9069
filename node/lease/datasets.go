package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Datasets stages the datasets leases mount (node/data, through node).
type Datasets interface {
	// Check refuses datasets this provider cannot stage: more bytes than
	// its cache holds.
	Check(dss []*pb.DatasetMount) error
	// Stage makes d kept here, fetched from the renter and the swarm's
	// holders, in use until release, and writes it at dir, read-only;
	// progress (nil: none) is told how the fetch goes.
	Stage(ctx context.Context, d *pb.DatasetMount, renter peer.ID, dir string, progress func(Staged)) (release func(), err error)
	// Open is the tar of the encrypted dataset d (one with a sealed key),
	// decrypted as it is read: written only into the job's mount.
	Open(ctx context.Context, d *pb.DatasetMount) (io.ReadCloser, error)
}

// Staged is how far a dataset's staging has come: the bytes fetched
// (none of what was kept already) and from how many holders.
type Staged struct {
	Bytes   int64
	Holders int
}

// checkDatasets refuses a lease with datasets where the provider keeps
// none, or one whose datasets it cannot hold.
func (lo *Owner) checkDatasets(l *pb.Lease) error {
	dss := l.GetWorkload().GetDatasets()
	if len(dss) == 0 {
		return nil
	}
	if lo.datasets == nil || lo.mountDir == "" {
		return market.Reject(pb.RejectCode_REJECT_BAD_REQUEST, "this provider stages no datasets")
	}
	if err := lo.datasets.Check(dss); err != nil {
		return market.Reject(pb.RejectCode_REJECT_BAD_REQUEST, "workload.datasets: %v", err)
	}
	if _, fills := lo.Exec.(executor.Sessions); !fills {
		for i, d := range dss {
			if len(d.SealedKey) > 0 {
				return market.Reject(pb.RejectCode_REJECT_BAD_REQUEST, "workload.datasets[%d]: encrypted, and this provider's %s executor has no container to decrypt it into", i, lo.Exec.Name())
			}
		}
	}
	return nil
}

// mountsOf is where lease's datasets are written for its job: one folder
// each under the provider's mount folder, gone when the lease ends; an
// encrypted one only into the job's own memory, decrypted as the job
// starts.
func (lo *Owner) mountsOf(l *pb.Lease) []executor.Mount {
	var ms []executor.Mount
	for i, d := range l.GetWorkload().GetDatasets() {
		if len(d.SealedKey) > 0 {
			ms = append(ms, executor.Mount{Target: d.Path, Bytes: int64(d.Bytes), Fill: func() (io.ReadCloser, error) {
				if lo.datasets == nil {
					return nil, errors.New("this provider stages no datasets")
				}
				return lo.datasets.Open(lo.ctx, d)
			}})
			continue
		}
		ms = append(ms, executor.Mount{Source: filepath.Join(lo.mountDir, l.Id, strconv.Itoa(i)), Target: d.Path})
	}
	return ms
}

// stageDatasets stages the lease's datasets before its job starts,
// telling the renter how it goes; the term runs meanwhile, and a stop or
// the term's end ends the staging and the lease. The datasets stay in use
// (never evicted) until the lease ends. False when the lease ended or
// the owner stops.
func (r *run) stageDatasets() bool {
	lo, l := r.lo, r.ll.lease
	if len(l.GetWorkload().GetDatasets()) == 0 {
		return true
	}
	ctx, cancel := context.WithCancel(lo.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.stageAll(ctx) }()
	end := lo.clock.NewTimer(lo.clock.Until(time.UnixMilli(r.ll.rec.EndMs)))
	defer end.Stop()
	select {
	case err := <-done:
		if err != nil {
			r.finish(pb.Outcome_OUTCOME_FAILED, "datasets not staged: "+err.Error(), -1)
			return false
		}
		return true
	case s := <-r.ll.stop:
		cancel()
		<-done
		r.finish(s.outcome, s.note+" while its datasets were staged", -1)
	case <-end.C():
		cancel()
		<-done
		r.finish(pb.Outcome_OUTCOME_FAILED, "the lease's term ended while its datasets were staged", -1)
	case <-lo.ctx.Done():
		<-done
	}
	return false
}

// stageAll stages each dataset in turn.
func (r *run) stageAll(ctx context.Context) error {
	lo, l := r.lo, r.ll.lease
	if lo.datasets == nil || lo.mountDir == "" {
		return errors.New("this provider stages no datasets")
	}
	mounts := lo.mountsOf(l)
	for i, d := range l.GetWorkload().GetDatasets() {
		start := lo.clock.Now()
		r.ll.Feed.Send(&pb.JobFrame{Kind: &pb.JobFrame_Notice{Notice: fmt.Sprintf("staging dataset %s (%d bytes) at %s", d.Cid, d.Bytes, d.Path)}})
		var next int64 = 1 << 30 // a notice each GiB
		var last Staged
		release, err := lo.datasets.Stage(ctx, d, peer.ID(l.Renter), mounts[i].Source, func(s Staged) {
			last = s
			if s.Bytes >= next {
				next += 1 << 30
				r.ll.Feed.Send(&pb.JobFrame{Kind: &pb.JobFrame_Notice{Notice: fmt.Sprintf("staging dataset %s: %d of %d bytes from %d holders", d.Cid, s.Bytes, d.Bytes, s.Holders)}})
			}
		})
		if err != nil {
			return fmt.Errorf("workload.datasets[%d] %s: %w", i, d.Cid, err)
		}
		r.releases = append(r.releases, release)
		how := "kept here already"
		if last.Bytes > 0 {
			how = fmt.Sprintf("%d bytes fetched from %d holders", last.Bytes, last.Holders)
		}
		r.ll.Feed.Send(&pb.JobFrame{Kind: &pb.JobFrame_Notice{Notice: fmt.Sprintf("dataset %s staged at %s in %s: %s", d.Cid, d.Path, lo.clock.Since(start).Round(time.Millisecond), how)}})
	}
	return nil
}

// unstage lets the lease's datasets go and removes their copies.
func (r *run) unstage() {
	for _, release := range r.releases {
		release()
	}
	r.releases = nil
	if r.lo.mountDir != "" && len(r.ll.lease.GetWorkload().GetDatasets()) > 0 {
		if err := os.RemoveAll(filepath.Join(r.lo.mountDir, r.ll.lease.Id)); err != nil {
			r.lo.log.Warn("removing a lease's datasets", "lease", r.ll.lease.Id, "err", err)
		}
	}
}

// sweepMounts removes the datasets' copies of leases that are not live.
func (lo *Owner) sweepMounts(st *State) {
	if lo.mountDir == "" {
		return
	}
	es, err := os.ReadDir(lo.mountDir)
	if err != nil {
		return
	}
	for _, e := range es {
		if _, live := st.Live[e.Name()]; !live {
			if err := os.RemoveAll(filepath.Join(lo.mountDir, e.Name())); err != nil {
				lo.log.Warn("removing an ended lease's datasets", "lease", e.Name(), "err", err)
			}
		}
	}
}
