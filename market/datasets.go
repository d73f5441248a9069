package market

import (
	"fmt"
	"math"
	"slices"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/ipfs/go-cid"
)

// MaxOfferDatasets bounds the datasets an offer says its provider keeps.
const MaxOfferDatasets = 64

// maxCIDLen bounds a dataset's CID as text: a CIDv1 of SHA-256 in base32
// is 59 characters.
const maxCIDLen = 100

// validDatasetCID reports whether s is a dataset's root CID: a CIDv1.
func validDatasetCID(s string) bool {
	if len(s) > maxCIDLen {
		return false
	}
	c, err := cid.Decode(s)
	return err == nil && c.Version() == 1
}

// Staging is what a provider would stage of a bid's datasets: the bytes
// it keeps already, those it lacks, and how long fetching those takes at
// its declared download bandwidth.
type Staging struct {
	Held, Missing uint64
	Seconds       float64
}

// stagingOf is the staging of needs at a provider that keeps held and
// downloads at down bits a second (0: unknown, counted as 100 Mbit/s).
func stagingOf(needs []*pb.DatasetNeed, held []string, down uint64) Staging {
	var s Staging
	for _, d := range needs {
		if slices.Contains(held, d.GetCid()) {
			s.Held += d.GetBytes()
		} else {
			s.Missing += d.GetBytes()
		}
	}
	if s.Missing > 0 {
		if down == 0 {
			down = unknownDown
		}
		s.Seconds = float64(s.Missing) * 8 / float64(down)
	}
	return s
}

// unknownDown is the download bandwidth assumed of a provider that
// declares none: 100 Mbit/s.
const unknownDown = 100_000_000

// cost is the staging's share of the effective price per GPU-hour: the
// lease pays for the seconds its GPUs wait on the data, spread over its
// duration (a staging longer than the lease costs it all again).
func (s Staging) cost(price uint64, durationSeconds uint64) float64 {
	if s.Seconds == 0 || durationSeconds == 0 {
		return 0
	}
	return float64(price) * s.Seconds / float64(durationSeconds)
}

// String says it as a renter reads it: "holds 38 GB of 40 GB; stages
// 2 GB in ~20s"; empty for a bid with no datasets.
func (s Staging) String() string {
	total := s.Held + s.Missing
	switch {
	case total == 0:
		return ""
	case s.Missing == 0:
		return fmt.Sprintf("holds all %s of its datasets", bytesText(total))
	}
	return fmt.Sprintf("holds %s of %s; stages %s in ~%s", bytesText(s.Held), bytesText(total), bytesText(s.Missing), secondsText(s.Seconds))
}

func bytesText(n uint64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.3g GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.3g MB", float64(n)/1e6)
	}
	return fmt.Sprintf("%d B", n)
}

func secondsText(s float64) string {
	switch {
	case s < 1:
		return "1s"
	case s < 120:
		return fmt.Sprintf("%.0fs", math.Ceil(s))
	case s < 7200:
		return fmt.Sprintf("%.0fm", math.Ceil(s/60))
	}
	return fmt.Sprintf("%.1fh", s/3600)
}
