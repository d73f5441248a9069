package api

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func TestLoopbackHostAndSameOrigin(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1:5080": true, "127.0.0.2:5080": true, "[::1]:5080": true, "localhost:5080": true, "LOCALHOST": true,
		"0.0.0.0:5080": false, "192.168.1.5:5080": false, "evil.example:5080": false, "127.0.0.1.evil.example:5080": false,
		"localhost.evil.example": false, "": false,
	} {
		if got := loopbackHost(host); got != want {
			t.Errorf("loopbackHost(%q) = %v", host, got)
		}
	}
	for _, c := range []struct {
		v, host string
		want    bool
	}{
		{"http://127.0.0.1:5080", "127.0.0.1:5080", true},
		{"http://127.0.0.1:5080/v1/status?x", "127.0.0.1:5080", true},
		{"http://127.0.0.1:5081", "127.0.0.1:5080", false},
		{"https://127.0.0.1:5080", "127.0.0.1:5080", false},
		{"null", "127.0.0.1:5080", false},
		{"http://evil.example", "127.0.0.1:5080", false},
	} {
		if got := sameOrigin(c.v, c.host); got != c.want {
			t.Errorf("sameOrigin(%q, %q) = %v", c.v, c.host, got)
		}
	}
}

// Whatever a page makes a browser send: the guard answers only a request
// to a loopback Host, with no foreign Origin or Referer, and a POST only
// as application/json with the token itself.
func FuzzGuard(f *testing.F) {
	const token = "s3cret-token"
	f.Add("POST", "127.0.0.1:5080", "", "", "application/json", "Bearer "+token)
	f.Add("POST", "127.0.0.1:5080", "http://evil.example", "", "text/plain", "")
	f.Add("GET", "evil.example:5080", "", "http://127.0.0.1:5080/", "", "")
	f.Add("GET", "[::1]:5080", "null", "", "", "Bearer x")
	f.Fuzz(func(t *testing.T, method, host, origin, referer, ctype, auth string) {
		r := &http.Request{Method: method, Host: host, URL: &url.URL{Path: "/v1/bids"}, Header: http.Header{}}
		for k, v := range map[string]string{"Origin": origin, "Referer": referer, "Content-Type": ctype, TokenHeader: auth} {
			if v != "" {
				r.Header.Set(k, v)
			}
		}
		status, why := Guard{Token: token}.check(r)
		if status != 0 {
			if why == "" {
				t.Fatalf("refused with %d and no reason", status)
			}
			return
		}
		if !loopbackHost(host) {
			t.Fatalf("answered Host %q", host)
		}
		for _, v := range []string{origin, referer} {
			if v != "" && !sameOrigin(v, host) {
				t.Fatalf("answered Origin/Referer %q for Host %q", v, host)
			}
		}
		if method != http.MethodGet && method != http.MethodHead && auth != "Bearer "+token {
			t.Fatalf("answered a %s with Authorization %q", method, auth)
		}
		if method == http.MethodPost && !strings.HasPrefix(strings.ToLower(strings.TrimSpace(ctype)), "application/json") {
			t.Fatalf("answered a POST of Content-Type %q", ctype)
		}
	})
}
