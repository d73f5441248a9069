// Package ui is the node's dashboard: a page of plain HTML, CSS and
// JavaScript, with no build step, embedded in the binary and served by
// the local API under /ui/. It reads the API as any client does, and
// takes pushed updates from its event streams (server-sent events).
//
// Its one library, uPlot 1.6.32 (MIT, vendor/uplot/LICENSE), draws the
// charts; it is vendored as published on npm (dist/uPlot.iife.min.js and
// dist/uPlot.min.css), so the page needs no network but the node's.
//
// ui imports only the standard library.
package ui

import (
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed assets
var assets embed.FS

// Assets are the dashboard's files, index.html at the root.
func Assets() fs.FS {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree always has assets/
	}
	return sub
}

// Handler serves Assets; mount it with the prefix stripped. Each file
// carries an ETag of its content, so a browser that asks again (the API
// serves the dashboard no-cache) is answered 304 Not Modified and keeps
// what it holds, its compiled scripts included.
func Handler() http.Handler {
	assets := Assets()
	files, tags := http.FileServerFS(assets), etags(assets)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
		if name == "" {
			name = "index.html"
		}
		if tag, ok := tags[name]; ok {
			w.Header().Set("ETag", tag)
		}
		files.ServeHTTP(w, r)
	})
}

// etags are the strong entity tags of the files of fsys, by path.
func etags(fsys fs.FS) map[string]string {
	tags := map[string]string{}
	fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		tags[p] = `"` + base64.RawURLEncoding.EncodeToString(sum[:16]) + `"`
		return nil
	})
	return tags
}
