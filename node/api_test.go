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
)

func TestAPIServesStatusPeersAndMetrics(t *testing.T) {
	t.Parallel()
	boot := startNode(t, testRepo(t, "boot", nil), Options{})
	r := testRepo(t, "a", func(c *Config) {
		c.Network.Bootstrap = boot.Addrs()[:1]
		c.Network.PingInterval = Dur(time.Second)
	})
	n := startNode(t, r, Options{ProcessMetrics: true})
	if !strings.HasPrefix(n.APIAddr(), "http://127.0.0.1:") {
		t.Fatalf("API at %s, want 127.0.0.1", n.APIAddr())
	}
	b, err := os.ReadFile(filepath.Join(r.Path, APIFile))
	if err != nil || strings.TrimSpace(string(b)) != n.APIAddr() {
		t.Fatalf("api file = %q, %v", b, err)
	}
	c := api.NewClient(n.APIAddr())
	ctx := context.Background()

	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.PeerID != n.id.String() || st.Swarm != "public" || st.Mode != DHTServer || st.Version != "test" || len(st.Listen) == 0 {
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

	resp, err := http.Get(n.APIAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"idlegrid_connected_peers 1", "idlegrid_info{", "idlegrid_gossip_mesh_peers{", "libp2p_", "go_goroutines", "process_resident_memory_bytes"} {
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
		{"/v1/leases/lease-nope/cancel", `{}`, `no lease "lease-nope" here`},
	} {
		resp, err := http.Post(n.APIAddr()+tc.path, "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		var e api.Error
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(e.Error, tc.want) {
			t.Errorf("POST %s %.60s: %d %q, want 400 naming %q", tc.path, tc.body, resp.StatusCode, e.Error, tc.want)
		}
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
