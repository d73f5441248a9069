package executor

import (
	"context"
	"fmt"
	"io"
	"math"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
)

// dockerJob is one container, its output stream and its exit watcher.
type dockerJob struct {
	outcome // Wait
	d       *Docker
	id      string

	// stopping serialises Stop: whoever holds its one token stops the
	// container; another Stop waits for it, or for its own ctx.
	stopping chan struct{}
	removed  atomic.Bool
}

// attach opens the container's output: all it writes from now on. Start
// attaches before starting the container, so nothing is missed; the
// engine ends the stream once the container stopped and all was sent.
// (Following the logs instead loses the tail of a container that exits
// at once: Docker 20.10's json-file follower stops before the end.)
func (d *Docker) attach(ctx context.Context, id string) (*types.HijackedResponse, error) {
	resp, err := d.cli.ContainerAttach(ctx, id, container.AttachOptions{Stream: true, Stdout: true, Stderr: true})
	if err != nil {
		return nil, d.engineErr("attach", err)
	}
	return &resp, nil
}

// copier moves a container's output to a job's Output while the job's
// watcher waits for the container to stop: run copies until the source
// ends; cut ends a copy still running drainTimeout after the stop; then
// tail (nil: none) adds what the source left out.
type copier struct {
	run  func() error
	cut  func()
	tail func() error
}

// streamed copies an attached stream: all the container writes from the
// attach on, ended by the engine once the container stopped.
func streamed(d *Docker, stream *types.HijackedResponse, out Output) copier {
	stop := context.AfterFunc(d.life, stream.Close)
	return copier{
		run: func() error {
			defer stop()
			defer stream.Close()
			_, err := stdcopy.StdCopy(orDiscard(out.Stdout), orDiscard(out.Stderr), stream.Reader)
			return err
		},
		cut: stream.Close,
	}
}

// watch registers a wait for the container to stop, which the engine
// answers at once if it already has, and returns the job whose goroutine
// copies the output with c and records the exit. Both live as long as
// the executor.
func (d *Docker) watch(id, lease string, c copier) *dockerJob {
	waitC, errC := d.cli.ContainerWait(d.life, id, container.WaitConditionNotRunning)
	j := &dockerJob{outcome: newOutcome(lease), d: d, id: id, stopping: make(chan struct{}, 1)}
	go j.watch(c, waitC, errC)
	return j
}

// watch copies the output and records the exit.
func (j *dockerJob) watch(c copier, waitC <-chan container.WaitResponse, errC <-chan error) {
	defer close(j.done)
	copied := make(chan error, 1)
	if c.run == nil {
		copied <- nil
	} else {
		go func() { copied <- c.run() }()
	}
	select {
	case res := <-waitC:
		j.code = int(res.StatusCode)
		if res.Error != nil && res.Error.Message != "" {
			j.err = fmt.Errorf("container %s: wait: %s", shortID(j.id), res.Error.Message)
		}
	case err := <-errC:
		j.code, j.err = -1, fmt.Errorf("container %s: %w", shortID(j.id), j.d.engineErr("wait", err))
	}
	timer := time.NewTimer(drainTimeout)
	defer timer.Stop()
	var err error
	select {
	case err = <-copied:
	case <-timer.C:
		c.cut()
		<-copied
		if c.tail == nil {
			err = fmt.Errorf("output still open %v after it stopped", drainTimeout)
		}
	}
	if c.tail != nil && j.d.life.Err() == nil {
		err = c.tail()
	}
	if err != nil && j.err == nil {
		j.err = fmt.Errorf("container %s: output: %w", shortID(j.id), err)
	}
}

// ID returns the container's ID.
func (j *dockerJob) ID() string { return j.id }

// Stop asks the engine to stop the container (the image's stop signal,
// SIGTERM unless the image says otherwise, then SIGKILL after grace,
// rounded up to whole seconds), waits for its output to drain, and removes
// it with its anonymous volumes. A container already gone is not an error.
func (j *dockerJob) Stop(ctx context.Context, grace time.Duration) error {
	select {
	case j.stopping <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("lease %s: stop: %w", j.lease, ctx.Err())
	}
	defer func() { <-j.stopping }()
	if j.removed.Load() {
		return nil
	}
	secs := int(math.Ceil(grace.Seconds()))
	if secs < 0 {
		secs = 0
	}
	err := j.d.cli.ContainerStop(ctx, j.id, container.StopOptions{Timeout: &secs})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return j.d.engineErr("lease "+j.lease+": stop", err)
	}
	drain := time.NewTimer(drainTimeout)
	defer drain.Stop()
	select {
	case <-j.done:
	case <-drain.C:
	case <-ctx.Done():
		return fmt.Errorf("lease %s: stop: %w", j.lease, ctx.Err())
	}
	err = j.d.cli.ContainerRemove(ctx, j.id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return j.d.engineErr("lease "+j.lease+": remove", err)
	}
	j.removed.Store(true)
	return nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
