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
	needsToken := r.Method != http.MethodGet && r.Method != http.MethodHead || r.URL.Path == "/metrics" && !g.OpenMetrics
	if r.Method == http.MethodPost {
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			return http.StatusUnsupportedMediaType, "Content-Type " + quote(r.Header.Get("Content-Type")) + ": send application/json"
		}
	}
	if needsToken && !g.tokenIn(r) {
		return http.StatusUnauthorized, "no valid API token: send \"Authorization: Bearer <token>\" with the token in the repository's " + TokenFile + " file"
	}
	return 0, ""
}

// TokenFile names the token's file in a repository.
const TokenFile = "api.token"

func (g Guard) tokenIn(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get(TokenHeader), "Bearer ")
	return ok && g.Token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(g.Token)) == 1
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
