package executor

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// A save a renter sends is content, not names: the engine loads the
// image it holds, addressed by its ID, and none of the names the save
// claims. saveNames are the files through which a save names images: the
// tags of manifest.json, the legacy repositories file and an OCI
// layout's index, whose annotations name images too.
var saveNames = map[string]bool{"repositories": true, "index.json": true, "oci-layout": true}

// unnamedSave copies the save r to w as the engine will load it: every
// name it claims left out (manifest.json without RepoTags, no
// repositories, index.json or oci-layout), and its one image checked to
// be id by its config's name before the engine has it all. An entry that
// is not a directory, a regular file or a link within the save, or one
// whose path passes through a link, is refused: the engine unpacks the
// save before it reads manifest.json, and a link could put another
// manifest in its place.
func unnamedSave(w io.Writer, r io.Reader, id string) error {
	tr, tw := tar.NewReader(r), tar.NewWriter(w)
	links := map[string]bool{}
	manifests := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("the image sent: %w", err)
		}
		name := path.Clean(strings.TrimLeft(h.Name, "/"))
		if name == "." || name == ".." || strings.HasPrefix(name, "../") {
			if h.Typeflag == tar.TypeDir && name == "." {
				continue
			}
			return fmt.Errorf("the image sent: entry %q: want a path within the save", h.Name)
		}
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if links[dir] {
				return fmt.Errorf("the image sent: entry %q passes through the link %q", h.Name, dir)
			}
		}
		switch h.Typeflag {
		case tar.TypeDir, tar.TypeReg:
		case tar.TypeSymlink:
			if t := path.Join(path.Dir(name), h.Linkname); path.IsAbs(h.Linkname) || t == "." || t == ".." || strings.HasPrefix(t, "../") {
				return fmt.Errorf("the image sent: link %q to %q: want a file within the save", h.Name, h.Linkname)
			}
			links[name] = true
		default:
			return fmt.Errorf("the image sent: entry %q of type %q: want directories, files and links", h.Name, h.Typeflag)
		}
		if saveNames[name] {
			continue // names an image: left out
		}
		if name != "manifest.json" {
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if _, err := io.Copy(tw, tr); err != nil {
				return fmt.Errorf("the image sent: %w", err)
			}
			continue
		}
		if manifests++; manifests > 1 || h.Typeflag != tar.TypeReg {
			return errors.New("the image sent: manifest.json: want one regular file")
		}
		body, err := unnamedManifest(tr, id)
		if err != nil {
			return fmt.Errorf("the image sent: manifest.json: %w", err)
		}
		mh := &tar.Header{Name: "manifest.json", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body)), ModTime: h.ModTime}
		if err := tw.WriteHeader(mh); err != nil {
			return err
		}
		if _, err := tw.Write(body); err != nil {
			return err
		}
	}
	if manifests == 0 {
		return errors.New("the image sent has no manifest.json")
	}
	return tw.Close()
}

// unnamedManifest reads a save's manifest.json and returns it without
// its RepoTags, checking it holds one image whose config is id.
func unnamedManifest(r io.Reader, id string) ([]byte, error) {
	raw, err := io.ReadAll(io.LimitReader(r, maxSaveManifest+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > maxSaveManifest {
		return nil, fmt.Errorf("more than %d bytes", maxSaveManifest)
	}
	var m []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	if len(m) != 1 {
		return nil, fmt.Errorf("%d images: want one", len(m))
	}
	var config string
	if err := json.Unmarshal(m[0]["Config"], &config); err != nil {
		return nil, fmt.Errorf("the manifest's Config: %w", err)
	}
	hex := strings.TrimPrefix(id, "sha256:")
	if c := path.Clean(config); c != hex+".json" && c != "blobs/sha256/"+hex {
		return nil, fmt.Errorf("the manifest's Config %q: want the image %s (%s.json or blobs/sha256/%s)", config, id, hex, hex)
	}
	delete(m[0], "RepoTags")
	var out bytes.Buffer
	if err := json.NewEncoder(&out).Encode(m); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
