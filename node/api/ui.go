package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
	"unicode/utf8"

	"github.com/idlegrid/idlegrid/node/ui"
)

// The dashboard's paths.
const (
	loginPath  = "/ui/login"
	eventsPath = "/v1/events"
)

// Bounds of the pushed streams.
const (
	// maxStreams bounds the event and output streams open at once; one
	// more is answered 429.
	maxStreams = 32
	// eventEvery is how often an event stream looks for a change to push;
	// gpuEvery how often it pushes the GPUs' readings (each one, changed
	// or not: the page charts them over time); keepAliveEvery how often an
	// idle stream sends a comment, so proxies and the browser keep it.
	eventEvery     = 500 * time.Millisecond
	gpuEvery       = 2 * time.Second
	keepAliveEvery = 15 * time.Second
	// outputEvery is how often an output stream looks for more output;
	// outputChunk bounds one event's bytes, and outputTail how much of a
	// long output a stream starts with (the rest is in 'idlegrid logs').
	outputEvery = 200 * time.Millisecond
	outputChunk = 16 << 10
	outputTail  = 1 << 20
	// writeWait bounds one write to a stream's client.
	writeWait = 10 * time.Second
)

// CookieMaxAge is how long the dashboard's sign-in lasts.
const CookieMaxAge = 7 * 24 * time.Hour

// LoginURL is the address 'idlegrid ui' opens: it carries the token once,
// and the API answers it with the cookie and a redirect to the dashboard.
func LoginURL(base, token string) string { return base + loginPath + "?token=" + token }

// mountUI adds the dashboard and its streams to mux.
func mountUI(mux *http.ServeMux, b Backend, g Guard) {
	streams := make(chan struct{}, maxStreams)
	stream := func(h func(w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			select {
			case streams <- struct{}{}:
				defer func() { <-streams }()
				h(w, r)
			default:
				writeJSON(w, http.StatusTooManyRequests, Error{Error: fmt.Sprintf("%d streams are open already: close one", maxStreams)})
			}
		}
	}
	mux.HandleFunc("GET "+loginPath, func(w http.ResponseWriter, r *http.Request) {
		if !g.valid(r.URL.Query().Get("token")) {
			w.Header().Set("Referrer-Policy", "no-referrer")
			signInPage(w)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: CookieName(r.Host), Value: g.Token, Path: "/", MaxAge: int(CookieMaxAge.Seconds()),
			HttpOnly: true, SameSite: http.SameSiteStrictMode})
		w.Header().Set("Referrer-Policy", "no-referrer")
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
	})
	assets := http.StripPrefix("/ui/", ui.Handler())
	mux.HandleFunc("GET /ui/", func(w http.ResponseWriter, r *http.Request) {
		uiHeaders(w)
		assets.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
	})
	mux.HandleFunc("GET "+eventsPath, stream(func(w http.ResponseWriter, r *http.Request) { events(w, r, b) }))
	mux.HandleFunc("GET /v1/leases/{id}/output", stream(func(w http.ResponseWriter, r *http.Request) { output(w, r, b) }))
	mux.HandleFunc("GET /v1/market", func(w http.ResponseWriter, r *http.Request) {
		q, limit, err := offerQuery(r)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, Error{Error: err.Error()})
			return
		}
		reply(w, func() (any, error) { return b.Market(r.Context(), q, limit) })
	})
	mux.HandleFunc("GET /v1/gpus", func(w http.ResponseWriter, r *http.Request) {
		reply(w, func() (any, error) { return b.GPUs(r.Context()) })
	})
	mux.HandleFunc("GET /v1/rentals", func(w http.ResponseWriter, r *http.Request) {
		reply(w, func() (any, error) { return b.Rentals(r.Context()) })
	})
	mux.HandleFunc("POST /v1/rentals", func(w http.ResponseWriter, r *http.Request) {
		var req RentRequest
		if !readJSON(w, r, &req) {
			return
		}
		v, err := b.StartRental(r.Context(), req)
		if err != nil {
			writeError(w, err, http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, http.StatusAccepted, v)
	})
}

// uiHeaders lock the dashboard's pages to their own origin: no script,
// style or connection elsewhere, no framing, no referrer.
func uiHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
}

// signInPage answers a dashboard request without the token.
func signInPage(w http.ResponseWriter) {
	uiHeaders(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusUnauthorized)
	io.WriteString(w, `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>idlegrid: sign in</title></head>
<body><h1>idlegrid</h1><p>This browser is not signed in to this node's dashboard.
Run <code>idlegrid ui</code> on this machine: it opens (or prints) the address that signs the browser in.</p></body></html>
`)
}

// sse writes one server-sent event stream.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func startSSE(w http.ResponseWriter) (*sse, error) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sse{w: w, rc: http.NewResponseController(w)}
	return s, s.write(func(io.Writer) error { return nil })
}

// write writes what w writes to the client, within writeWait, and
// flushes it.
func (s *sse) write(w func(io.Writer) error) error {
	if err := s.rc.SetWriteDeadline(time.Now().Add(writeWait)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if err := w(s.w); err != nil {
		return err
	}
	return s.rc.Flush()
}

// send writes one event of v as JSON.
func (s *sse) send(event string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.sendRaw(event, b)
}

func (s *sse) sendRaw(event string, data []byte) error {
	return s.write(func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data)
		return err
	})
}

func (s *sse) keepAlive() error {
	return s.write(func(w io.Writer) error {
		_, err := io.WriteString(w, ": keep-alive\n\n")
		return err
	})
}

// events pushes the node's status, its leases and rentals, each when it
// changed (first all of them, then only what differs from what the
// stream last sent), and a provider's GPU readings every gpuEvery.
func events(w http.ResponseWriter, r *http.Request, b Backend) {
	s, err := startSSE(w)
	if err != nil {
		return
	}
	last := map[string]string{}
	push := func(event string, v any) error {
		j, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if last[event] == string(j) {
			return nil
		}
		last[event] = string(j)
		return s.sendRaw(event, j)
	}
	tick := time.NewTicker(eventEvery)
	defer tick.Stop()
	var gpusRead, spoke time.Time
	for {
		now := time.Now()
		st, serr := b.Status(r.Context())
		st.UptimeSec = 0 // changes always; the page counts from StartedAt
		leases, lerr := b.Leases(r.Context())
		rentals, rerr := b.Rentals(r.Context())
		var err error
		for _, p := range []struct {
			event string
			v     any
			err   error
		}{{"status", st, serr}, {"rentals", rentals, rerr}, {"leases", leases, lerr}} {
			if p.err == nil {
				err = errors.Join(err, push(p.event, p.v))
			}
		}
		if st.Provider && now.Sub(gpusRead) >= gpuEvery {
			gpusRead = now
			if g, gerr := b.GPUs(r.Context()); gerr == nil {
				err = errors.Join(err, push("gpus", g))
			}
		}
		if now.Sub(spoke) >= keepAliveEvery {
			spoke = now
			err = errors.Join(err, s.keepAlive())
		}
		if err != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}

// outputEvent is one piece of a job's output: its stream and its text.
type outputEvent struct {
	Stream string `json:"stream"`
	Text   string `json:"text"`
}

// output streams a lease's job output as the renter keeps it, from its
// start (or its last outputTail bytes) as it grows, and an "end" event
// with the lease once the lease ended and all of it was sent.
func output(w http.ResponseWriter, r *http.Request, b Backend) {
	id := r.PathValue("id")
	logs, err := b.LeaseLogs(r.Context(), id)
	if err != nil {
		writeError(w, err, http.StatusInternalServerError)
		return
	}
	s, err := startSSE(w)
	if err != nil {
		return
	}
	tails := []*tail{{name: "stdout", path: logs.Stdout}, {name: "stderr", path: logs.Stderr}}
	defer func() {
		for _, t := range tails {
			t.close()
		}
	}()
	tick := time.NewTicker(outputEvery)
	defer tick.Stop()
	spoke := time.Now()
	for {
		// Read whether the lease ended before reading the files: what
		// the job wrote before its end is in them by then.
		lv, lerr := b.Lease(r.Context(), id)
		sent := false
		for _, t := range tails {
			n, err := t.drain(r.Context(), s)
			if err != nil {
				return
			}
			sent = sent || n > 0
		}
		if lerr == nil && lv.Ended {
			s.send("end", lv)
			return
		}
		if !sent && time.Since(spoke) >= keepAliveEvery {
			if s.keepAlive() != nil {
				return
			}
		}
		if sent {
			spoke = time.Now()
		}
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}

// tail follows one growing file; a file not there yet is read once it is.
type tail struct {
	name, path string
	f          *os.File
	buf        []byte
	carry      []byte // a rune's first bytes, cut off by the last read
}

// drain sends what the file gained since the last drain, in events of at
// most outputChunk bytes; a file that cannot be opened yet sends nothing.
func (t *tail) drain(ctx context.Context, s *sse) (int, error) {
	if t.f == nil {
		f, err := os.Open(t.path)
		if err != nil {
			return 0, nil
		}
		if fi, err := f.Stat(); err == nil && fi.Size() > outputTail {
			f.Seek(fi.Size()-outputTail, io.SeekStart)
			s.send("output", outputEvent{Stream: t.name, Text: fmt.Sprintf("[… %d bytes before: 'idlegrid logs' has them]\n", fi.Size()-outputTail)})
		}
		t.f, t.buf = f, make([]byte, outputChunk)
	}
	sent := 0
	for ctx.Err() == nil {
		n, err := t.f.Read(t.buf)
		if n > 0 {
			sent += n
			data := append(t.carry, t.buf[:n]...)
			whole := wholeRunes(data)
			t.carry = append([]byte(nil), data[whole:]...)
			if err := s.send("output", outputEvent{Stream: t.name, Text: string(data[:whole])}); err != nil {
				return sent, err
			}
		}
		if err != nil || n < len(t.buf) {
			return sent, nil
		}
	}
	return sent, nil
}

// wholeRunes is the length of b's prefix that ends on a whole UTF-8
// rune: b less a rune's first bytes at its end, where a read cut it.
func wholeRunes(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if utf8.FullRune(b[i:]) {
				return len(b)
			}
			return i
		}
	}
	return len(b)
}

func (t *tail) close() {
	if t.f != nil {
		t.f.Close()
	}
}
