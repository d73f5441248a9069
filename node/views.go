package node

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/gpus"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/market/reputation"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
)

// Offers lists the book's offers that pass the query's filters.
func (n *Node) Offers(q api.OfferQuery) ([]api.OfferView, error) {
	f, err := offerFilter(q)
	if err != nil {
		return nil, err
	}
	out := []api.OfferView{}
	scores := n.reputation.scores()
	rtts := n.rtts()
	for _, o := range n.market.snapshot().FindOffers(f) {
		v := offerView(o, scores)
		v.RTTMillis, v.RTTSource = rttView(market.RTTOf(rtts, o))
		v.Implausible = rtts.Implausible(o)
		out = append(out, v)
	}
	sortOfferViews(out, q.Sort)
	return out, nil
}

// sortOfferViews orders views, listed by price, by what only the node
// knows of them: the whole offer's price an hour ("total", cheapest
// first), RTT (nearest first, unknown last) or its provider's
// reliability (most reliable first). Ties keep the price order.
func sortOfferViews(vs []api.OfferView, by string) {
	key := map[string]func(v *api.OfferView) float64{
		"total": func(v *api.OfferView) float64 {
			n := 0
			for _, g := range v.GPUs {
				n += int(g.Count)
			}
			p, _ := strconv.ParseFloat(v.Price, 64)
			return p * float64(n)
		},
		"rtt": func(v *api.OfferView) float64 {
			if v.RTTSource == string(market.RTTUnknown) {
				return math.Inf(1)
			}
			return v.RTTMillis
		},
		"reliability": func(v *api.OfferView) float64 { return -v.Reliability },
	}[by]
	if key != nil {
		slices.SortStableFunc(vs, func(a, b api.OfferView) int { return cmp.Compare(key(&a), key(&b)) })
	}
}

// rttView shows an RTT and where it came from.
func rttView(d time.Duration, from market.RTTSource) (float64, string) {
	return float64(d) / float64(time.Millisecond), string(from)
}

// offerFilter reads an offer query's filters.
func offerFilter(q api.OfferQuery) (market.OfferFilter, error) {
	f := market.OfferFilter{MinVRAMBytes: uint64(q.MinVRAMGiB) << 30, Country: strings.ToUpper(q.Country), SortBy: q.Sort}
	if q.GPU != "" {
		models, err := resolveGPUs("gpu", []string{q.GPU})
		if err != nil {
			return f, api.BadRequest{Err: err}
		}
		f.GPUModel = models[0]
	}
	if q.MaxPrice != "" {
		p, err := market.ParsePrice(q.MaxPrice)
		if err != nil {
			return f, api.BadRequest{Err: fmt.Errorf("max_price: %w", err)}
		}
		f.MaxPriceMicros = p
	}
	if q.Tier != "" {
		t, err := market.TierFromName(q.Tier)
		if err != nil {
			return f, api.BadRequest{Err: err}
		}
		f.Tier = t
	}
	switch q.Sort {
	case "", "price", "vram", "expiry":
	case "total", "rtt", "reliability":
		f.SortBy = "price" // then sorted here, by what the node knows
	default:
		return f, api.BadRequest{Err: fmt.Errorf("sort %q: want %s", q.Sort, strings.Join(api.OfferSorts, ", "))}
	}
	return f, nil
}

// offerView shows o, with this node's score of its provider.
func offerView(o *pb.Offer, scores *reputation.Scores) api.OfferView {
	sc := scores.Of(market.Issuer(o))
	v := api.OfferView{
		Provider:    market.Issuer(o).String(),
		ID:          o.Header.Id,
		Seq:         o.Header.Seq,
		Country:     o.Region.GetCountry(),
		Label:       o.Region.GetLabel(),
		Currency:    o.Currency,
		Price:       market.FormatPrice(o.PriceMicros),
		MinDuration: (time.Duration(o.MinDurationSeconds) * time.Second).String(),
		MaxDuration: (time.Duration(o.MaxDurationSeconds) * time.Second).String(),
		Created:     time.UnixMilli(o.Header.CreatedUnixMs).UTC(),
		Expires:     time.UnixMilli(o.Header.ExpiresUnixMs).UTC(),
		RelayOnly:   o.RelayOnly,
		Attestable:  len(o.AttestationHash) > 0,
		Reliability: sc.Reliability,
		Basis:       basis(sc),
	}
	cat := gpus.Default()
	for _, g := range o.Gpus {
		gv := api.GPUView{Model: cat.Canonical(g.Model), Count: g.Count,
			ComputeCapability: fmt.Sprintf("%d.%d", g.ComputeCapability/10, g.ComputeCapability%10), Interconnect: g.Interconnect}
		gv.VRAMGiB = cat.MarketedBytes(gv.Model, g.VramBytes) >> 30
		if gv.Model != g.Model {
			gv.Declared = g.Model
		}
		v.GPUs = append(v.GPUs, gv)
	}
	for _, t := range o.Tiers {
		v.Tiers = append(v.Tiers, market.TierName(t))
	}
	if len(o.TierPrices) > 0 {
		v.TierPrices = map[string]string{}
		for _, tp := range o.TierPrices {
			v.TierPrices[market.TierName(tp.Tier)] = market.FormatPrice(tp.MicrosPerGpuHour)
		}
	}
	for _, w := range o.Weekly {
		v.Weekly = append(v.Weekly, formatWeekly(w))
	}
	return v
}

func formatWeekly(w *pb.WeeklyWindow) string {
	at := func(m uint32) string {
		day := min(int(m/1440), 6)
		rest := m - uint32(day)*1440
		return fmt.Sprintf("%s %02d:%02d", config.Weekdays[day], rest/60, rest%60)
	}
	s := at(w.StartMinute) + "-" + at(w.EndMinute)
	if w.FloorMicros > 0 {
		s += " floor " + market.FormatPrice(w.FloorMicros)
	}
	return s
}

func candidateView(rank int, c market.Candidate, scores *reputation.Scores) api.CandidateView {
	o := offerView(c.Offer, scores)
	o.RTTMillis, o.RTTSource = rttView(c.RTT, cmp.Or(c.RTTSource, market.RTTUnknown))
	return api.CandidateView{
		Rank:           rank,
		Offer:          o,
		GPUs:           c.GPUs,
		Price:          market.FormatPrice(c.PriceMicros),
		EffectivePrice: market.FormatPrice(uint64(c.EffectivePriceMicros + 0.5)),
		Total:          market.FormatPrice(c.TotalMicros),
		Start:          c.Start.UTC(),
		Scores:         c.ScoreMap(),
	}
}

func quoteView(q *pb.Quote) api.QuoteView {
	total := market.LeaseTotal(q.PriceMicros, q.Gpus, q.DurationSeconds)
	return api.QuoteView{
		Provider: market.Issuer(q).String(),
		OfferID:  q.OfferId,
		Tier:     market.TierName(q.Tier),
		GPUs:     q.Gpus,
		Price:    market.FormatPrice(q.PriceMicros),
		Currency: q.Currency,
		Total:    market.FormatPrice(total),
		Start:    time.UnixMilli(q.StartUnixMs).UTC(),
		Expires:  time.UnixMilli(q.Header.ExpiresUnixMs).UTC(),
	}
}
