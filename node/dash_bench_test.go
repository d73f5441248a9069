package node

import (
	"testing"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/views"
)

// BenchmarkMarketSummary times GET /v1/market's work over a book of 10,000
// offers, beside FindOffers alone (the listing it starts from) as the
// reference: ratio is the summary's time over the listing's.
func BenchmarkMarketSummary(b *testing.B) {
	n := startNode(b, testRepo(b, "market", nil), Options{Light: true})
	fillBookTB(b, n, 10_000)
	snap := n.market.Snapshot()
	var ref float64
	b.Run("reference-FindOffers", func(b *testing.B) {
		for b.Loop() {
			snap.FindOffers(market.OfferFilter{SortBy: "price"})
		}
		ref = nsPerOp(b)
	})
	b.Run("summary", func(b *testing.B) {
		for b.Loop() {
			if _, err := views.Market(snap, api.OfferQuery{}, 50, n.reputation.Scores(), n.rtts()); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(nsPerOp(b)/ref, "x-FindOffers")
	})
}

// BenchmarkEventTick times what one dashboard's event stream asks of the
// node every half second (status, leases, rentals) with 10,000 offers in
// the book, beside the market summary as the reference.
func BenchmarkEventTick(b *testing.B) {
	n := startNode(b, testRepo(b, "events", nil), Options{Light: true})
	fillBookTB(b, n, 10_000)
	snap := n.market.Snapshot()
	var ref float64
	b.Run("reference-summary", func(b *testing.B) {
		for b.Loop() {
			views.Market(snap, api.OfferQuery{}, 20, n.reputation.Scores(), n.rtts())
		}
		ref = nsPerOp(b)
	})
	b.Run("tick", func(b *testing.B) {
		for b.Loop() {
			n.Status()
			if _, err := n.Leases(b.Context()); err != nil {
				b.Fatal(err)
			}
			n.Rentals()
		}
		b.ReportMetric(nsPerOp(b)/ref, "x-summary")
	})
}

// nsPerOp is a finished benchmark's time per operation.
func nsPerOp(b *testing.B) float64 { return float64(b.Elapsed().Nanoseconds()) / float64(b.N) }
