package node

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/repo"
)

// apiToken is n's API token, as the CLI reads it.
func apiToken(t *testing.T, n *Node) string {
	t.Helper()
	token, err := n.repo.APIToken()
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// apiCall sends a request to n's API as given: with a content type, a
// token and extra headers when they are not empty.
func apiCall(t *testing.T, n *Node, method, path, contentType, body, token string, headers map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, n.APIAddr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range headers {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestAPIServesStatusPeersAndMetrics(t *testing.T) {
	t.Parallel()
	boot := startNode(t, testRepo(t, "boot", nil), Options{})
	r := testRepo(t, "a", func(c *config.Config) {
		c.Network.Bootstrap = boot.Addrs()[:1]
		c.Network.PingInterval = config.Dur(time.Second)
	})
	n := startNode(t, r, Options{ProcessMetrics: true})
	if !strings.HasPrefix(n.APIAddr(), "http://127.0.0.1:") {
		t.Fatalf("API at %s, want 127.0.0.1", n.APIAddr())
	}
	b, err := os.ReadFile(filepath.Join(r.Path, repo.APIFile))
	if err != nil || strings.TrimSpace(string(b)) != n.APIAddr() {
		t.Fatalf("api file = %q, %v", b, err)
	}
	c := api.NewClient(n.APIAddr(), apiToken(t, n))
	ctx := context.Background()

	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.PeerID != n.id.String() || st.Swarm != "public" || st.Mode != config.DHTServer || st.Version != "test" || len(st.Listen) == 0 {
		t.Errorf("status = %+v", st)
	}
	if len(st.Topics) != 3 {
		t.Errorf("status lists %d topics, want 3", len(st.Topics))
	}

	waitFor(t, 10*time.Second, "ping measured the bootstrap peer's RTT", func() bool {
		peers, err := c.Peers(ctx)
		return err == nil && len(peers) == 1 && peers[0].RTTMillis > 0
	})
	peers, _ := c.Peers(ctx)
	p := peers[0]
	if p.ID != boot.id.String() || len(p.Addrs) == 0 || p.Agent != "idlegrid/test" || len(p.Protocols) == 0 || p.ConnectedSince.IsZero() {
		t.Errorf("peer = %+v", p)
	}

	if v, err := c.Reputation(ctx, boot.id.String()); err != nil || v.Basis != "0.60: no history" || v.Peer != boot.id.String() {
		t.Errorf("reputation of the bootstrap peer: %+v, %v", v, err)
	}
	if _, err := c.Reputation(ctx, "nope"); err == nil || !strings.Contains(err.Error(), "not a peer ID") {
		t.Errorf("reputation of a malformed peer ID: %v", err)
	}

	resp, err := http.Get(n.APIAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"idlegrid_connected_peers 1", "idlegrid_info{", "idlegrid_gossip_mesh_peers{", "libp2p_", "go_goroutines", "process_resident_memory_bytes", `idlegrid_reputation_reliability_bucket{le="0.6"}`} {
		if !strings.Contains(string(body), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}

	resp, err = http.Get(n.APIAddr() + "/v1/nope")
	if err != nil {
		t.Fatal(err)
	}
	var e api.Error
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || e.Error == "" {
		t.Errorf("unknown endpoint: %d %+v", resp.StatusCode, e)
	}

	n.Close()
	if _, err := c.Status(ctx); !errors.Is(err, api.ErrNoDaemon) {
		t.Errorf("status after close: %v, want ErrNoDaemon", err)
	}
}

func TestAPIRefusesBadMarketRequests(t *testing.T) {
	t.Parallel()
	n := startNode(t, testRepo(t, "a", nil), Options{})
	for _, tc := range []struct{ path, body, want string }{
		{"/v1/match", `{"count": 1, "hours": 1, "max_price": "2"`, "request body"},
		{"/v1/match", `{"count": 1, "hours": 1, "max_price": "2"} {}`, "more follows"},
		{"/v1/match", `{"count": 1, "hours": 1, "max_price": "2", "colour": "red"}`, "unknown field"},
		{"/v1/match", `{"count": 1, "hours": 1, "max_price": "2", "min_vram_gib": -1}`, "min_vram_gib -1"},
		{"/v1/match", `{"count": 1, "hours": 1, "max_price": "2", "max_rtt_ms": -5}`, "max_rtt_ms -5"},
		{"/v1/match", `{"count": 1, "hours": 1e-9, "max_price": "2"}`, "hours"},
		{"/v1/match", `{"count": 0, "hours": 1, "max_price": "2"}`, "count 0"},
		{"/v1/match", `{"count": 1, "hours": 1, "max_price": "free"}`, "max_price"},
		{"/v1/match", `{"count": 1, "hours": 1, "max_price": "2", "tier": "platinum"}`, "tier"},
		{"/v1/match", `{"count": 1, "hours": 1, "max_price": "2", "gpus": [""]}`, "gpus[0]"},
		{"/v1/match", `{"count": 1, "hours": 1, "max_price": "2", "start_within_hours": -5}`, "start_within_hours"},
		{"/v1/bids", `{"count": 1, "hours": 1, "max_price": "2", "wait_ms": -1}`, "wait_ms"},
		{"/v1/bids", `{"count": 1, "hours": 1, "max_price": "2", "image": "` + strings.Repeat("x", 70<<10) + `"}`, "request body"},
	} {
		resp := apiCall(t, n, http.MethodPost, tc.path, "application/json", tc.body, apiToken(t, n), nil)
		var e api.Error
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(e.Error, tc.want) {
			t.Errorf("POST %s %.60s: %d %q, want 400 naming %q", tc.path, tc.body, resp.StatusCode, e.Error, tc.want)
		}
	}
	// A lease the node does not have is not found, not a bad request.
	resp := apiCall(t, n, http.MethodPost, "/v1/leases/lease-nope/cancel", "application/json", `{}`, apiToken(t, n), nil)
	var e api.Error
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if want := `no lease "lease-nope" here`; resp.StatusCode != http.StatusNotFound || !strings.Contains(e.Error, want) {
		t.Errorf("POST /v1/leases/lease-nope/cancel: %d %q, want 404 naming %q", resp.StatusCode, e.Error, want)
	}
	for _, path := range []string{"/v1/leases", "/v1/receipts", "/v1/ledger"} {
		resp, err := http.Get(n.APIAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(b)) != "[]" {
			t.Errorf("GET %s on a new node: %d %s, want 200 []", path, resp.StatusCode, b)
		}
	}
	resp, err := http.Get(n.APIAddr() + "/v1/offers?min_vram_gib=-5")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("GET /v1/offers?min_vram_gib=-5: %d, want 400", resp.StatusCode)
	}
}

// What a web page the user visits can make the browser send to the API
// is refused (issue 11, attack 4): a cross-origin text/plain POST that
// signed and gossiped a bid, a cancel from any origin, and reads through
// a DNS-rebound name. The CLI's token, as JSON, from the machine, works;
// /metrics stays open unless the config closes it.
func TestAPIRefusesWhatAWebPageCanSend(t *testing.T) {
	t.Parallel()
	n := startNode(t, testRepo(t, "a", nil), Options{})
	token := apiToken(t, n)
	if fi, err := os.Stat(filepath.Join(n.repo.Path, api.TokenFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, %v; want mode 0600", fi.Mode(), err)
	}
	bid := `{"count": 1, "hours": 1, "max_price": "2", "wait_ms": 100}`
	host := strings.TrimPrefix(n.APIAddr(), "http://")
	for _, c := range []struct {
		name                      string
		method, path, ctype, body string
		token                     string
		headers                   map[string]string
		want                      int
	}{
		{"a cross-origin form post of a bid", "POST", "/v1/bids", "text/plain", bid, "", map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		{"a text/plain bid from no origin", "POST", "/v1/bids", "text/plain", bid, "", nil, http.StatusUnsupportedMediaType},
		{"a JSON bid without the token", "POST", "/v1/bids", "application/json", bid, "", nil, http.StatusUnauthorized},
		{"a JSON bid with another token", "POST", "/v1/bids", "application/json", bid, strings.Repeat("0", 64), nil, http.StatusUnauthorized},
		{"a cancel from another page", "POST", "/v1/leases/lease-x/cancel", "application/json", "{}", "", map[string]string{"Referer": "https://evil.example/page"}, http.StatusForbidden},
		{"a read through a rebound name", "GET", "/v1/status", "", "", "", map[string]string{"Host": "evil.example:" + strings.Split(host, ":")[1]}, http.StatusForbidden},
		{"the ledger for another origin", "GET", "/v1/ledger", "", "", "", map[string]string{"Origin": "http://localhost.evil.example"}, http.StatusForbidden},
		{"a read from the machine", "GET", "/v1/status", "", "", "", nil, http.StatusOK},
		{"a read by localhost", "GET", "/v1/ledger", "", "", "", map[string]string{"Host": "localhost:" + strings.Split(host, ":")[1]}, http.StatusOK},
		{"the CLI's bid", "POST", "/v1/match", "application/json; charset=utf-8", bid, token, nil, http.StatusOK},
		{"the API's own page", "POST", "/v1/match", "application/json", bid, token, map[string]string{"Origin": n.APIAddr()}, http.StatusOK},
		{"metrics for a scraper", "GET", "/metrics", "", "", "", nil, http.StatusOK},
	} {
		resp := apiCall(t, n, c.method, c.path, c.ctype, c.body, c.token, c.headers)
		var e api.Error
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: %d %q, want %d", c.name, resp.StatusCode, e.Error, c.want)
		}
	}
	if st := n.Status(); st.Bids != 0 {
		t.Errorf("the node holds %d bids after refused requests", st.Bids)
	}

	closed := startNode(t, testRepo(t, "b", func(c *config.Config) { c.API.OpenMetrics = false }), Options{})
	for token, want := range map[string]int{"": http.StatusUnauthorized, apiToken(t, closed): http.StatusOK} {
		resp := apiCall(t, closed, "GET", "/metrics", "", "", token, nil)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("closed /metrics with token %q: %d, want %d", token, resp.StatusCode, want)
		}
	}
}
