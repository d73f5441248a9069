package lease

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/idlegrid/idlegrid/node/executor"
	"github.com/libp2p/go-libp2p/core/peer"
)

// FetchedImagesFile, in the repository, lists the images fetched for
// renters and not yet removed, so that a restarted provider still
// removes them on the clock.
const FetchedImagesFile = "fetched-images.json"

// maxImagesFile bounds the file read back: maxHeldImages entries of a
// few hundred bytes.
const maxImagesFile = 8 << 20

// fetchedImage is one entry of FetchedImagesFile.
type fetchedImage struct {
	ID      string   `json:"id"`
	Names   []string `json:"names,omitempty"`
	Bytes   int64    `json:"bytes"`
	Renter  string   `json:"renter"`
	Touched int64    `json:"touched_unix_ms"`
}

// snapshot lists the images held.
func (b *imageBudget) snapshot() []fetchedImage {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]fetchedImage, 0, len(b.held))
	for _, h := range b.held {
		out = append(out, fetchedImage{ID: h.img.ID, Names: h.img.Names, Bytes: h.img.SizeBytes, Renter: h.renter.String(), Touched: h.touched.UnixMilli()})
	}
	return out
}

// restore takes back the images a previous run held; an entry that does
// not read as one is left out (the image then stays, as any the provider
// had).
func (b *imageBudget) restore(list []fetchedImage) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, f := range list {
		renter, err := peer.Decode(f.Renter)
		if err != nil || !imageIDPattern.MatchString(f.ID) || f.Bytes < 0 || len(f.Names) > 64 || len(b.held) >= maxHeldImages {
			continue
		}
		if _, ok := b.held[f.ID]; ok {
			continue
		}
		img := executor.Image{ID: f.ID, SizeBytes: f.Bytes, Names: f.Names, Pulled: true}
		b.held[f.ID] = &heldImage{img: img, renter: renter, touched: time.UnixMilli(f.Touched)}
		b.used += f.Bytes
		b.renters[renter] += f.Bytes
	}
}

// keepFile sets the file the images held are written to, and takes back
// what it lists.
func (ip *imagePulls) keepFile(path string) error {
	ip.file = path
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	var list []fetchedImage
	if err := json.NewDecoder(io.LimitReader(f, maxImagesFile)).Decode(&list); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	ip.budget.restore(list)
	return nil
}

// save writes the images held to the file, if there is one.
func (ip *imagePulls) save() {
	if ip.file == "" {
		return
	}
	ip.fileMu.Lock()
	defer ip.fileMu.Unlock()
	body, err := json.Marshal(ip.budget.snapshot())
	if err == nil {
		tmp := ip.file + ".tmp"
		if err = os.WriteFile(tmp, body, 0o600); err == nil {
			err = os.Rename(tmp, ip.file)
		}
	}
	if err != nil {
		ip.log.Warn("the list of images fetched for renters not written", "file", filepath.Base(ip.file), "err", err)
	}
}
