package node

import (
	"context"
	"encoding/binary"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/offer"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/node/views"
	ds "github.com/ipfs/go-datastore"
)

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
		want := offer.ConfiguredPrice(cfg, t)
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
			v.Window = views.FormatWeekly(f.Window)
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
