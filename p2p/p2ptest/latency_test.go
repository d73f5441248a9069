package p2ptest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// planetLab loads the embedded matrix or fails the test.
func planetLab(t *testing.T) Matrix {
	t.Helper()
	m, err := PlanetLab()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestLoadLatencyMatrixPlanetLab(t *testing.T) {
	m := planetLab(t)
	if len(m) != 490 {
		t.Fatalf("rows = %d, want 490", len(m))
	}
	for i, row := range m {
		if len(row) != 490 {
			t.Fatalf("row %d has %d columns, want 490", i, len(row))
		}
		if row[i] != 0 {
			t.Errorf("diagonal [%d][%d] = %v, want 0", i, i, row[i])
		}
	}
	if m[0][1] != 0.175 {
		t.Errorf("[0][1] = %v, want 0.175", m[0][1])
	}
	if got := m.RTT(0, 1); got != 175*time.Microsecond {
		t.Errorf("RTT(0, 1) = %v, want 175µs", got)
	}
	if got := m.RTT(0, 3); got != 121420*time.Microsecond {
		t.Errorf("RTT(0, 3) = %v, want 121.42ms", got)
	}
}

func TestLoadLatencyMatrixRejects(t *testing.T) {
	tests := []struct {
		name, data, want string
	}{
		{"empty", "", "no rows"},
		{"ragged row", "0\t1\t2\n1\t0\n2\t1\t0\n", "row 1 has 2 columns, row 0 has 3"},
		{"more rows than columns", "0\t1\n1\t0\n2\t3\n", "not square: 3 rows of 2 columns"},
		{"bad number", "0\t1\t2\n1\t0\tx7\n2\t1\t0\n", `row 1, column 2: "x7" is not a finite number`},
		{"empty cell", "0\t\n1\t0\n", `row 0, column 1: "" is not a finite number`},
		{"NaN", "0\tNaN\n1\t0\n", `row 0, column 1: "NaN" is not a finite number`},
		{"negative", "0\t1\t2\n1\t0\t3\n2\t-3.5\t0\n", "row 2, column 1: negative RTT -3.5 ms"},
		{"negative diagonal", "0\t1\n1\t-0.2\n", "row 1, column 1: negative RTT -0.2 ms"},
		{"blank line inside", "0\t1\n\n1\t0\n", "line 2 is blank"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.tsv")
			if err := os.WriteFile(path, []byte(tt.data), 0o600); err != nil {
				t.Fatal(err)
			}
			m, err := LoadLatencyMatrix(path)
			if err == nil {
				t.Fatalf("accepted %q as %v", tt.data, m)
			}
			if !errors.Is(err, ErrMatrix) {
				t.Errorf("error %q does not wrap ErrMatrix", err)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name %s and %q", err, path, tt.want)
			}
		})
	}
}

func TestLoadLatencyMatrixAccepts(t *testing.T) {
	// CRLF line ends, a trailing blank line and no final newline are all
	// fine; so is an asymmetric matrix.
	for name, data := range map[string]string{
		"crlf":              "0\t1.5\r\n2.5\t0\r\n",
		"trailing blank":    "0\t1.5\n2.5\t0\n\n",
		"no final newline":  "0\t1.5\n2.5\t0",
		"measured diagonal": "0.05\t1.5\n2.5\t0.031\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.tsv")
			if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
			m, err := LoadLatencyMatrix(path)
			if err != nil {
				t.Fatal(err)
			}
			if m.RTT(0, 1) != 1500*time.Microsecond || m.RTT(1, 0) != 2500*time.Microsecond || m.RTT(0, 0) != 0 || m.RTT(1, 1) != 0 {
				t.Errorf("got %v", m)
			}
		})
	}
}

func TestLoadLatencyMatrixMissingFile(t *testing.T) {
	_, err := LoadLatencyMatrix(filepath.Join(t.TempDir(), "nope.tsv"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v, want one wrapping os.ErrNotExist", err)
	}
}

// A matrix expands to a swarm larger than itself: 1,000 nodes on the 490
// PlanetLab rows, symmetric, the diagonal 0, each RTT within the jitter of
// its rows' (a site's own machines near each other), the same for a seed.
func TestExpandReusesRowsWithJitter(t *testing.T) {
	m := planetLab(t)
	const n, jitter = 1000, 0.1
	e := m.Expand(n, jitter, 7)
	if len(e) != n || len(e[0]) != n {
		t.Fatalf("%d×%d", len(e), len(e[0]))
	}
	for i := range n {
		if e[i][i] != 0 {
			t.Fatalf("diagonal %d: %v", i, e[i][i])
		}
		for j := i + 1; j < n; j++ {
			if e[i][j] != e[j][i] {
				t.Fatalf("(%d, %d) not symmetric", i, j)
			}
			ri, rj := i%len(m), j%len(m)
			if ri == rj {
				if e[i][j] <= 0 || e[i][j] > 100 {
					t.Errorf("(%d, %d), one site: %v ms", i, j, e[i][j])
				}
				continue
			}
			base := (m[ri][rj] + m[rj][ri]) / 2
			if e[i][j] < base*(1-jitter)-1e-9 || e[i][j] > base*(1+jitter)+1e-9 {
				t.Fatalf("(%d, %d): %v ms, rows' %v ± %.0f%%", i, j, e[i][j], base, jitter*100)
			}
		}
	}
	if again := m.Expand(n, jitter, 7); again[3][700] != e[3][700] {
		t.Error("the same seed gave another matrix")
	}
}
