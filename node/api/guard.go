package api

import (
	"crypto/subtle"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Guard is what a request must show before the API answers it. A web page
// the user visits can make the browser send requests to 127.0.0.1, so the
// API, like Kubo's but stricter, answers:
//   - only requests addressed to a loopback name (Host 127.0.0.1, ::1 or
//     localhost): a DNS-rebound name is refused, so a page cannot read
//     what it may not;
//   - no request whose Origin or Referer is another origin;
//   - changes (POST) only as application/json carrying the token, which
//     a page cannot send cross-origin without a preflight the API never
//     grants, and cannot know.
//
// The dashboard (/ui/) carries the token in a cookie instead: 'idlegrid
// ui' opens /ui/login?token=… once, which sets it (HttpOnly,
// SameSite=Strict, named per port, since browsers share a host's cookies
// across its ports). A change sent with the cookie alone must also carry
// this origin's Origin header, which browsers send with every POST: a
// page of another origin cannot, and one of the same site (another port)
// shows its own.
type Guard struct {
	// Token is the secret the CLI reads from the repository's token file
	// and sends as "Authorization: Bearer <token>".
	Token string
	// OpenMetrics lets GET /metrics through without the token, for a
	// Prometheus scraper on the machine.
	OpenMetrics bool
}

// TokenHeader is the header a client sends the token in.
const TokenHeader = "Authorization"

// wrap applies the guard to next.
func (g Guard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if status, why := g.check(r); status != 0 {
			if status == http.StatusUnauthorized && (r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/")) {
				signInPage(w)
				return
			}
			writeJSON(w, status, Error{Error: why})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// check returns the status and reason that refuse r, or 0.
func (g Guard) check(r *http.Request) (int, string) {
	if !loopbackHost(r.Host) {
		return http.StatusForbidden, "Host " + quote(r.Host) + ": this API answers to 127.0.0.1, [::1] and localhost only"
	}
	for _, h := range []string{"Origin", "Referer"} {
		if v := r.Header.Get(h); v != "" && !sameOrigin(v, r.Host) {
			return http.StatusForbidden, h + " " + quote(v) + ": cross-origin requests are refused"
		}
	}
	change := r.Method != http.MethodGet && r.Method != http.MethodHead
	needsToken := change || r.URL.Path == "/metrics" && !g.OpenMetrics || private(r.URL.Path)
	if r.Method == http.MethodPost {
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			return http.StatusUnsupportedMediaType, "Content-Type " + quote(r.Header.Get("Content-Type")) + ": send application/json"
		}
	}
	if !needsToken || r.URL.Path == loginPath && !change {
		return 0, "" // the login checks the token it carries itself
	}
	switch g.tokenIn(r) {
	case byHeader:
	case byCookie:
		if change && r.Header.Get("Origin") == "" {
			return http.StatusForbidden, "a change sent with the dashboard's cookie must carry this origin's Origin header"
		}
	default:
		return http.StatusUnauthorized, "no valid API token: send \"Authorization: Bearer <token>\" with the token in the repository's " + TokenFile + " file, or open the dashboard with 'idlegrid ui'"
	}
	return 0, ""
}

// private reports whether a GET of path needs the token: the dashboard,
// and the streams of events and of a job's output.
func private(path string) bool {
	return strings.HasPrefix(path, "/ui/") || path == "/ui" || path == eventsPath || strings.HasPrefix(path, "/v1/leases/") && strings.HasSuffix(path, "/output") || path == "/v1/rentals"
}

// proof is how a request showed the token.
type proof int

const (
	noToken proof = iota
	byHeader
	byCookie
)

// TokenFile names the token's file in a repository.
const TokenFile = "api.token"

func (g Guard) tokenIn(r *http.Request) proof {
	if got, ok := strings.CutPrefix(r.Header.Get(TokenHeader), "Bearer "); ok && g.valid(got) {
		return byHeader
	}
	if c, err := r.Cookie(CookieName(r.Host)); err == nil && g.valid(c.Value) {
		return byCookie
	}
	return noToken
}

// valid reports whether got is the token, in constant time.
func (g Guard) valid(got string) bool {
	return g.Token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(g.Token)) == 1
}

// CookieName is the dashboard's cookie for an API at host: one per port.
func CookieName(host string) string {
	port := "80"
	if _, p, err := net.SplitHostPort(host); err == nil {
		port = p
	}
	return "idlegrid_token_" + port
}

// loopbackHost reports whether a Host header names this machine's
// loopback: an IP in 127.0.0.0/8 or ::1, or localhost, with any port.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// sameOrigin reports whether an Origin or Referer is this API's own
// origin: http, on the host and port the request was sent to.
func sameOrigin(v, host string) bool {
	u, err := url.Parse(v)
	return err == nil && u.Scheme == "http" && strings.EqualFold(u.Host, host)
}

func quote(s string) string {
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return `"` + s + `"`
}
