package grafana_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idlegrid/idlegrid/node"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/metricstest"
	"github.com/idlegrid/idlegrid/node/repo"
)

// dashboard is what the tests read of a Grafana dashboard's JSON model.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name, Type string
			Query      any
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int                      `json:"id"`
	Type       string                   `json:"type"`
	Title      string                   `json:"title"`
	Datasource *datasource              `json:"datasource"`
	GridPos    struct{ H, W, X, Y int } `json:"gridPos"`
	Targets    []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
}

type datasource struct{ Type, UID string }

func load(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile("idlegrid-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("idlegrid-dashboard.json: %v", err)
	}
	return d
}

// onDatasource says whether ds is the dashboard's Prometheus variable.
func onDatasource(ds *datasource) bool {
	return ds != nil && ds.Type == "prometheus" && ds.UID == "${datasource}"
}

// The dashboard imports as it is into any Grafana from 10 on: a current
// schema, a Prometheus data source chosen on import through its
// ${datasource} variable (nothing names a data source of the author's),
// only time series and stat panels under rows, each on that variable with
// at least one query, laid out within the 24 columns, IDs unique.
func TestTheDashboardIsWellFormed(t *testing.T) {
	d := load(t)
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 39 {
		t.Errorf("uid %q, title %q, schemaVersion %d: want both named and schema 39 or later", d.UID, d.Title, d.SchemaVersion)
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
		if v.Name == "datasource" && (v.Type != "datasource" || v.Query != "prometheus") {
			t.Errorf("variable datasource is a %s of %v, want a datasource of prometheus", v.Type, v.Query)
		}
	}
	if !slices.Contains(vars, "datasource") {
		t.Errorf("variables %v: no datasource", vars)
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.X < 0 || p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 || p.GridPos.H <= 0 {
			t.Errorf("panel %q: gridPos %+v outside the 24 columns", p.Title, p.GridPos)
		}
		switch p.Type {
		case "row":
			continue
		case "timeseries", "stat":
		default:
			t.Errorf("panel %q: type %s", p.Title, p.Type)
		}
		if !onDatasource(p.Datasource) || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %+v, %d queries; want ${datasource} and a query", p.Title, p.Datasource, len(p.Targets))
		}
		refs := map[string]bool{}
		for _, q := range p.Targets {
			if q.Expr == "" || q.RefID == "" || refs[q.RefID] || !onDatasource(q.Datasource) {
				t.Errorf("panel %q: query %+v: want an expr, a refId of its own, on ${datasource}", p.Title, q)
			}
			refs[q.RefID] = true
		}
	}
}

// The dashboard cannot drift from the node: every metric a panel queries
// is a family a started node serves on /metrics (a histogram's _bucket,
// _sum and _count included), counters are graphed only through rate() or
// increase() and gauges never, and every idlegrid_ family the node serves
// has a panel. A family renamed or dropped in the node, or one added and
// left off the dashboard, fails here.
func TestTheDashboardGraphsWhatANodeServes(t *testing.T) {
	served := servedFamilies(t)
	metric := regexp.MustCompile(`\bidlegrid_[a-z0-9_]+`)
	graphed := map[string]bool{}
	for _, p := range load(t).Panels {
		for _, q := range p.Targets {
			for _, at := range metric.FindAllStringIndex(q.Expr, -1) {
				name := q.Expr[at[0]:at[1]]
				family, typ := familyOf(served, name)
				if family == "" {
					t.Errorf("panel %q queries %s, which the node does not serve", p.Title, name)
					continue
				}
				graphed[family] = true
				before := strings.TrimRight(q.Expr[:at[0]], " ")
				rated := strings.HasSuffix(before, "rate(") || strings.HasSuffix(before, "increase(")
				switch {
				case typ == "counter" && !rated:
					t.Errorf("panel %q graphs the counter %s without rate() or increase(): %s", p.Title, name, q.Expr)
				case typ == "gauge" && rated:
					t.Errorf("panel %q takes the rate of the gauge %s: %s", p.Title, name, q.Expr)
				}
			}
		}
	}
	for family := range served {
		if strings.HasPrefix(family, "idlegrid_") && !graphed[family] {
			t.Errorf("no panel graphs %s", family)
		}
	}
}

// familyOf is the family a series name belongs to among served, and its
// type: the name itself, or a histogram's whose series it is.
func familyOf(served map[string]string, name string) (string, string) {
	if typ, ok := served[name]; ok {
		return name, typ
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && served[base] == "histogram" {
			return base, "histogram"
		}
	}
	return "", ""
}

// servedFamilies starts a node on loopback and reads its /metrics, with
// its API token, as Prometheus would: the type of every family, by name.
func servedFamilies(t *testing.T) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := repo.Init(filepath.Join(t.TempDir(), "repo"), repo.InitOptions{Profile: config.ProfileProvider, ListenPort: 0, APIPort: 0})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := r.Config()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Network.Listen = config.ListenAddrs("127.0.0.1", 0, true)
	n, err := node.New(r, cfg, node.Options{Version: "test", Logger: slog.New(slog.DiscardHandler), ProcessMetrics: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	token, err := r.APIToken()
	if err != nil {
		t.Fatal(err)
	}
	families := metricstest.Read(t, n.APIAddr(), token).Families
	if len(families) == 0 {
		t.Fatal("/metrics served no family")
	}
	return families
}
