package executor

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

const testID = "sha256:" + "ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12"

type entry struct {
	name, link string
	kind       byte
	body       string
}

func saveOf(t testing.TB, entries ...entry) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.kind, Linkname: e.link, Mode: 0o644, Size: int64(len(e.body))}
		if e.kind != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.kind == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return b.Bytes()
}

func manifestOf(config string, tags ...string) string {
	b, _ := json.Marshal([]map[string]any{{"Config": config, "RepoTags": tags, "Layers": []string{"l/layer.tar"}}})
	return string(b)
}

// A save's names never reach the engine, and a save that could put
// another manifest in place of the one checked is refused.
func TestASaveLoadsWithoutTheNamesItClaims(t *testing.T) {
	hex := strings.TrimPrefix(testID, "sha256:")
	good := []entry{
		{name: "l/", kind: tar.TypeDir},
		{name: "l/layer.tar", kind: tar.TypeReg, body: "layer"},
		{name: "l2/layer.tar", kind: tar.TypeSymlink, link: "../l/layer.tar"},
		{name: hex + ".json", kind: tar.TypeReg, body: "{}"},
		{name: "repositories", kind: tar.TypeReg, body: `{"victimlib/pytorch":{"2.4":"` + hex + `"}}`},
		{name: "index.json", kind: tar.TypeReg, body: `{}`},
		{name: "manifest.json", kind: tar.TypeReg, body: manifestOf(hex+".json", "victimlib/pytorch:2.4")},
	}
	var out bytes.Buffer
	if err := unnamedSave(&out, bytes.NewReader(saveOf(t, good...)), testID); err != nil {
		t.Fatalf("a plain save: %v", err)
	}
	tr := tar.NewReader(&out)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Name == "manifest.json" {
			body, _ := io.ReadAll(tr)
			if strings.Contains(string(body), "victimlib") || strings.Contains(string(body), "RepoTags") {
				t.Errorf("manifest.json as loaded: %s; want no RepoTags", body)
			}
		}
	}
	if got := strings.Join(names, " "); got != "l/ l/layer.tar l2/layer.tar "+hex+".json manifest.json" {
		t.Errorf("entries loaded: %s", got)
	}
	m := entry{name: "manifest.json", kind: tar.TypeReg, body: manifestOf(hex + ".json")}
	for _, c := range []struct {
		why     string
		entries []entry
	}{
		{"no manifest", []entry{{name: hex + ".json", kind: tar.TypeReg, body: "{}"}}},
		{"two manifests", []entry{m, {name: "./manifest.json", kind: tar.TypeReg, body: manifestOf(hex + ".json")}}},
		{"a manifest that is a link", []entry{{name: "manifest.json", kind: tar.TypeSymlink, link: "x.json"}}},
		{"another image's config", []entry{{name: "manifest.json", kind: tar.TypeReg, body: manifestOf(strings.Repeat("cd", 32) + ".json")}}},
		{"two images", []entry{{name: "manifest.json", kind: tar.TypeReg, body: `[{"Config":"` + hex + `.json"},{"Config":"` + hex + `.json"}]`}}},
		{"a path through a link", []entry{{name: "x", kind: tar.TypeSymlink, link: "l"}, {name: "x/manifest.json", kind: tar.TypeReg, body: "[]"}, m}},
		{"a link out of the save", []entry{{name: "x", kind: tar.TypeSymlink, link: "../../etc"}, m}},
		{"an absolute link", []entry{{name: "x", kind: tar.TypeSymlink, link: "/etc/passwd"}, m}},
		{"a hard link", []entry{{name: "x", kind: tar.TypeLink, link: "l/layer.tar"}, m}},
		{"a device", []entry{{name: "x", kind: tar.TypeChar}, m}},
		{"a path out of the save", []entry{{name: "../x", kind: tar.TypeReg, body: "x"}, m}},
	} {
		if err := unnamedSave(io.Discard, bytes.NewReader(saveOf(t, c.entries...)), testID); err == nil {
			t.Errorf("%s: loaded, want an error", c.why)
		}
	}
	big := entry{name: "manifest.json", kind: tar.TypeReg, body: strings.Repeat(" ", maxSaveManifest+1)}
	if err := unnamedSave(io.Discard, bytes.NewReader(saveOf(t, big)), testID); err == nil {
		t.Error("a manifest over the bound: loaded, want an error")
	}
}

// Whatever a stranger sends, the filter ends with an error or a save
// whose one manifest names no tag and the image asked for.
func FuzzUnnamedSave(f *testing.F) {
	hex := strings.TrimPrefix(testID, "sha256:")
	f.Add(saveOf(f, entry{name: hex + ".json", kind: tar.TypeReg, body: "{}"}, entry{name: "manifest.json", kind: tar.TypeReg, body: manifestOf(hex+".json", "a:b")}))
	f.Add(saveOf(f, entry{name: "x", kind: tar.TypeSymlink, link: "."}, entry{name: "manifest.json", kind: tar.TypeReg, body: manifestOf(hex + ".json")}))
	f.Fuzz(func(t *testing.T, save []byte) {
		var out bytes.Buffer
		if err := unnamedSave(&out, bytes.NewReader(save), testID); err != nil {
			return
		}
		tr := tar.NewReader(&out)
		manifests := 0
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("the filter wrote a broken tar: %v", err)
			}
			if saveNames[strings.Trim(h.Name, "/")] {
				t.Fatalf("the filter passed %q", h.Name)
			}
			if h.Name == "manifest.json" {
				manifests++
				var m []map[string]json.RawMessage
				body, _ := io.ReadAll(tr)
				if err := json.Unmarshal(body, &m); err != nil || len(m) != 1 || m[0]["RepoTags"] != nil {
					t.Fatalf("the filter passed manifest %s", body)
				}
			}
		}
		if manifests != 1 {
			t.Fatalf("%d manifests passed", manifests)
		}
	})
}
