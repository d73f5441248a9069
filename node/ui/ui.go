// Package ui is the node's dashboard: a page of plain HTML, CSS and
// JavaScript, with no build step, embedded in the binary and served by
// the local API under /ui/. It reads the API as any client does, and
// takes pushed updates from its event streams (server-sent events).
//
// Its one library, uPlot 1.6.32 (MIT, vendor/uplot/LICENSE), draws the
// charts; it is vendored as published on npm (dist/uPlot.iife.min.js and
// dist/uPlot.min.css), so the page needs no network but the node's.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
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

// Handler serves Assets; mount it with the prefix stripped.
func Handler() http.Handler { return http.FileServerFS(Assets()) }
