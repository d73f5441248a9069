package market

import (
	"fmt"
	"strings"

	"github.com/idlegrid/idlegrid/market/gpus"
	"github.com/idlegrid/idlegrid/market/pb"
)

// The GPU and host checks: models (through the GPU catalog), memory,
// compute capability, how many GPUs an offer sells one lease, and the
// host's share.

// gpuMasks says which of an offer's GPU groups pass the bid's model,
// VRAM and compute minimums, each mask within the one before (bit i for
// group i; groups past the 64th never qualify, and validation allows 16).
// The model check computes them once per offer; the GPU checks after it
// read them.
type gpuMasks struct{ model, vram, compute uint64 }

func gpuMasksOf(f *offerFacts, req *pb.GPURequirement, accepts []gpus.Accept) gpuMasks {
	var m gpuMasks
	for i := range min(len(f.gpus), 64) {
		g := &f.gpus[i]
		if !gpus.Accepts(accepts, g.model, g.kind, g.vram) ||
			req.GetFormFactor() != "" && !strings.EqualFold(req.GetFormFactor(), g.formFactor) ||
			req.GetNvlink() && !g.nvlink {
			continue
		}
		m.model |= 1 << i
		if g.vram >= req.GetMinVramBytes() {
			m.vram |= 1 << i
			if g.cc >= req.GetMinComputeCapability() {
				m.compute |= 1 << i
			}
		}
	}
	return m
}

// bestGroup returns the largest value of field among the groups in mask.
func bestGroup(f *offerFacts, mask uint64, field func(*gpuFacts) uint64) uint64 {
	var best uint64
	for i := range min(len(f.gpus), 64) {
		if mask&(1<<i) != 0 {
			best = max(best, field(&f.gpus[i]))
		}
	}
	return best
}

func gpuVRAM(g *gpuFacts) uint64 { return g.vram }

func kindModel(p *bidPlan) string {
	return "model not " + wantedModels(p.bid.GetGpu())
}

// wantedModels reads like "H100, A100 (SXM, NVLink)".
func wantedModels(req *pb.GPURequirement) string {
	s := strings.Join(req.GetModels(), ", ")
	var also []string
	if ff := req.GetFormFactor(); ff != "" {
		also = append(also, ff)
	}
	if req.GetNvlink() {
		also = append(also, "NVLink")
	}
	switch {
	case len(also) == 0:
		return s
	case s == "":
		return strings.Join(also, ", ")
	}
	return s + " (" + strings.Join(also, ", ") + ")"
}

func fitsModel(c *evalCtx) bool {
	c.masks = gpuMasksOf(c.f, c.p.bid.GetGpu(), c.p.accepts)
	if c.masks.model == 0 {
		return c.explain && c.failf("models %s; bid wants %s", offerModels(c.offer()), wantedModels(c.p.bid.GetGpu()))
	}
	return true
}

func fitsVRAM(c *evalCtx) bool {
	if c.masks.vram == 0 {
		v := bestGroup(c.f, c.masks.model, gpuVRAM)
		return c.explain && c.failf("vram %s < %s required", gpus.ShowMemory(v), gpus.ShowMemory(c.p.bid.GetGpu().GetMinVramBytes()))
	}
	return true
}

func kindCompute(p *bidPlan) string {
	return "compute capability below " + computeCap(p.bid.GetGpu().GetMinComputeCapability())
}

func fitsCompute(c *evalCtx) bool {
	if c.masks.compute == 0 {
		cc := bestGroup(c.f, c.masks.vram, func(g *gpuFacts) uint64 { return uint64(g.cc) })
		return c.explain && c.failf("compute capability %s < %s required", computeCap(uint32(cc)), computeCap(c.p.bid.GetGpu().GetMinComputeCapability()))
	}
	return true
}

// fitsGPUs counts, per model, the GPUs of fully qualifying groups: one
// provider supplies GPUs of one model only. It records the supply.
func fitsGPUs(c *evalCtx) bool {
	var supply uint32
	gs, ok := c.f.gpus, c.masks.compute
	for i := range min(len(gs), 64) {
		if ok&(1<<i) == 0 {
			continue
		}
		n := gs[i].count
		for j := i + 1; j < min(len(gs), 64); j++ {
			if ok&(1<<j) != 0 && gs[j].model == gs[i].model {
				n += gs[j].count
				ok &^= 1 << j // counted with group i
			}
		}
		if n > supply {
			supply, c.model = n, gs[i].model
		}
	}
	c.supply = supply
	if supply < c.p.need {
		return c.explain && c.failf("%d GPUs < %d per provider required", supply, c.p.need)
	}
	return true
}

func kindBundle(p *bidPlan) string {
	if p.need == p.bid.GetGpu().GetCount() {
		return fmt.Sprintf("not sold in a bundle of %d GPUs", p.need)
	}
	return fmt.Sprintf("not sold in a bundle of %d to %d GPUs", p.need, p.bid.GetGpu().GetCount())
}

// fitsBundle holds the supply to how the offer sells it (whole, or in
// steps) and records how many GPUs a lease takes.
func fitsBundle(c *evalCtx) bool {
	want := c.p.bid.GetGpu().GetCount()
	c.gpus = c.f.take(c.supply, want)
	if c.gpus < c.p.need {
		if c.f.gpusWhole {
			return c.explain && c.failf("sold whole: %d GPUs, bid takes %d to %d", c.f.host.gpus, c.p.need, want)
		}
		return c.explain && c.failf("sold in steps of %d GPUs: %d here, bid takes %d to %d", c.f.gpuStep, c.supply, c.p.need, want)
	}
	return true
}

// take is the most GPUs, at most want, a lease may take of the supply
// of one model: all of the offer's GPUs or none where it sells whole,
// else a multiple of its step.
func (f *offerFacts) take(supply, want uint32) uint32 {
	return take(supply, want, f.gpuStep, f.gpusWhole, f.host.gpus)
}

func take(supply, want, step uint32, whole bool, hostGPUs uint32) uint32 {
	if whole {
		if supply == hostGPUs && supply <= want {
			return supply
		}
		return 0
	}
	step = max(step, 1)
	return min(supply, want) / step * step
}

// Take is the most GPUs, at most want, a lease may take of the supply
// GPUs of one model that o has: every GPU or none where o sells whole
// (Offer.gpus_whole), else a multiple of o's gpu_step.
func Take(o *pb.Offer, supply, want uint32) uint32 {
	f := factsOf(o)
	return f.take(supply, want)
}

// fitsHost holds the bid's host minimums to the part of the host the
// lease's GPUs get (hostFacts.share).
func fitsHost(c *evalCtx) bool {
	want := c.p.bid.GetHostMin()
	have := c.f.host.share(c.gpus)
	short := hostShort(have, want)
	if short == "" || !c.explain { // figures are formatted only for who asks why
		return short == ""
	}
	of := c.f.host.shareOf(have)
	switch short {
	case "cpu cores":
		return c.failf("%d cpu cores%s < %d required", have.cores, of, want.GetCpuCores())
	case "ram":
		return c.failf("ram %s%s < %s required", gib(have.ram), of, gib(want.GetRamBytes()))
	case "disk":
		return c.failf("disk %s%s < %s required", gib(have.disk), of, gib(want.GetDiskBytes()))
	case "uplink":
		return c.failf("uplink %s%s < %s required", mbps(have.up), of, mbps(want.GetUpBitsPerSecond()))
	}
	return c.failf("downlink %s%s < %s required", mbps(have.down), of, mbps(want.GetDownBitsPerSecond()))
}

// hostShort names the first of want's minimums have falls short of, or
// is "" where it has them all.
func hostShort(have hostFacts, want *pb.HostSpec) string {
	switch {
	case have.cores < want.GetCpuCores():
		return "cpu cores"
	case have.ram < want.GetRamBytes():
		return "ram"
	case have.disk < want.GetDiskBytes():
		return "disk"
	case have.up < want.GetUpBitsPerSecond():
		return "uplink"
	case have.down < want.GetDownBitsPerSecond():
		return "downlink"
	}
	return ""
}

// shareOf says, where part is a share of h, of how many GPUs.
func (h *hostFacts) shareOf(part hostFacts) string {
	if part.gpus < h.gpus {
		return fmt.Sprintf(" (the share of %d of %d GPUs)", part.gpus, h.gpus)
	}
	return ""
}

func mbps(bits uint64) string { return fmt.Sprintf("%g Mbit/s", float64(bits)/1e6) }
