package ui

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// Every file carries an ETag of its content, and a browser that sends it
// back is answered 304 Not Modified, without the file.
func TestAssetsAreRevalidatedByTheirETag(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	get := func(path, tag string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if tag != "" {
			req.Header.Set("If-None-Match", tag)
		}
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		return r
	}
	tags := map[string]bool{}
	for _, path := range []string{"/", "/app.js", "/app.css", "/vendor/uplot/uPlot.iife.min.js"} {
		r := get(path, "")
		tag := r.Header.Get("ETag")
		if r.StatusCode != http.StatusOK || len(tag) < 10 || tags[tag] {
			t.Fatalf("%s: %s, ETag %q (one per file)", path, r.Status, tag)
		}
		tags[tag] = true
		if r := get(path, tag); r.StatusCode != http.StatusNotModified {
			t.Errorf("%s with its ETag: %s, want 304", path, r.Status)
		}
		if r := get(path, `"another"`); r.StatusCode != http.StatusOK {
			t.Errorf("%s with another ETag: %s, want 200", path, r.Status)
		}
	}
}
