package offer

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/libp2p/go-libp2p/core/peer"
)

// ProviderOfferID is the ID of the one offer a provider node publishes.
const ProviderOfferID = "gpus"

// Build turns the [provider] section into the offer it describes,
// issued by issuer at now with sequence number seq. The config must be
// valid.
func Build(p config.ProviderConfig, issuer peer.ID, seq uint64, now time.Time) (*pb.Offer, error) {
	price, err := market.ParsePrice(p.Price)
	if err != nil {
		return nil, fmt.Errorf("provider.price: %w", err)
	}
	o := &pb.Offer{
		Header: &pb.Header{
			Version:       market.Version,
			Issuer:        []byte(issuer),
			Id:            ProviderOfferID,
			Seq:           seq,
			CreatedUnixMs: now.UnixMilli(),
			ExpiresUnixMs: now.Add(p.OfferTTL.Std()).UnixMilli(),
		},
		Host: &pb.HostSpec{
			CpuCores:          uint32(p.Host.CPUCores),
			RamBytes:          uint64(p.Host.RAMGiB) << 30,
			DiskBytes:         uint64(p.Host.DiskGiB) << 30,
			UpBitsPerSecond:   uint64(p.Host.UpMbps) * 1_000_000,
			DownBitsPerSecond: uint64(p.Host.DownMbps) * 1_000_000,
		},
		HostWhole:            p.Host.Share == "whole",
		GpuStep:              uint32(max(p.GPUStep, 1)),
		GpusWhole:            p.SellWhole,
		Region:               &pb.Region{Country: p.Country, Label: p.RegionLabel},
		Currency:             p.Currency,
		PriceMicros:          price,
		MinDurationSeconds:   uint64(p.MinDuration.Std().Seconds()),
		MaxDurationSeconds:   uint64(p.MaxDuration.Std().Seconds()),
		BronzeNoticeSeconds:  uint64(p.BronzeNotice.Std().Seconds()),
		MaxStartAheadSeconds: uint64(p.MaxStartAhead.Std().Seconds()),
		WorkloadClasses:      slices.Clone(p.WorkloadClasses),
		ImageAllow:           slices.Clone(p.ImageAllow),
		ImageDeny:            slices.Clone(p.ImageDeny),
		PowerCapWatts:        uint32(p.PowerCapWatts),
		StaticAddress:        p.Host.StaticAddress,
		OpenPorts:            uint32(p.Host.OpenPorts),
		ThermalCapCelsius:    uint32(p.ThermalCapC),
	}
	for _, g := range p.GPUs {
		cc, err := config.ParseComputeCapability(g.ComputeCapability)
		if err != nil {
			return nil, err
		}
		cuda, err := config.ParseCUDAVersion(g.CUDAVersion)
		if err != nil {
			return nil, err
		}
		o.Gpus = append(o.Gpus, &pb.GPUGroup{Model: g.Model, Count: uint32(g.Count), VramBytes: uint64(g.VRAMGiB) << 30, ComputeCapability: cc, Interconnect: g.Interconnect,
			CudaVersion: cuda, DriverVersion: g.DriverVersion, PcieGeneration: uint32(g.PCIeGeneration), PcieLanes: uint32(g.PCIeLanes),
			MemoryBandwidthGbps: uint32(g.MemoryBandwidthGBps), Fp32Gflops: uint32(g.FP32GFLOPS)})
	}
	for _, name := range p.Tiers {
		t, err := market.TierFromName(name)
		if err != nil {
			return nil, err
		}
		o.Tiers = append(o.Tiers, t)
	}
	for _, tp := range []struct {
		tier pb.Tier
		s    string
	}{{pb.Tier_TIER_GOLD, p.GoldPrice}, {pb.Tier_TIER_BRONZE, p.BronzePrice}} {
		if tp.s == "" {
			continue
		}
		v, err := market.ParsePrice(tp.s)
		if err != nil {
			return nil, err
		}
		o.TierPrices = append(o.TierPrices, &pb.TierPrice{Tier: tp.tier, MicrosPerGpuHour: v})
	}
	for _, w := range p.Weekly {
		span, err := config.ParseWeekly(w)
		if err != nil {
			return nil, err
		}
		o.Weekly = append(o.Weekly, &pb.WeeklyWindow{StartMinute: span.Start, EndMinute: span.End, FloorMicros: span.FloorMicros})
	}
	Price(o, p, nil, nil, issuer, now, nil) // no market known: its peak windows, prices within bounds
	return o, nil
}

// sellable turns an inventory into the GPU groups this provider may sell
// now: the GPUs provider.share names (all when it is empty) that run no
// compute process, are at most busy_utilization busy, and are below the
// thermal cap. why says, per GPU left out, the reason.
func Sellable(p config.ProviderConfig, inv attest.Inventory) (groups []config.GPUConfig, why []string) {
	type key struct {
		model, cc string
		vram      int
	}
	counts := map[key]int{}
	// What NVML reads of a model's speed is the least of its GPUs': a
	// group is one model, and a lease of it may get any of them.
	type speed struct{ gen, lanes, bw, flops int }
	speeds := map[key]speed{}
	for _, g := range inv.GPUs {
		switch {
		case len(p.Share) > 0 && !slices.Contains(p.Share, g.UUID) && !slices.Contains(p.Share, fmt.Sprint(g.Index)):
			continue
		case len(g.Processes) > 0:
			why = append(why, fmt.Sprintf("GPU %d busy: %d processes", g.Index, len(g.Processes)))
		case g.UtilizationPct > p.BusyUtilization:
			why = append(why, fmt.Sprintf("GPU %d busy: %d%% utilised", g.Index, g.UtilizationPct))
		case p.ThermalCapC > 0 && g.TemperatureC >= p.ThermalCapC:
			why = append(why, fmt.Sprintf("GPU %d at %d°C, cap %d°C", g.Index, g.TemperatureC, p.ThermalCapC))
		default:
			model := attest.ModelOf(g.Name, g.PCIDeviceID)
			k := key{model, g.ComputeCapability, int(attest.VRAMOf(model, g.MemoryBytes) >> 30)}
			s := speed{g.PCIeMaxGeneration, g.PCIeMaxWidth, g.MemoryBandwidthGBps, g.FP32GFLOPS}
			if old, ok := speeds[k]; ok {
				s = speed{min(old.gen, s.gen), min(old.lanes, s.lanes), min(old.bw, s.bw), min(old.flops, s.flops)}
			}
			counts[k]++
			speeds[k] = s
		}
	}
	for k, n := range counts {
		s := speeds[k]
		groups = append(groups, config.GPUConfig{Model: k.model, Count: n, VRAMGiB: k.vram, ComputeCapability: k.cc, Interconnect: "",
			CUDAVersion: inv.CUDAVersion, DriverVersion: inv.DriverVersion, PCIeGeneration: s.gen, PCIeLanes: s.lanes, MemoryBandwidthGBps: s.bw, FP32GFLOPS: s.flops})
	}
	slices.SortFunc(groups, func(a, b config.GPUConfig) int {
		return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.VRAMGiB, b.VRAMGiB), cmp.Compare(a.ComputeCapability, b.ComputeCapability))
	})
	return groups, why
}

// configuredPrice is what [provider] sets for tier t: gold_price or
// bronze_price where set, else price (validated).
func ConfiguredPrice(p config.ProviderConfig, t pb.Tier) uint64 {
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

// Price sets o's prices by the pricing policy of cfg. With the
// market policy each tier o sells moves from what current (the offer as
// last published; nil: none) half way to the policy's target, by at most
// the policy's MaxStep; the target comes from the comparable offers of
// snap (nil: none) whose issuers from accepts (nil: none; see
// Node.pricesFrom), the configured price standing where there are none;
// the base price is silver's where silver is sold, else the first tier's.
// Peak windows then ask at least the base price times the peak factor.
// Leases agreed before keep theirs.
func Price(o *pb.Offer, cfg config.ProviderConfig, snap *market.Snapshot, current *pb.Offer, self peer.ID, now time.Time, from func(peer.ID) bool) Pricing {
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
