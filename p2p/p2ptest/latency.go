package p2ptest

import (
	"bufio"
	"bytes"
	_ "embed"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"
)

// planetLab490 is the PlanetLab RTT matrix (490 hosts) committed in
// testdata with its licence (testdata/README.md says where it is from).
//
//go:embed testdata/planetlab-490.tsv
var planetLab490 []byte

// Matrix is a square matrix of round-trip times in milliseconds: Matrix[i][j]
// is the RTT between hosts i and j, 0 on the diagonal.
type Matrix [][]float64

// RTT returns the round-trip time between hosts i and j.
func (m Matrix) RTT(i, j int) time.Duration {
	return time.Duration(math.Round(m[i][j] * float64(time.Millisecond)))
}

// OneWay is the latency a mocknet link between hosts i and j carries:
// mocknet delays every write by it, one way, so it is half the pair's RTT
// (the mean of the matrix's two directions).
func (m Matrix) OneWay(i, j int) time.Duration {
	return (m.RTT(i, j) + m.RTT(j, i)) / 4
}

// Expand returns an n×n matrix for a swarm larger than m: node i sits at
// m's row i mod len(m), and every RTT is m's between the two rows,
// symmetric, times 1 ± up to jitter (0.1: ±10%), drawn from seed. Nodes
// that share a row are a site's machines: their RTT is the row's least
// RTT to any other row, at least 0.1 ms, times 1/4 ± jitter. A missing
// RTT (0 off the diagonal) stays missing.
func (m Matrix) Expand(n int, jitter float64, seed uint64) Matrix {
	rnd := rand.New(rand.NewPCG(seed, uint64(n)))
	local := make([]float64, len(m))
	for r := range m {
		local[r] = math.Inf(1)
		for c, v := range m[r] {
			if c != r && v > 0 {
				local[r] = min(local[r], v)
			}
		}
		if math.IsInf(local[r], 1) {
			local[r] = 0.4
		}
		local[r] = max(local[r]/4, 0.1)
	}
	out := make(Matrix, n)
	for i := range out {
		out[i] = make([]float64, n)
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			ri, rj := i%len(m), j%len(m)
			base := (m[ri][rj] + m[rj][ri]) / 2
			if ri == rj {
				base = local[ri]
			}
			v := base * (1 + jitter*(2*rnd.Float64()-1))
			out[i][j], out[j][i] = v, v
		}
	}
	return out
}

// Rows is the matrix of m's rows and columns rows, in that order.
func (m Matrix) Rows(rows []int) Matrix {
	out := make(Matrix, len(rows))
	for i, r := range rows {
		out[i] = make([]float64, len(rows))
		for j, c := range rows {
			out[i][j] = m[r][c]
		}
	}
	return out
}

// CompleteRows is up to n of m's rows from first on, in order, each
// taken when it has an RTT to and from every row taken before it: the
// rows of a matrix with no RTT missing (PlanetLab's has gaps).
func (m Matrix) CompleteRows(first, n int) []int {
	var rows []int
	for r := first; r < len(m) && len(rows) < n; r++ {
		ok := true
		for _, q := range rows {
			if m[r][q] <= 0 || m[q][r] <= 0 {
				ok = false
				break
			}
		}
		if ok {
			rows = append(rows, r)
		}
	}
	return rows
}

// LoadLatencyMatrix reads a tab-separated square matrix of RTTs in
// milliseconds, one row a line, such as testdata/planetlab-490.tsv. An error wraps
// ErrMatrix and names the 0-based row and column at fault.
func LoadLatencyMatrix(path string) (Matrix, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("latency matrix: %w", err)
	}
	defer f.Close()
	m, err := parseMatrix(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// PlanetLab parses the embedded PlanetLab matrix: 490 hosts, RTTs in
// milliseconds. Each call returns a fresh copy the caller may change.
func PlanetLab() (Matrix, error) {
	m, err := parseMatrix(bytes.NewReader(planetLab490))
	if err != nil {
		return nil, fmt.Errorf("testdata/planetlab-490.tsv: %w", err)
	}
	return m, nil
}

// parseMatrix reads the rows of a matrix and checks that it is square, that
// every value is a finite, non-negative number and that the diagonal is 0.
func parseMatrix(r io.Reader) (Matrix, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	var m Matrix
	blank := -1 // the first blank line; only trailing blank lines are allowed
	for line := 0; sc.Scan(); line++ {
		text := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(text) == "" {
			if blank < 0 {
				blank = line
			}
			continue
		}
		if blank >= 0 {
			return nil, fmt.Errorf("%w: line %d is blank", ErrMatrix, blank+1)
		}
		row, err := parseRow(len(m), text)
		if err != nil {
			return nil, err
		}
		if len(m) > 0 && len(row) != len(m[0]) {
			return nil, fmt.Errorf("%w: not square: row %d has %d columns, row 0 has %d", ErrMatrix, len(m), len(row), len(m[0]))
		}
		m = append(m, row)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: read: %v", ErrMatrix, err)
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("%w: no rows", ErrMatrix)
	}
	if len(m) != len(m[0]) {
		return nil, fmt.Errorf("%w: not square: %d rows of %d columns", ErrMatrix, len(m), len(m[0]))
	}
	return m, nil
}

// parseRow parses row i: tab-separated RTTs. Column i (a host's RTT to
// itself, which some measured matrices hold as a small figure) is read,
// checked and set to 0.
func parseRow(i int, text string) ([]float64, error) {
	fields := strings.Split(text, "\t")
	row := make([]float64, len(fields))
	for j, f := range fields {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		switch {
		case err != nil || math.IsNaN(v) || math.IsInf(v, 0):
			return nil, fmt.Errorf("%w: row %d, column %d: %q is not a finite number of milliseconds", ErrMatrix, i, j, f)
		case v < 0:
			return nil, fmt.Errorf("%w: row %d, column %d: negative RTT %v ms", ErrMatrix, i, j, v)
		case i == j:
			v = 0
		}
		row[j] = v
	}
	return row, nil
}
