package views

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
	"github.com/idlegrid/idlegrid/node/fault"
)

// SortOffers orders views, listed by price, by what only the node
// knows of them: the whole offer's price an hour ("total", cheapest
// first), RTT (nearest first, unknown last) or its provider's
// reliability (most reliable first). Ties keep the price order.
func SortOffers(vs []api.OfferView, by string) {
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

// RTT shows an RTT and where it came from.
func RTT(d time.Duration, from market.RTTSource) (float64, string) {
	return float64(d) / float64(time.Millisecond), string(from)
}

// OfferFilter reads an offer query's filters.
func OfferFilter(q api.OfferQuery, book *market.Snapshot, rel market.Reliability, rtts market.RTTs) (market.OfferFilter, error) {
	f := market.OfferFilter{MinVRAMBytes: uint64(q.MinVRAMGiB) << 30, Country: strings.ToUpper(q.Country), SortBy: q.Sort, Rel: rel, RTT: rtts}
	if q.Where != "" {
		w, err := market.ParseQuery(q.Where)
		if err != nil {
			return f, fault.Invalid(err)
		}
		f.Where = w
	}
	if q.GPU != "" {
		models, err := ResolveGPUs("gpu", []string{q.GPU}, book)
		if err != nil {
			return f, fault.Invalid(err)
		}
		f.GPUModel = models[0]
	}
	if q.MaxPrice != "" {
		p, err := market.ParsePrice(q.MaxPrice)
		if err != nil {
			return f, fault.Invalidf("max_price: %w", err)
		}
		f.MaxPriceMicros = p
	}
	if q.Tier != "" {
		t, err := market.TierFromName(q.Tier)
		if err != nil {
			return f, fault.Invalid(err)
		}
		f.Tier = t
	}
	switch q.Sort {
	case "", "price", "vram", "expiry":
	case "total", "rtt", "reliability":
		f.SortBy = "price" // then sorted here, by what the node knows
	default:
		return f, fault.Invalidf("sort %q: want %s", q.Sort, strings.Join(api.OfferSorts, ", "))
	}
	return f, nil
}

// Offer shows o, with this node's score of its provider.
func Offer(o *pb.Offer, scores *reputation.Scores) api.OfferView {
	sc := scores.Of(market.Issuer(o))
	v := api.OfferView{
		Provider:    market.Issuer(o).String(),
		ID:          o.Header.Id,
		Seq:         o.Header.Seq,
		Datasets:    o.GetDatasets(),
		Country:     o.Region.GetCountry(),
		Label:       o.Region.GetLabel(),
		Currency:    o.Currency,
		Price:       market.FormatPrice(o.PriceMicros),
		MinDuration: (time.Duration(o.MinDurationSeconds) * time.Second).String(),
		MaxDuration: (time.Duration(o.MaxDurationSeconds) * time.Second).String(),
		Created:     time.UnixMilli(o.Header.CreatedUnixMs).UTC(),
		Expires:     time.UnixMilli(o.Header.ExpiresUnixMs).UTC(),
		RelayOnly:   o.RelayOnly, StaticAddress: o.StaticAddress, OpenPorts: o.OpenPorts,
		Attestable:  len(o.AttestationHash) > 0,
		Reliability: sc.Reliability,
		Basis:       Basis(sc),
	}
	cat := gpus.Default()
	for _, g := range o.Gpus {
		gv := api.GPUView{Model: cat.CanonicalFor(g.Model, g.VramBytes), Count: g.Count,
			ComputeCapability: fmt.Sprintf("%d.%d", g.ComputeCapability/10, g.ComputeCapability%10), Interconnect: g.Interconnect,
			DriverVersion: g.DriverVersion, PCIeGeneration: g.PcieGeneration, PCIeLanes: g.PcieLanes, MemoryBandwidthGBps: g.MemoryBandwidthGbps, FP32GFLOPS: g.Fp32Gflops}
		if g.CudaVersion > 0 {
			gv.CUDAVersion = fmt.Sprintf("%d.%d", g.CudaVersion/100, g.CudaVersion%100)
		}
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
		v.Weekly = append(v.Weekly, FormatWeekly(w))
	}
	return v
}

func FormatWeekly(w *pb.WeeklyWindow) string {
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

func Candidate(rank int, c market.Candidate, scores *reputation.Scores) api.CandidateView {
	o := Offer(c.Offer(), scores)
	o.RTTMillis, o.RTTSource = RTT(c.RTT, cmp.Or(c.RTTSource, market.RTTUnknown))
	return api.CandidateView{
		Rank:           rank,
		Offer:          o,
		GPUs:           c.GPUs,
		Price:          market.FormatPrice(c.PriceMicros),
		EffectivePrice: market.FormatPrice(uint64(c.EffectivePriceMicros + 0.5)),
		Total:          market.FormatPrice(c.TotalMicros),
		Start:          c.Start.UTC(),
		Scores:         c.ScoreMap(),
		Staging:        c.Staging.String(),
	}
}

func Quote(q *pb.Quote) api.QuoteView {
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

// ResolveGPUs reads a renter's GPU models and families through the
// catalog into the names bids carry (gpus.Want's Name): a model's ID
// ("4090" is "RTX 4090"), a family's name ("h100" is "H100", any H100),
// with the memory a name holds to ("RTX 4090 48GB"). A name the catalog
// lacks is the book's spelling of a GPU offers in book carry under it
// (book may be nil); else it is refused with the nearest names.
// field names the request's field in errors ("gpus" for a list).
func ResolveGPUs(field string, names []string, book *market.Snapshot) ([]string, error) {
	var out []string
	for i, g := range names {
		if len(names) > 1 || field == "gpus" {
			field = fmt.Sprintf("gpus[%d]", i)
		}
		if g == "" || len(g) > 64 {
			return nil, fmt.Errorf("%s %q: want a model or family such as H100 or RTX 4090", field, g)
		}
		w, err := gpus.Default().Resolve(g)
		name := w.Name
		if err != nil {
			offered, ok := book.GPUNamed(g)
			if !ok {
				return nil, fmt.Errorf("%s: %w", field, err)
			}
			name = offered
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out, nil
}

// ResolveFormFactor reads a form factor in any case: "sxm" is "SXM".
func ResolveFormFactor(ff string) (string, error) {
	if ff == "" {
		return "", nil
	}
	if f, ok := gpus.FormFactorOf(ff); ok {
		return f, nil
	}
	return "", fmt.Errorf("form_factor %q: want one of %s", ff, strings.Join(gpus.FormFactors, ", "))
}

// Basis says in words what a score rests on.
func Basis(sc reputation.Score) string {
	var parts []string
	switch {
	case sc.Receipts == 0 && sc.Failures == 0 && sc.Disputes == 0:
		parts = append(parts, "no history")
	default:
		parts = append(parts, fmt.Sprintf("%d receipts, %d via trusted peers", sc.Receipts, sc.Trusted))
		if sc.Failures > 0 {
			parts = append(parts, plural(sc.Failures, "failure"))
		}
		if sc.Disputes > 0 {
			parts = append(parts, plural(sc.Disputes, "dispute"))
		}
	}
	if sc.Bridge != "" {
		parts = append(parts, "all its trust through "+sc.Bridge.String()+", so none counts")
	}
	return fmt.Sprintf("%.2f: %s", sc.Reliability, strings.Join(parts, ", "))
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
