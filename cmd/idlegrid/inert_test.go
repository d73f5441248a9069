package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/repo"
)

// hostileText is what a peer put in a gossiped model name (and any other
// field it chooses) to take over a renter's terminal: a screen clear, a
// window title (OSC 0), a clipboard write (OSC 52), a bell, a C1 CSI, DEL,
// a bidi override, a tab and a line break to forge a row.
const hostileText = "H100\x1b[2J\x1b]0;pwned\x07\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07\u009b31m\x7f\u202egnp.exe\u2066\t\nFAKE"

// actingBytes lists what in s a terminal or a text renderer would act on.
func actingBytes(s string) []string {
	var bad []string
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		acts := (r == utf8.RuneError && size == 1) || (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r <= 0x9f) ||
			(r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == 0x200e || r == 0x200f
		if acts && !slices.Contains(bad, s[i:i+size]) {
			bad = append(bad, s[i:i+size])
		}
		i += size
	}
	return bad
}

// fillHostile sets every string v reaches to hostileText, giving every
// slice and map one element and every pointer a value, as a hostile peer
// whose text fills every field of a view would.
func fillHostile(v reflect.Value, depth int) {
	if depth > 8 {
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(hostileText)
	case reflect.Pointer:
		if v.Type().Elem().Kind() == reflect.Struct && v.Type().Elem().PkgPath() == "time" {
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		fillHostile(v.Elem(), depth+1)
	case reflect.Struct:
		if v.Type().PkgPath() == "time" {
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillHostile(v.Field(i), depth+1)
			}
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fillHostile(v.Index(0), depth+1)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k := reflect.New(v.Type().Key()).Elem()
		fillHostile(k, depth+1)
		e := reflect.New(v.Type().Elem()).Elem()
		fillHostile(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	}
}

func hostileView[T any]() T {
	var v T
	fillHostile(reflect.ValueOf(&v).Elem(), 0)
	return v
}

// TestPeerTextReachesTheTerminalInert serves, in place of a daemon, views
// whose every string a hostile peer chose, and runs each command that
// shows peer text: its human output holds none of the bytes a terminal
// acts on, while --json keeps the data exact.
func TestPeerTextReachesTheTerminalInert(t *testing.T) {
	dir := newRepo(t)
	offer := hostileView[api.OfferView]()
	offer.Price = "2.49" // so offers --group-by model counts it
	views := map[string]any{
		"/v1/offers":                  []api.OfferView{offer},
		"/v1/peers":                   []api.Peer{hostileView[api.Peer]()},
		"/v1/match":                   hostileView[api.MatchResult](),
		"/v1/bids":                    hostileView[api.BidResult](),
		"/v1/leases":                  []api.LeaseView{hostileView[api.LeaseView]()},
		"/v1/receipts":                []api.ReceiptView{hostileView[api.ReceiptView]()},
		"/v1/ledger":                  []api.LedgerEntry{hostileView[api.LedgerEntry]()},
		"/v1/status":                  hostileView[api.Status](),
		"/v1/attest":                  hostileView[api.AttestResult](),
		"/v1/reputation/12D3KooWgood": hostileView[api.ReputationView](),
		"/v1/leases/L1/cancel":        hostileView[api.LeaseView](),
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, ok := views[r.URL.Path]
		if !ok {
			// An error a peer's text reached, as a refusal carries it.
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(api.Error{Error: "provider said: " + hostileText})
			return
		}
		json.NewEncoder(w).Encode(v)
	}))
	defer srv.Close()
	if err := os.WriteFile(filepath.Join(dir, repo.APIFile), []byte(srv.URL+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"offers"}, {"offers", "--group-by", "model"}, {"quote", "--gpu", "H100"}, {"bid", "--wait", "1ms"},
		{"peers"}, {"leases"}, {"receipts"}, {"ledger"}, {"status"}, {"attest", "12D3KooWbad"},
		{"reputation", "12D3KooWgood"}, {"reputation", "12D3KooWbad"}, {"cancel", "L1"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := runCLI(t, append(args, "--repo", dir)...)
			if !strings.Contains(r.stdout+r.stderr, "H100") {
				t.Fatalf("exit %d: the peer's text is not shown at all:\nstdout %q\nstderr %q", r.code, r.stdout, r.stderr)
			}
			for name, out := range map[string]string{"stdout": r.stdout, "stderr": r.stderr} {
				if bad := actingBytes(out); len(bad) > 0 {
					t.Errorf("%s holds %q, which a terminal acts on:\n%q", name, bad, out)
				}
				if strings.Contains(out, "\nFAKE") {
					t.Errorf("%s: a peer's line break forged a line:\n%s", name, out)
				}
			}
		})
	}
	t.Run("offers --json keeps the data exact", func(t *testing.T) {
		r := runCLI(t, "offers", "--json", "--repo", dir)
		var got []api.OfferView
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got) != 1 {
			t.Fatalf("exit %d: %v: %q", r.code, err, r.stdout)
		}
		if got[0].GPUs[0].Model != hostileText || got[0].Label != hostileText {
			t.Errorf("--json changed the peer's text: model %q label %q", got[0].GPUs[0].Model, got[0].Label)
		}
	})
}

// rent's progress (a refusal's reason, a provider's note) shows a peer's
// text inert too, on a line of its own.
func TestRentProgressShowsPeerTextInert(t *testing.T) {
	var b strings.Builder
	p := newProgressLines(&b)
	p.step("tried …x1 (propose): " + hostileText)
	p.status("gathering offers: " + hostileText)
	p.end()
	if bad := actingBytes(b.String()); len(bad) > 0 {
		t.Errorf("progress holds %q: %q", bad, b.String())
	}
	if strings.Contains(b.String(), "\nFAKE") {
		t.Errorf("a peer's line break forged a progress line: %q", b.String())
	}
}
