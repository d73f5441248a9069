package executor

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A fetch whose writes pass its bound on the disk is ended while it
// writes, not once it is done: once the disk's free space has fallen past
// the bound, the watch ends the fetch within its next looks. The free
// space is the whole disk's, which other work on the machine (other
// tests' files coming and going) moves too; the test writes until it has
// seen the fall, up to 1 GiB, and then wants the end within 10 s.
func TestAFetchThatFillsTheDiskPastItsBoundIsEnded(t *testing.T) {
	const bound = 4 << 20
	dir := t.TempDir()
	w := &diskWatch{slack: 1}
	ended := make(chan struct{})
	start, err := freeBytes(dir)
	if err != nil {
		t.Fatal(err)
	}
	stop := w.watch(dir, bound, func() { close(ended) })
	f, err := os.Create(filepath.Join(dir, "bomb"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i) | 1 // not sparse
	}
	written := 0
	for done := false; !done; {
		select {
		case <-ended:
			done = true
			continue
		default:
		}
		free, err := freeBytes(dir)
		if err != nil {
			t.Fatal(err)
		}
		if start-free > bound+1 { // fallen past the bound: the watch's next looks end it
			select {
			case <-ended:
			case <-time.After(10 * time.Second):
				t.Fatalf("the disk's free space fell by %d MiB, past a bound of 4 MiB, %d MiB written, and the fetch was not ended 10 s later", (start-free)>>20, written)
			}
			done = true
			continue
		}
		if written == 1024 {
			t.Fatalf("wrote 1 GiB and the disk's free space fell by only %d MiB (other work freed space meanwhile); nothing shown", (start-free)>>20)
		}
		if _, err := f.Write(chunk); err != nil {
			t.Fatal(err)
		}
		f.Sync()
		written++
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
