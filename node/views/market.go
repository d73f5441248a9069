package views

import (
	"cmp"
	"slices"
	"strings"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/reputation"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/libp2p/go-libp2p/core/peer"
)

// histogramBins is how many bins the market's price histogram has.
const histogramBins = 40

// Market sums up the offers of snap that q selects: their count, the
// most common currency, per model (in the catalog's names) the offers,
// GPUs, providers and prices of those in that currency, a histogram of
// their prices, and the cheapest limit (10 when 0) as views, with
// scores and rtts.
func Market(snap *market.Snapshot, q api.OfferQuery, limit int, scores *reputation.Scores, rtts market.RTTs) (api.MarketSummary, error) {
	f, err := OfferFilter(q, snap, scores, rtts)
	if err != nil {
		return api.MarketSummary{}, err
	}
	var hits []market.Listing
	snap.EachOffer(f, func(l market.Listing) { hits = append(hits, l) })
	sum := api.MarketSummary{Offers: len(hits), Cheapest: []api.OfferView{}, Currency: commonCurrency(hits)}
	var all []uint64
	sum.Models, all = modelSummaries(hits, sum.Currency)
	sum.Priced = len(all)
	sum.Histogram = PriceHistogram(all)
	if limit == 0 {
		limit = 10
	}
	for _, h := range cheapest(hits, limit) {
		o, ok := snap.Offer(h.Issuer, h.ID)
		if !ok {
			continue // not in the snapshot EachOffer read: cannot happen
		}
		v := Offer(o, scores)
		v.ListedTier, v.ListedPrice = market.TierName(h.Tier), market.FormatPrice(h.PriceMicros)
		v.RTTMillis, v.RTTSource = RTT(market.RTTOf(rtts, o))
		sum.Cheapest = append(sum.Cheapest, v)
	}
	return sum, nil
}

// commonCurrency is the currency most of hits are priced in; of two as
// common, the first by name.
func commonCurrency(hits []market.Listing) string {
	currencies := map[string]int{}
	for _, h := range hits {
		currencies[h.Currency]++
	}
	var common string
	for c, k := range currencies {
		if k > currencies[common] || k == currencies[common] && c < common {
			common = c
		}
	}
	return common
}

// modelSummaries sums up, per model of the first GPU group (the
// catalog's name for each spelling met), the hits priced in currency,
// most offers first; all is every one of their prices.
func modelSummaries(hits []market.Listing, currency string) (out []api.ModelSummary, all []uint64) {
	type model struct {
		prices    []uint64
		gpus      int
		providers map[peer.ID]bool
	}
	models := map[string]*model{}
	for _, h := range hits {
		if h.Currency != currency {
			continue
		}
		all = append(all, h.PriceMicros)
		m := models[h.Model]
		if m == nil {
			m = &model{providers: map[peer.ID]bool{}}
			models[h.Model] = m
		}
		m.prices = append(m.prices, h.PriceMicros)
		m.gpus += int(h.GPUs)
		m.providers[h.Issuer] = true
	}
	out = []api.ModelSummary{}
	for name, m := range models {
		slices.Sort(m.prices)
		out = append(out, api.ModelSummary{Model: name, Offers: len(m.prices), GPUs: m.gpus, Providers: len(m.providers),
			Min: market.FormatPrice(m.prices[0]), Median: market.FormatPrice(market.Percentile(m.prices, 50)), P90: market.FormatPrice(market.Percentile(m.prices, 90))})
	}
	slices.SortFunc(out, func(a, b api.ModelSummary) int { return cmp.Or(b.Offers-a.Offers, cmp.Compare(a.Model, b.Model)) })
	return out, all
}

// cheapest is the cheapest limit of hits, as FindOffers orders them
// (price, then issuer and ID), without sorting every offer: the least
// price of the rest bounds which can still be among them.
func cheapest(hits []market.Listing, limit int) []market.Listing {
	byPrice := func(a, b market.Listing) int {
		return cmp.Or(cmp.Compare(a.PriceMicros, b.PriceMicros), cmp.Compare(a.Issuer, b.Issuer), strings.Compare(a.ID, b.ID))
	}
	var out []market.Listing
	for _, h := range hits {
		if len(out) == limit && byPrice(h, out[limit-1]) >= 0 {
			continue
		}
		i, _ := slices.BinarySearchFunc(out, h, byPrice)
		out = slices.Insert(out, i, h)
		if len(out) > limit {
			out = out[:limit]
		}
	}
	return out
}

// PriceHistogram bins prices (micros) into histogramBins equal bins from
// the least to the 99th percentile, the last bin taking the rest, so one
// absurd price cannot squash the chart. A bin is a cent at least; prices
// that span fewer cents than there are bins sit in the middle.
func PriceHistogram(prices []uint64) api.PriceHistogram {
	h := api.PriceHistogram{Counts: []int{}}
	if len(prices) == 0 {
		return h
	}
	slices.Sort(prices)
	lo, hi := prices[0], market.Percentile(prices, 99)
	// In micros, whole cents: a bin is a cent at least.
	width := max((hi-lo+histogramBins-1)/histogramBins, 10_000)
	width = (width + 9_999) / 10_000 * 10_000
	from := lo / 10_000 * 10_000
	if span := width * histogramBins; hi-lo < span/2 {
		from = (lo + (hi-lo)/2 - min(lo+(hi-lo)/2, span/2)) / 10_000 * 10_000
	}
	h.From, h.Width = float64(from)/1e6, float64(width)/1e6
	h.Counts = make([]int, histogramBins)
	for _, p := range prices {
		h.Counts[min(int((p-from)/width), histogramBins-1)]++
	}
	return h
}

// Explained fills out's counts, reasons, blocker and nearest models
// from ex, and, when nothing fits, its explanation.
func Explained(out *api.MatchResult, ex market.Explanation) {
	out.Explained, out.Considered, out.Feasible = true, ex.Offers, ex.Feasible
	for _, r := range ex.Reasons {
		out.Reasons = append(out.Reasons, api.ReasonView{Check: r.Check, Kind: r.Kind, Offers: r.Count, Example: r.Example})
	}
	if bl := ex.Blocker; bl != nil {
		bv := &api.BlockerView{Check: bl.Check, Kind: bl.Kind, Fit: bl.Fit, Figure: bl.Figure}
		for _, c := range bl.Near {
			bv.Cheapest = append(bv.Cheapest, api.NearOfferView{Provider: c.Issuer.String(), OfferID: c.OfferID(), GPUs: c.GPUs, Price: market.FormatPrice(c.PriceMicros)})
		}
		out.Blocker = bv
	}
	for _, mm := range ex.Nearest {
		nv := api.NearView{Model: mm.Model, Offers: mm.Offers, GPUs: mm.GPUs}
		if mm.PriceMicros > 0 {
			nv.From = market.FormatPrice(mm.PriceMicros)
		}
		out.Nearest = append(out.Nearest, nv)
	}
	if len(out.Candidates) == 0 {
		out.Explanation = ex.String()
	}
}
