package node

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	ds "github.com/ipfs/go-datastore"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/gpus"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/fault"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/node/renter"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/idlegrid/idlegrid/node/views"
)

// histogramBins is how many bins the market's price histogram has.
const histogramBins = 40

// Lease shows one of this node's leases.
func (n *Node) Lease(ctx context.Context, id string) (api.LeaseView, error) {
	rec, err := n.leaseRecord(ctx, id)
	if err != nil {
		return api.LeaseView{}, err
	}
	return views.Lease(rec), nil
}

// leaseRecord reads lease id's record; one not held is a BadRequest.
func (n *Node) leaseRecord(ctx context.Context, id string) (*records.Lease, error) {
	rec, err := n.leaseStore().Get(ctx, id)
	if errors.Is(err, ds.ErrNotFound) {
		return nil, fault.NotFoundf("no lease %q here", id)
	}
	return rec, err
}

// LeaseLogs names the files this renter keeps lease id's output in.
func (n *Node) LeaseLogs(ctx context.Context, id string) (api.LeaseLogs, error) {
	rec, err := n.leaseRecord(ctx, id)
	if err != nil {
		return api.LeaseLogs{}, err
	}
	if rec.Role != records.Renter {
		return api.LeaseLogs{}, fault.Invalidf("lease %s is sold by this node: its output goes to the renter", id)
	}
	dir := filepath.Join(n.repo.Path, repo.LogsDir)
	return api.LeaseLogs{Stdout: renter.LogFile(dir, id, "stdout"), Stderr: renter.LogFile(dir, id, "stderr")}, nil
}

// marketCache keeps the last market summary: every dashboard open, and
// each of its reloads when the book changed, asks for the same one, which
// costs a walk of the whole book. It is kept for one book snapshot and
// at most marketFresh (the RTTs and scores in it move on their own).
type marketCache struct {
	mu   sync.Mutex
	snap *market.Snapshot
	key  string
	at   time.Time
	sum  api.MarketSummary
}

// marketFresh bounds how long a cached summary is served.
const marketFresh = 2 * time.Second

// Market sums up the offers q selects: per model, a price histogram and
// the cheapest limit of them (10 when limit is 0).
func (n *Node) Market(q api.OfferQuery, limit int) (api.MarketSummary, error) {
	snap, now := n.market.Snapshot(), n.clock.Now()
	key := fmt.Sprintf("%+v/%d", q, limit)
	c := &n.marketCache
	c.mu.Lock()
	if c.snap == snap && c.key == key && now.Sub(c.at) < marketFresh {
		sum := c.sum
		c.mu.Unlock()
		return sum, nil
	}
	c.mu.Unlock()
	sum, err := n.market1(snap, q, limit)
	if err == nil {
		c.mu.Lock()
		c.snap, c.key, c.at, c.sum = snap, key, now, sum
		c.mu.Unlock()
	}
	return sum, err
}

func (n *Node) market1(snap *market.Snapshot, q api.OfferQuery, limit int) (api.MarketSummary, error) {
	f, err := views.OfferFilter(q)
	if err != nil {
		return api.MarketSummary{}, err
	}
	type hit struct {
		o     *pb.Offer
		price uint64
	}
	var hits []hit
	snap.EachOffer(f, func(o *pb.Offer, price uint64) { hits = append(hits, hit{o, price}) })
	sum := api.MarketSummary{Offers: len(hits), Models: []api.ModelSummary{}, Cheapest: []api.OfferView{}}
	currencies := map[string]int{}
	for _, h := range hits {
		currencies[h.o.Currency]++
	}
	for c, k := range currencies {
		if k > currencies[sum.Currency] || k == currencies[sum.Currency] && c < sum.Currency {
			sum.Currency = c
		}
	}
	type model struct {
		prices    []uint64
		gpus      int
		providers map[string]bool
	}
	models := map[string]*model{}
	canonical := map[string]string{} // the catalog's name of each spelling met
	var all []uint64
	cat := gpus.Default()
	for _, h := range hits {
		o := h.o
		if o.Currency != sum.Currency || len(o.Gpus) == 0 {
			continue
		}
		all = append(all, h.price)
		name, ok := canonical[o.Gpus[0].Model]
		if !ok {
			name = cat.Canonical(o.Gpus[0].Model)
			canonical[o.Gpus[0].Model] = name
		}
		m := models[name]
		if m == nil {
			m = &model{providers: map[string]bool{}}
			models[name] = m
		}
		m.prices = append(m.prices, h.price)
		for _, g := range o.Gpus {
			m.gpus += int(g.Count)
		}
		m.providers[string(o.Header.GetIssuer())] = true
	}
	sum.Priced = len(all)
	for name, m := range models {
		slices.Sort(m.prices)
		sum.Models = append(sum.Models, api.ModelSummary{Model: name, Offers: len(m.prices), GPUs: m.gpus, Providers: len(m.providers),
			Min: market.FormatPrice(m.prices[0]), Median: market.FormatPrice(market.Percentile(m.prices, 50)), P90: market.FormatPrice(market.Percentile(m.prices, 90))})
	}
	slices.SortFunc(sum.Models, func(a, b api.ModelSummary) int { return cmp.Or(b.Offers-a.Offers, cmp.Compare(a.Model, b.Model)) })
	sum.Histogram = priceHistogram(all)
	if limit == 0 {
		limit = 10
	}
	// The cheapest limit, as FindOffers orders them (price, then issuer
	// and ID), without sorting every offer: the least price of the rest
	// bounds which can still be among them.
	byPrice := func(a, b hit) int {
		return cmp.Or(cmp.Compare(a.price, b.price), bytes.Compare(a.o.Header.GetIssuer(), b.o.Header.GetIssuer()), strings.Compare(a.o.Header.GetId(), b.o.Header.GetId()))
	}
	var cheapest []hit
	for _, h := range hits {
		if len(cheapest) == limit && byPrice(h, cheapest[limit-1]) >= 0 {
			continue
		}
		i, _ := slices.BinarySearchFunc(cheapest, h, byPrice)
		cheapest = slices.Insert(cheapest, i, h)
		if len(cheapest) > limit {
			cheapest = cheapest[:limit]
		}
	}
	scores, rtts := n.reputation.Scores(), n.rtts()
	for _, h := range cheapest {
		v := views.Offer(h.o, scores)
		v.RTTMillis, v.RTTSource = views.RTT(market.RTTOf(rtts, h.o))
		sum.Cheapest = append(sum.Cheapest, v)
	}
	return sum, nil
}

// priceHistogram bins prices (micros) into histogramBins equal bins from
// the least to the 99th percentile, the last bin taking the rest, so one
// absurd price cannot squash the chart. A bin is a cent at least; prices
// that span fewer cents than there are bins sit in the middle.
func priceHistogram(prices []uint64) api.PriceHistogram {
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

// GPUs reads a provider's GPUs now, with the lease each is assigned to,
// and its offer as published.
func (n *Node) GPUs(ctx context.Context) (api.GPUsStatus, error) {
	st := api.GPUsStatus{GPUs: []api.GPUReading{}, ReadAt: n.clock.Now().UTC()}
	if n.provider == nil {
		return st, fault.Unavailablef("this node sells no GPUs (provider.enabled is false)")
	}
	if o, ok := n.provider.OwnOffer(); ok {
		v := views.Offer(o, n.reputation.Scores())
		st.Offer = &v
	}
	src := n.provider.Source()
	if src == nil {
		st.Source, st.Unavailable = "static", "provider.gpu_source is static: the GPUs are as provider.gpus lists them, with no readings"
		return st, nil
	}
	inv, err := src.Inventory(ctx)
	if err != nil {
		return st, err
	}
	st.Source, st.Driver, st.Unavailable = inv.Source, inv.DriverVersion, inv.Unavailable
	leased := map[string]string{}
	if recs, err := n.leaseStore().All(ctx); err == nil {
		for _, r := range recs {
			if r.Role == records.Provider && !records.Ended(r.State) {
				for _, uuid := range r.GPUs {
					leased[uuid] = r.ID
				}
			}
		}
	}
	for _, g := range inv.GPUs {
		st.GPUs = append(st.GPUs, gpuReading(g, leased[g.UUID]))
	}
	return st, nil
}

func gpuReading(g attest.GPU, lease string) api.GPUReading {
	return api.GPUReading{Index: g.Index, UUID: g.UUID, Name: g.Name, Model: attest.ModelOf(g.Name, g.PCIDeviceID),
		MemoryMiB: g.MemoryBytes >> 20, MemoryUsedMiB: g.MemoryUsedBytes >> 20, UtilizationPct: g.UtilizationPct,
		TemperatureC: g.TemperatureC, PowerWatts: g.PowerDrawWatts, PowerLimit: g.PowerLimitWatts, Lease: lease}
}
