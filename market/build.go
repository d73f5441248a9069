package market

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Builders of the wire messages a node makes. Each takes what varies
// (issuer, ID, times) from its caller, so it stays pure: the node brings
// the clock and the randomness.

// Bid timing.
const (
	// BidTTL is how long a bid lives.
	BidTTL = 10 * time.Minute
	// StartSlack is the least time a bid leaves providers to start: a
	// bid that asks for "now" may start this long after it was made.
	StartSlack = 10 * time.Minute
)

// BidSpec is what a renter asks for, in wire units: a bid without its
// header and start window.
type BidSpec struct {
	Models               []string
	FormFactor           string
	NVLink               bool
	MinVRAMBytes         uint64
	MinComputeCapability uint32
	Count                uint32
	MinPerProvider       uint32
	// HostMin is the least host a lease needs, held to the share of the
	// host its GPUs get (Offer.host_whole); nil for none.
	HostMin         *pb.HostSpec
	Tier            pb.Tier
	Currency        string
	MaxPriceMicros  uint64
	DurationSeconds uint64
	// StartWithin is how long after now the lease may start; less than
	// StartSlack counts as StartSlack.
	StartWithin    time.Duration
	RegionsAllowed []string
	RegionsDenied  []string
	MaxRTTMillis   uint32
	// MinReliabilityPermille is the least reliability, 0 to 1000.
	MinReliabilityPermille uint32
	PreemptionOK           bool
	WorkloadClass          string
	Image                  string
	// Settlement is what the bid pays with; nil: the ledger.
	Settlement *pb.Settlement
	// Datasets are those the job reads.
	Datasets []*pb.DatasetNeed
}

// NewBid makes bid id of issuer for spec at now, valid for BidTTL, and
// checks it with l. Bronze bids accept preemption whatever spec says.
func NewBid(issuer peer.ID, id string, spec BidSpec, now time.Time, l Limits) (*pb.Bid, error) {
	b := &pb.Bid{
		Header: &pb.Header{Version: Version, Issuer: []byte(issuer), Id: id, Seq: 1, Swarm: l.Swarm,
			CreatedUnixMs: now.UnixMilli(), ExpiresUnixMs: now.Add(BidTTL).UnixMilli()},
		Gpu: &pb.GPURequirement{Models: spec.Models, FormFactor: spec.FormFactor, Nvlink: spec.NVLink, MinVramBytes: spec.MinVRAMBytes, MinComputeCapability: spec.MinComputeCapability,
			Count: spec.Count, MinPerProvider: spec.MinPerProvider},
		HostMin: spec.HostMin,
		Tier:    spec.Tier, Currency: spec.Currency, MaxPriceMicros: spec.MaxPriceMicros,
		DurationSeconds:        spec.DurationSeconds,
		EarliestStartUnixMs:    now.UnixMilli(),
		LatestStartUnixMs:      now.Add(max(spec.StartWithin, StartSlack)).UnixMilli(),
		RegionsAllowed:         spec.RegionsAllowed,
		RegionsDenied:          spec.RegionsDenied,
		MaxRttMs:               spec.MaxRTTMillis,
		MinReliabilityPermille: spec.MinReliabilityPermille,
		PreemptionOk:           spec.PreemptionOK || spec.Tier == pb.Tier_TIER_BRONZE,
		WorkloadClass:          spec.WorkloadClass,
		Image:                  spec.Image,
		Settlement:             spec.Settlement,
		Datasets:               spec.Datasets,
	}
	if err := l.ValidateBid(b, now); err != nil {
		return nil, err
	}
	return b, nil
}

// NewQuote is provider issuer's answer to bid b: the terms of candidate
// c, its own offer matched against b, valid for ttl from now. A quote's ID
// derives from the bid's, at a fixed length, so a provider makes one
// quote per bid whatever the bid's ID.
func NewQuote(issuer peer.ID, b *pb.Bid, c Candidate, now time.Time, ttl time.Duration) *pb.Quote {
	sum := sha256.Sum256([]byte(b.Header.Id))
	return &pb.Quote{
		Header: &pb.Header{Version: Version, Issuer: []byte(issuer), Id: "q-" + hex.EncodeToString(sum[:12]), Seq: b.Header.Seq, Swarm: b.Header.Swarm,
			CreatedUnixMs: now.UnixMilli(), ExpiresUnixMs: now.Add(ttl).UnixMilli()},
		BidIssuer: b.Header.Issuer, BidId: b.Header.Id, BidSeq: b.Header.Seq,
		OfferId: c.OfferID(), Tier: b.Tier, Currency: c.Offer().GetCurrency(), PriceMicros: c.PriceMicros,
		Gpus: c.GPUs, StartUnixMs: c.Start.UnixMilli(), DurationSeconds: b.DurationSeconds,
	}
}

// QuoteAnswers says whether q answers bid b on b's terms: nil if it does,
// else the first term it breaks.
func QuoteAnswers(q *pb.Quote, b *pb.Bid) error {
	switch {
	case q.BidId != b.Header.Id || q.BidSeq != b.Header.Seq || !slices.Equal(q.BidIssuer, b.Header.Issuer):
		return invalid("bid", "the quote answers bid %q seq %d, not %q seq %d", clip(q.BidId), q.BidSeq, clip(b.Header.Id), b.Header.Seq)
	case q.Tier != b.Tier:
		return invalid("tier", "%s; the bid asks %s", TierName(q.Tier), TierName(b.Tier))
	case q.Currency != b.Currency:
		return invalid("currency", "%q; the bid pays %q", clip(q.Currency), b.Currency)
	case q.PriceMicros > b.MaxPriceMicros:
		return invalid("price_micros", "%s above the bid's cap %s", money(q.PriceMicros), money(b.MaxPriceMicros))
	case q.DurationSeconds != b.DurationSeconds:
		return invalid("duration_seconds", "%d; the bid asks %d", q.DurationSeconds, b.DurationSeconds)
	case q.Gpus < 1 || q.Gpus > b.Gpu.GetCount():
		return invalid("gpus", "%d; the bid asks 1 to %d", q.Gpus, b.Gpu.GetCount())
	case q.StartUnixMs < b.EarliestStartUnixMs || b.LatestStartUnixMs != 0 && q.StartUnixMs > b.LatestStartUnixMs:
		return invalid("start_unix_ms", "%s outside the bid's %s to %s", ms(q.StartUnixMs), ms(b.EarliestStartUnixMs), ms(b.LatestStartUnixMs))
	}
	return nil
}

// LeaseTerms are what a renter proposes to one candidate of its bid.
type LeaseTerms struct {
	ID     string
	Renter peer.ID
	Bid    *pb.Bid
	// Candidate is the offer matched against Bid: provider, offer, GPUs
	// and price come from it.
	Candidate Candidate
	Start     time.Time
	// Command and Env of the workload; its image and class are the bid's.
	Command, Env []string
	// Inputs are the tars the provider unpacks before the job starts;
	// Outputs the paths it packs once the job's command ended.
	Inputs  []*pb.Input
	Outputs []string
	// Datasets the provider stages and mounts read-only before the job
	// starts.
	Datasets []*pb.DatasetMount
	// Payment is the channel that pays the lease, where its bid pays by
	// one (evm); nil otherwise.
	Payment *pb.LeasePayment
}

// NewLease makes the lease t describes, created at now, and checks it
// with l.
func NewLease(t LeaseTerms, now time.Time, l Limits) (*pb.Lease, error) {
	b, c := t.Bid, t.Candidate
	o := c.Offer()
	m := &pb.Lease{
		Version: Version, Id: t.ID, Renter: []byte(t.Renter), Provider: []byte(c.Issuer),
		OfferId: o.GetHeader().GetId(), OfferSeq: o.GetHeader().GetSeq(), Bid: b, Tier: b.GetTier(), GpuCount: c.GPUs,
		StartUnixMs: t.Start.UnixMilli(), DurationSeconds: b.GetDurationSeconds(), Currency: b.GetCurrency(), PriceMicros: c.PriceMicros,
		Workload:      &pb.Workload{Image: b.GetImage(), Command: t.Command, Env: t.Env, WorkloadClass: b.GetWorkloadClass(), Inputs: t.Inputs, Outputs: t.Outputs, Datasets: t.Datasets},
		CreatedUnixMs: now.UnixMilli(), Payment: t.Payment,
	}
	if err := l.ValidateLease(m); err != nil {
		return nil, err
	}
	return m, nil
}

// ReceiptTerms say how a lease ended, as the side that signs the receipt
// saw it.
type ReceiptTerms struct {
	Outcome pb.Outcome // OUTCOME_UNSPECIFIED counts as failed
	End     time.Time
	// The telemetry chain verified: beats, root and the last beat's time
	// (zero with none). The amount is metered to that beat.
	Beats    uint64
	Root     []byte
	LastBeat time.Time
	ExitCode int32 // -1 when the job never exited by itself
	Note     string
	// ExtensionHash names the co-signed extension that set the term (the
	// lease given to NewReceipt is then Extended's); nil for none.
	ExtensionHash []byte
	// Voucher names, for a lease paid by a channel, the voucher that pays
	// the receipt's amount, unsigned (node/pay's Terms.Named): both sides
	// compute it from the lease and the beats they agree on.
	Voucher *pb.Voucher
}

// NewReceipt is the receipt of lease l, co-signed as ls, ending on terms
// t. Both sides build theirs with it, so a renter checks the provider's
// by comparing it with its own.
func NewReceipt(l *pb.Lease, ls *pb.CoSigned, t ReceiptTerms) *pb.Receipt {
	seconds, amount := Meter(l, t.LastBeat)
	outcome := t.Outcome
	if outcome == pb.Outcome_OUTCOME_UNSPECIFIED {
		outcome = pb.Outcome_OUTCOME_FAILED
	}
	return &pb.Receipt{
		Version: Version, LeaseId: l.Id, LeaseHash: BodyHash(ls), Renter: l.Renter, Provider: l.Provider,
		Outcome: outcome, StartUnixMs: l.StartUnixMs, EndUnixMs: t.End.UnixMilli(), MeteredSeconds: seconds,
		Beats: t.Beats, TelemetryRoot: t.Root, Currency: l.Currency, AmountMicros: amount, ExitCode: t.ExitCode, Note: t.Note,
		Swarm: l.Bid.GetHeader().GetSwarm(), ExtensionHash: t.ExtensionHash, Voucher: t.Voucher,
	}
}
