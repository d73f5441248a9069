package executor

import (
	"cmp"
	"context"
	"os"
	"sync"
	"syscall"
	"time"
)

// diskWatchEvery is how often a fetch's watch reads the free space of the
// engine's disk.
const diskWatchEvery = 20 * time.Millisecond

// diskSlack is how far beyond the fetches' bounds the free space may
// fall before a fetch is ended: the disk is shared with the provider's
// other work, and the watch is for unpacking that runs away by GBs (the
// bound itself is checked exactly once the image is present).
const diskSlack = 256 << 20

// diskWatch bounds what fetches put on the engine's disk while they run:
// a registry announces layers packed, and a few MB of zeros unpack to
// GBs, which the engine writes before it says how large the image is.
// Each fetch under watch may take its bound; the free space of the disk
// under the engine's root may fall by the bounds of all the fetches
// under way together (and diskSlack), and a fetch that sees it fall by
// more is ended.
// An engine whose root is not on this machine is not watched.
type diskWatch struct {
	once sync.Once
	root string // "" when it cannot be read here

	mu    sync.Mutex
	bound int64 // the bounds of the fetches under watch, together
	slack int64 // diskSlack when zero
}

// rootDir finds the engine's root on this machine, once.
func (d *Docker) rootDir() string {
	d.disk.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		info, err := d.cli.Info(ctx)
		if err != nil || info.DockerRootDir == "" {
			return
		}
		if _, err := freeBytes(info.DockerRootDir); err == nil && sameHost(info.DockerRootDir) {
			d.disk.root = info.DockerRootDir
		}
	})
	return d.disk.root
}

// sameHost reports whether root looks like the engine's root on this
// machine: the folder exists here (an engine elsewhere names a path that
// does not, or one that is not its own).
func sameHost(root string) bool {
	st, err := os.Stat(root)
	return err == nil && st.IsDir()
}

// watch watches a fetch of at most bound bytes on the disk under root
// until the returned stop is called; once the disk's free space has
// fallen by more than the bounds of every fetch under watch, it calls
// end. stop reports whether it did.
func (w *diskWatch) watch(root string, bound int64, end func()) (stop func() bool) {
	if root == "" || bound <= 0 {
		return func() bool { return false }
	}
	start, err := freeBytes(root)
	if err != nil {
		return func() bool { return false }
	}
	w.mu.Lock()
	w.bound += bound
	w.mu.Unlock()
	done, ended := make(chan struct{}), make(chan bool, 1)
	go func() {
		t := time.NewTicker(diskWatchEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				ended <- false
				return
			case <-t.C:
			}
			free, err := freeBytes(root)
			w.mu.Lock()
			all := w.bound + cmp.Or(w.slack, diskSlack)
			w.mu.Unlock()
			if err == nil && start-free > all {
				end()
				<-done
				ended <- true
				return
			}
		}
	}()
	return func() bool {
		close(done)
		over := <-ended
		w.mu.Lock()
		if !over { // one last look: the fetch may have ended between two
			free, err := freeBytes(root)
			over = err == nil && start-free > w.bound+cmp.Or(w.slack, diskSlack)
		}
		w.bound -= bound
		w.mu.Unlock()
		return over
	}
}

// freeBytes is the space free to unprivileged writers under path.
func freeBytes(path string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
