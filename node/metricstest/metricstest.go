// Package metricstest reads a node's /metrics as Prometheus would, for
// the tests that check what it serves (node's own, and the example
// dashboard's). It imports nothing of idlegrid's.
package metricstest

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// Scrape is one read of /metrics.
type Scrape struct {
	// Samples holds each sample's value by its name and labels as the
	// exposition writes them, labels sorted by name:
	// idlegrid_executor_errors_total{op="pull"}.
	Samples map[string]float64
	// Families holds each family's type (counter, gauge, histogram…) by
	// its name.
	Families map[string]string
}

// Read scrapes the /metrics of the API at apiAddr (http://host:port),
// sending token as a bearer token as a configured scraper does.
func Read(t testing.TB, apiAddr, token string) Scrape {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, apiAddr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	s := Scrape{Samples: map[string]float64{}, Families: map[string]string{}}
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		line := lines.Text()
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(f, " ")
			s.Families[name] = typ
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			s.Samples[line[:i]] = v
		}
	}
	if err := lines.Err(); err != nil {
		t.Fatal(err)
	}
	return s
}

// Value is a sample's value; the test fails when there is no such
// sample.
func (s Scrape) Value(t testing.TB, series string) float64 {
	t.Helper()
	v, ok := s.Samples[series]
	if !ok {
		t.Fatalf("/metrics has no sample %s", series)
	}
	return v
}
