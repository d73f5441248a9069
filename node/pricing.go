package node

import (
	"context"
	"encoding/binary"
	"slices"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/records"
	ds "github.com/ipfs/go-datastore"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Pricing is how an offer's prices were set.
type Pricing struct {
	Policy string // config.PolicyFixed or config.PolicyMarket
	// Per tier sold, with the market policy: the comparable offers'
	// count and the target the price moves toward.
	Tiers []TierPricing
}

// TierPricing is one tier's price under the market policy.
type TierPricing struct {
	Tier       pb.Tier
	Comparable int    // comparable offers in the book
	Target     uint64 // what the policy aims at now
	Price      uint64 // what the offer asks
}

// priceOffer sets o's prices by the pricing policy of cfg. With the
// market policy each tier o sells moves from what current (the offer as
// last published; nil: none) half way to the policy's target, by at most
// the policy's MaxStep; the target comes from the comparable offers of
// snap (nil: none) whose issuers from accepts (nil: none; see
// Node.pricesFrom), the configured price standing where there are none;
// the base price is silver's where silver is sold, else the first tier's.
// Peak windows then ask at least the base price times the peak factor.
// Leases agreed before keep theirs.
func priceOffer(o *pb.Offer, cfg config.ProviderConfig, snap *market.Snapshot, current *pb.Offer, self peer.ID, now time.Time, from func(peer.ID) bool) Pricing {
	pol, follows, _ := cfg.Pricing.MarketPolicy() // validated
	pr := Pricing{Policy: config.PolicyFixed}
	if follows && len(o.Gpus) > 0 && len(o.Tiers) > 0 {
		pr.Policy = config.PolicyMarket
		model := o.Gpus[0].Model
		for _, t := range o.Tiers {
			var comparable []uint64
			if snap != nil && from != nil {
				comparable = market.ComparablePricesFrom(snap, model, t, o.Currency, self, now, from)
			}
			tp := TierPricing{Tier: t, Comparable: len(comparable), Target: pol.Target(comparable, market.TierPrice(o, t))}
			var was uint64
			if current != nil && !current.Withdrawn && slices.Contains(current.Tiers, t) {
				was = market.TierPrice(current, t)
			}
			tp.Price = pol.Next(was, tp.Target)
			pr.Tiers = append(pr.Tiers, tp)
		}
		base := pr.Tiers[0].Price
		if i := slices.IndexFunc(pr.Tiers, func(tp TierPricing) bool { return tp.Tier == pb.Tier_TIER_SILVER }); i >= 0 {
			base = pr.Tiers[i].Price
		}
		o.PriceMicros, o.TierPrices = base, nil
		for _, tp := range pr.Tiers {
			if tp.Price != base {
				o.TierPrices = append(o.TierPrices, &pb.TierPrice{Tier: tp.Tier, MicrosPerGpuHour: tp.Price})
			}
		}
	}
	for i, w := range cfg.Weekly {
		if span, err := config.ParseWeekly(w); err == nil && span.Peak && i < len(o.Weekly) {
			o.Weekly[i].FloorMicros = max(span.FloorMicros, pol.Peak(o.PriceMicros))
		}
	}
	return pr
}

// configuredPrice is what [provider] sets for tier t: gold_price or
// bronze_price where set, else price (validated).
func configuredPrice(p config.ProviderConfig, t pb.Tier) uint64 {
	s := p.Price
	switch {
	case t == pb.Tier_TIER_GOLD && p.GoldPrice != "":
		s = p.GoldPrice
	case t == pb.Tier_TIER_BRONZE && p.BronzePrice != "":
		s = p.BronzePrice
	}
	v, _ := market.ParsePrice(s)
	return v
}

// sinceKey holds when this node began selling: fill rates and earnings
// count from then, a week back at most.
var sinceKey = ds.NewKey("/provider/since")

// fillPeriod is how far back a provider's fill rate and earnings reach.
const fillPeriod = 7 * 24 * time.Hour

// markSince stores now as the start of selling, unless one is stored.
func (p *provider) markSince(ctx context.Context, now time.Time) {
	if ok, err := p.store.Has(ctx, sinceKey); err == nil && !ok {
		var buf [8]byte
		binary.BigEndian.PutUint64(buf[:], uint64(now.UnixMilli()))
		if err := p.store.Put(ctx, sinceKey, buf[:]); err != nil {
			p.log.Warn("start of selling not stored", "err", err)
		}
	}
}

// sellingSince is the start of the fill period at now.
func (p *provider) sellingSince(ctx context.Context, now time.Time) time.Time {
	from := now.Add(-fillPeriod)
	if b, err := p.store.Get(ctx, sinceKey); err == nil && len(b) == 8 {
		if began := time.UnixMilli(int64(binary.BigEndian.Uint64(b))); began.After(from) {
			from = began
		}
	}
	return from
}

// pricingStatus says how the provider prices, what its policy would set
// now from the book, and how it sold over the fill period: per window,
// GPU-hours leased of those offered, and its earnings per day.
func (n *Node) pricingStatus(ctx context.Context) *api.PricingStatus {
	p := n.provider
	if p == nil {
		return nil
	}
	cfg, now := p.cfg(), n.clock.Now()
	pol, follows, _ := cfg.Pricing.MarketPolicy()
	st := &api.PricingStatus{Policy: config.PolicyFixed, Currency: cfg.Currency, Tiers: []api.TierPriceStatus{}, Fill: []api.WindowFillStatus{}, EarnedPerDay: []api.DayEarnings{}}
	if follows {
		st.Policy, st.Rule = config.PolicyMarket, pol.String()
	}
	o, ok := p.ownOffer()
	if !ok {
		return st
	}
	snap := n.market.snapshot()
	for _, t := range o.Tiers {
		want := configuredPrice(cfg, t)
		ts := api.TierPriceStatus{Tier: market.TierName(t), Price: market.FormatPrice(market.TierPrice(o, t)), WouldSet: market.FormatPrice(want)}
		if follows && len(o.Gpus) > 0 && len(o.Tiers) > 0 {
			comparable := market.ComparablePricesFrom(snap, o.Gpus[0].Model, t, o.Currency, n.id, now, n.pricesFrom)
			ts.Comparable, ts.WouldSet = len(comparable), market.FormatPrice(pol.Target(comparable, want))
		}
		st.Tiers = append(st.Tiers, ts)
	}
	st.Since = p.sellingSince(ctx, now).UTC()
	var gpus uint32
	for _, g := range o.Gpus {
		gpus += g.Count
	}
	recs, _ := n.leaseStore().All(ctx)
	var spans []market.LeasedSpan
	var receipts []*pb.Receipt
	for _, r := range recs {
		if r.Role != records.Provider {
			continue
		}
		l, _, err := r.Open()
		if err != nil {
			continue
		}
		end := min(now.UnixMilli(), l.StartUnixMs+int64(l.DurationSeconds)*1000)
		if r.EndMs > 0 {
			end = min(end, r.EndMs)
		}
		if rc, _, err := r.OpenReceipt(); err == nil && rc != nil {
			end = min(end, rc.EndUnixMs)
			receipts = append(receipts, rc)
		}
		spans = append(spans, market.LeasedSpan{StartMs: l.StartUnixMs, EndMs: end, GPUs: l.GpuCount})
	}
	peaks := map[int]bool{}
	for i, w := range cfg.Weekly {
		if span, err := config.ParseWeekly(w); err == nil {
			peaks[i] = span.Peak
		}
	}
	for i, f := range market.FillRates(o.Weekly, gpus, spans, st.Since, now) {
		v := api.WindowFillStatus{Window: "always", Peak: peaks[i], OfferedHours: f.OfferedHours, LeasedHours: f.LeasedHours, Rate: f.Rate()}
		if f.Window != nil {
			v.Window = formatWeekly(f.Window)
		}
		st.Fill = append(st.Fill, v)
	}
	var total uint64
	for _, d := range market.DailyEarnings(receipts, cfg.Currency, st.Since, now) {
		st.EarnedPerDay = append(st.EarnedPerDay, api.DayEarnings{Day: d.Day.Format(time.DateOnly), Amount: market.FormatPrice(d.Micros)})
		total += d.Micros
	}
	days := max(now.Sub(st.Since).Hours()/24, 1)
	st.EarnedDaily = market.FormatPrice(uint64(float64(total)/days + 0.5))
	return st
}
