package node

import (
	"fmt"
	"slices"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/config"
	"github.com/libp2p/go-libp2p/core/peer"
)

// ProviderOfferID is the ID of the one offer a provider node publishes.
const ProviderOfferID = "gpus"

// BuildOffer turns the [provider] section into the offer it describes,
// issued by issuer at now with sequence number seq. The config must be
// valid.
func BuildOffer(p config.ProviderConfig, issuer peer.ID, seq uint64, now time.Time) (*pb.Offer, error) {
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
		ThermalCapCelsius:    uint32(p.ThermalCapC),
	}
	for _, g := range p.GPUs {
		cc, err := config.ParseComputeCapability(g.ComputeCapability)
		if err != nil {
			return nil, err
		}
		o.Gpus = append(o.Gpus, &pb.GPUGroup{Model: g.Model, Count: uint32(g.Count), VramBytes: uint64(g.VRAMGiB) << 30, ComputeCapability: cc, Interconnect: g.Interconnect})
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
	priceOffer(o, p, nil, nil, issuer, now, nil) // no market known: its peak windows, prices within bounds
	return o, nil
}
