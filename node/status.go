package node

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/idlegrid/idlegrid/node/offer"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/node/views"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// Status reports the node's identity, addresses and peer counts for the API.
func (n *Node) Status() api.Status {
	s := api.Status{
		PeerID:    n.id.String(),
		Listen:    strs(n.host.Network().ListenAddresses()),
		Announced: strs(n.host.Addrs()),
		Observed:  strs(n.observedAddrs()),
		Swarm:     n.swarm.Name,
		SwarmID:   n.swarm.ID(),
		Private:   n.swarm.Private(),
		Profile:   n.cfg.Profile,
		Mode:      n.Mode(),
		Version:   n.opts.Version,
		StartedAt: n.started.UTC(),
		UptimeSec: n.clock.Since(n.started).Seconds(),
		Peers:     len(n.host.Network().Peers()),
		Topics:    make(map[string]api.TopicStatus),
	}
	if n.reach != nil {
		r := n.reach.Now()
		s.Reachability = api.Reachability{State: r.State, How: reachHow[r.How]}
	}
	if n.disc != nil {
		s.RoutingTable = n.disc.DHT().RoutingTable().Size()
	}
	if n.market != nil {
		snap := n.market.Snapshot()
		s.Offers, s.Bids = snap.Len(), snap.NumBids()
	}
	s.Provider = n.provider != nil
	if n.gossip != nil {
		for _, kind := range p2p.TopicKinds {
			s.Topics[n.swarm.Topic(kind)] = api.TopicStatus{
				Peers: len(n.gossip.Topic(kind).ListPeers()),
				Mesh:  len(n.gossip.Mesh(kind)),
			}
		}
	}
	if n.store != nil {
		s.Leases = n.leaseSummary(context.Background())
		s.Pricing = n.pricingStatus(context.Background())
		if n.place != nil {
			s.Location = n.place.Name
		}
		st := n.coords.Stats()
		s.Coordinate = api.CoordinateStatus{Error: n.coords.Error(), Samples: st.Samples, Outliers: st.Outliers, Peers: st.Peers, Vector: millis(n.coords.Own().Vec)}
	}
	return s
}

// relayOnly reports whether peers reach this node only through relays.
func (n *Node) relayOnly() bool {
	return n.reach != nil && n.reach.Now().How == p2p.ReachRelayed
}

// leaseSummary counts the leases, the GPUs they hold now of those offered
// and those booked ahead, and the ledger's earnings and spending.
func (n *Node) leaseSummary(ctx context.Context) api.LeaseSummary {
	sum := api.LeaseSummary{Active: []api.LeaseView{}, Earned: []string{}, Spent: []string{}}
	views, err := n.Leases(ctx)
	if err != nil {
		return sum
	}
	now := n.clock.Now()
	for _, v := range views {
		if LeaseEnded(v.State) {
			sum.Ended++
			continue
		}
		sum.Active = append(sum.Active, v)
		if v.Role != records.Provider {
			continue
		}
		// A lease holds its GPUs over [start, end): one that starts later
		// is booked, not leased, and leases never overlap on a GPU.
		switch {
		case v.Start.After(now):
			sum.GPUsBooked += int(v.GPUs)
		case v.End.After(now):
			sum.GPUsLeased += int(v.GPUs)
		}
	}
	if n.leases != nil {
		for _, c := range n.leases.Slots {
			sum.GPUsOffered += c
		}
	}
	if sum.GPUsOffered > 0 {
		sum.Utilisation = float64(sum.GPUsLeased) / float64(sum.GPUsOffered)
	}
	earned, spent := map[string]int64{}, map[string]int64{}
	ledger, _ := n.leaseStore().Ledger(ctx)
	for _, e := range ledger {
		if e.Balance > 0 {
			earned[e.Currency] += e.Balance
		} else {
			spent[e.Currency] -= e.Balance
		}
	}
	for cur, v := range earned {
		sum.Earned = append(sum.Earned, market.FormatPrice(uint64(v))+" "+cur)
	}
	for cur, v := range spent {
		sum.Spent = append(sum.Spent, market.FormatPrice(uint64(v))+" "+cur)
	}
	return sum
}

// observedAddrs are the addresses the host advertises that none of its
// interfaces has: what other peers saw it dial from.
func (n *Node) observedAddrs() []ma.Multiaddr {
	local, _ := n.host.Network().InterfaceListenAddresses()
	var out []ma.Multiaddr
	for _, a := range n.host.Addrs() {
		if !slices.ContainsFunc(local, a.Equal) {
			out = append(out, a)
		}
	}
	return out
}

// Peers lists the connected peers with what the peerstore knows of them.
func (n *Node) Peers() []api.Peer {
	ps := n.host.Peerstore()
	ids := n.host.Network().Peers()
	slices.Sort(ids)
	out := make([]api.Peer, 0, len(ids))
	scores := n.reputation.Scores()
	for _, id := range ids {
		p := api.Peer{ID: id.String(), Addrs: []string{}, Protocols: []string{}}
		conns := n.host.Network().ConnsToPeer(id)
		p.Relayed = len(conns) > 0
		for _, c := range conns {
			p.Addrs = append(p.Addrs, c.RemoteMultiaddr().String())
			p.Direction = c.Stat().Direction.String()
			p.Relayed = p.Relayed && c.Stat().Limited
		}
		sc := scores.Of(id)
		p.Reliability, p.Basis = sc.Reliability, views.Basis(sc)
		d, _ := n.rtts().RTT(id)
		p.RTTMillis = float64(d) / float64(time.Millisecond)
		p.CoordError = -1
		if c, ok := n.coords.Of(id); ok {
			p.CoordError, p.Vector = c.Error, millis(c.Vec)
			if d, err := n.coords.Estimate(c); err == nil {
				p.EstimatedMillis = float64(d) / float64(time.Millisecond)
			}
		}
		p.OutlierCoord = n.coords.Outlier(id)
		p.Near = n.isNear(id)
		if av, err := ps.Get(id, "AgentVersion"); err == nil {
			p.Agent, _ = av.(string)
		}
		if protos, err := ps.GetProtocols(id); err == nil {
			for _, proto := range protos {
				p.Protocols = append(p.Protocols, string(proto))
			}
			slices.Sort(p.Protocols)
		}
		p.ConnectedSince = n.conns.since(id).UTC()
		out = append(out, p)
	}
	return out
}

// millis is a coordinate's vector, from seconds to milliseconds.
func millis(vec []float64) []float64 {
	out := make([]float64, len(vec))
	for i, v := range vec {
		out[i] = v * 1000
	}
	return out
}

// connTracker remembers when each peer's first live connection opened.
// Its mutex guards the map alone, written from libp2p's notifications
// and read by Peers: a leaf cache, held for no I/O, that needs no owner.
type connTracker struct {
	mu    sync.Mutex
	first map[peer.ID]time.Time
}

func newConnTracker(h host.Host) *connTracker {
	t := &connTracker{first: make(map[peer.ID]time.Time)}
	h.Network().Notify(&network.NotifyBundle{
		ConnectedF: func(_ network.Network, c network.Conn) {
			t.mu.Lock()
			defer t.mu.Unlock()
			if _, ok := t.first[c.RemotePeer()]; !ok {
				t.first[c.RemotePeer()] = c.Stat().Opened
			}
		},
		DisconnectedF: func(net network.Network, c network.Conn) {
			if net.Connectedness(c.RemotePeer()) == network.Connected {
				return
			}
			t.mu.Lock()
			defer t.mu.Unlock()
			delete(t.first, c.RemotePeer())
		},
	})
	return t
}

func (t *connTracker) since(id peer.ID) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.first[id]
}

// reachHow is the API's word for each of the host's ways to be reached.
var reachHow = map[string]string{p2p.ReachDirect: api.ReachDirect, p2p.ReachRelayed: api.ReachRelayed, p2p.ReachNone: api.ReachNone}

// pricingStatus says how the provider prices, what its policy would set
// now from the book, and how it sold over the fill period: per window,
// GPU-hours leased of those offered, and its earnings per day.
func (n *Node) pricingStatus(ctx context.Context) *api.PricingStatus {
	p := n.provider
	if p == nil {
		return nil
	}
	cfg, now := p.Config(), n.clock.Now()
	pol, follows, _ := cfg.Pricing.MarketPolicy()
	st := &api.PricingStatus{Policy: config.PolicyFixed, Currency: cfg.Currency, Tiers: []api.TierPriceStatus{}, Fill: []api.WindowFillStatus{}, EarnedPerDay: []api.DayEarnings{}}
	if follows {
		st.Policy, st.Rule = config.PolicyMarket, pol.String()
	}
	o, ok := p.OwnOffer()
	if !ok {
		return st
	}
	snap := n.market.Snapshot()
	for _, t := range o.Tiers {
		want := offer.ConfiguredPrice(cfg, t)
		ts := api.TierPriceStatus{Tier: market.TierName(t), Price: market.FormatPrice(market.TierPrice(o, t)), WouldSet: market.FormatPrice(want)}
		if follows && len(o.Gpus) > 0 && len(o.Tiers) > 0 {
			comparable := market.ComparablePricesFrom(snap, o.Gpus[0].Model, t, o.Currency, n.id, now, n.pricesFrom)
			ts.Comparable, ts.WouldSet = len(comparable), market.FormatPrice(pol.Target(comparable, want))
		}
		st.Tiers = append(st.Tiers, ts)
	}
	st.Since = p.SellingSince(ctx, now).UTC()
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
