package executor

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A fetch whose writes pass its bound on the disk is ended while it
// writes, not once it is done.
func TestAFetchThatFillsTheDiskPastItsBoundIsEnded(t *testing.T) {
	dir := t.TempDir()
	w := &diskWatch{slack: 1}
	ended := make(chan struct{})
	stop := w.watch(dir, 4<<20, func() { close(ended) })
	f, err := os.Create(filepath.Join(dir, "bomb"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i) | 1 // not sparse
	}
	deadline := time.After(30 * time.Second)
	written := 0
	for done := false; !done; {
		select {
		case <-ended:
			done = true
		case <-deadline:
			t.Fatalf("wrote %d MiB past a 4 MiB bound and the fetch was not ended", written)
		default:
			if written == 256 { // all written: the watch's next look ends it
				select {
				case <-ended:
				case <-deadline:
					t.Fatalf("wrote %d MiB past a 4 MiB bound and the fetch was not ended", written)
				}
				done = true
				continue
			}
			if _, err := f.Write(chunk); err != nil {
				t.Fatal(err)
			}
			f.Sync()
			written++
		}
	}
	if !stop() {
		t.Error("the watch ended the fetch, and stop says it did not")
	}
	if w.bound != 0 {
		t.Errorf("the watch holds %d bytes of bound after its fetch", w.bound)
	}
	if stop := w.watch("", 4<<20, func() { t.Error("a watch of no disk ended its fetch") }); stop() {
		t.Error("a watch of no disk says it ended its fetch")
	}
}
