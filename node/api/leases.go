package api

import "time"

// RentRequest is what `idlegrid rent` asks a light client to do: a bid's
// needs plus the workload to run.
type RentRequest struct {
	BidRequest
	// Command is the workload's argv; empty runs the image's default.
	Command []string `json:"command,omitempty"`
	// Env is the workload's environment, KEY=VALUE.
	Env []string `json:"env,omitempty"`
	// Candidates is how many providers to try at most, best first
	// (default: as many as TryMillis allows).
	Candidates int `json:"candidates,omitempty"`
	// GatherMillis bounds the wait for fitting offers (default 15 s).
	GatherMillis int `json:"gather_ms,omitempty"`
	// TryMillis bounds the time spent locating, attesting and proposing
	// to candidates before rent gives up (default 60 s).
	TryMillis int `json:"try_ms,omitempty"`
	// SkipAttest leases without challenging the provider's attestation.
	SkipAttest bool `json:"skip_attest,omitempty"`
	// MaxPairRTTMillis, when set, lets the rental take its GPUs from
	// several providers (a micro-pool) whose every pair's estimated RTT
	// is under it: a lease each, all or nothing, all starting together.
	MaxPairRTTMillis int `json:"max_pair_rtt_ms,omitempty"`
	// ImageFromDocker, instead of Image, names an image of the renter's
	// own Docker engine: it is sent to the provider, without the layers
	// the provider has, and runs by its ID.
	ImageFromDocker string `json:"image_from_docker,omitempty"`
	// Detach returns once the job runs, leaving the lease running with
	// no renter attached ('idlegrid attach' follows it again).
	Detach bool `json:"detach,omitempty"`
	// Uploads are local files or folders the provider puts in the
	// container before the job starts: uploaded before the lease (never
	// billed), checked by SHA-256, resumed where a stream broke off.
	Uploads []Upload `json:"uploads,omitempty"`
	// Downloads are files or folders in /workspace the provider packs
	// once the job's command ended, before the container goes; the
	// renter downloads each after the receipt, checked by SHA-256 and
	// resumed where a stream broke off, into Local.
	Downloads []Download `json:"downloads,omitempty"`
	// Datasets are datasets this node keeps (idlegrid dataset add) for
	// the provider to stage, from this node and the swarm's other
	// holders, and mount read-only in the container.
	Datasets []DatasetMount `json:"datasets,omitempty"`
}

// DatasetMount is a dataset, by its CID, and where the job reads it.
type DatasetMount struct {
	CID  string `json:"cid"`
	Path string `json:"path"`
}

// Download is a path in the container and where it goes here.
type Download struct {
	Path  string `json:"path"`
	Local string `json:"local"`
}

// DownloadView is how one download went.
type DownloadView struct {
	Path  string `json:"path"`
	Local string `json:"local"`
	Bytes int64  `json:"bytes"`
	// Error says why the download failed; empty when it did not.
	Error string `json:"error,omitempty"`
}

// Upload is a local file or folder and where it goes in the container:
// a clean path in /workspace.
type Upload struct {
	Local string `json:"local"`
	Path  string `json:"path"`
}

// Attempt is one provider a renter tried and why it moved on.
type Attempt struct {
	Provider string `json:"provider"`
	Stage    string `json:"stage"` // locate, attest, image, upload or negotiate
	Reason   string `json:"reason"`
	// Code is the provider's refusal code (REJECT_NO_CAPACITY, …) when it
	// refused the lease.
	Code string `json:"code,omitempty"`
}

// RentTimings break a rental's wait down by stage.
type RentTimings struct {
	Discover  time.Duration `json:"discover_ns"`
	Match     time.Duration `json:"match_ns"`
	Attest    time.Duration `json:"attest_ns"`
	Negotiate time.Duration `json:"negotiate_ns"`
	// Pull is the time providers took to make the image present (pulling
	// it when they had not got it), before any lease: never billed.
	Pull time.Duration `json:"pull_ns"`
	// Upload is the time the rental's uploads took, before any lease:
	// never billed.
	Upload time.Duration `json:"upload_ns"`
	// Start is from the lease's acceptance to the job's first output.
	Start time.Duration `json:"start_ns"`
	// FirstOutput is from the start of the rental to the first output.
	FirstOutput time.Duration `json:"first_output_ns"`
}

// RentResult is how a rental went.
type RentResult struct {
	// Lease and Receipt are the rental's; of a pool, rank 0's.
	Lease   LeaseView   `json:"lease"`
	Receipt ReceiptView `json:"receipt"`
	Tried   []Attempt   `json:"tried"`
	Timings RentTimings `json:"timings"`
	// Pool is every member of a micro-pool, by rank; empty otherwise.
	Pool        []PoolMember `json:"pool,omitempty"`
	PoolSummary *PoolSummary `json:"pool_summary,omitempty"`
	// Relayed: the job's output came over a relayed connection (the
	// provider is behind a NAT hole punching could not pass); false: a
	// direct one.
	Relayed bool `json:"relayed"`
	// Detached: the renter left the lease running, its job not ended
	// (rent's Detach, or an attach left): Receipt is empty.
	Detached bool `json:"detached,omitempty"`
	// Downloads are the rental's downloads, in the order asked.
	Downloads []DownloadView `json:"downloads,omitempty"`
}

// PoolMember is one provider's share of a micro-pool.
type PoolMember struct {
	Rank    int         `json:"rank"`
	Lease   LeaseView   `json:"lease"`
	Receipt ReceiptView `json:"receipt"`
}

// PoolSummary totals a micro-pool's receipts.
type PoolSummary struct {
	Providers int    `json:"providers"`
	GPUs      uint32 `json:"gpus"`
	Amount    string `json:"amount"`
	Currency  string `json:"currency"`
}

// LeaseView is one lease as `idlegrid leases` shows it.
type LeaseView struct {
	ID    string `json:"id"`
	Role  string `json:"role"`
	State string `json:"state"`
	// Ended: the state is one a lease ends in.
	Ended    bool      `json:"ended"`
	Renter   string    `json:"renter"`
	Provider string    `json:"provider"`
	Tier     string    `json:"tier"`
	GPUs     uint32    `json:"gpus"`
	Assigned []string  `json:"assigned_gpus,omitempty"`
	Price    string    `json:"price"`
	Currency string    `json:"currency"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	Image    string    `json:"image"`
	Beats    uint64    `json:"beats"`
	// Metered and Cost are what the lease's receipt says: once it ended,
	// the receipt's own; before, what a receipt would meter now, from
	// the start to the last verified beat (market.Meter), so the cost so
	// far never runs ahead of what the beats will bill.
	Metered uint64 `json:"metered_seconds"`
	Cost    string `json:"cost"`
	Note    string `json:"note,omitempty"`
	// SettleBy is, for a settling lease (its provider was gone), until
	// when the renter tries to settle it with its provider; after that
	// the renter's own receipt stands.
	SettleBy time.Time `json:"settle_by,omitzero"`
	// Voucher is, for a lease paid by a channel, the latest voucher this
	// node holds of it: the last its renter signed (renter), or took
	// (provider).
	Voucher *VoucherView `json:"voucher,omitempty"`
}

// ExtensionNote is the body of POST /v1/leases/{id}/extension: a lease's
// extension both parties signed (protobuf CoSigned).
type ExtensionNote struct {
	Extension []byte `json:"extension"`
}

// ReceiptView is one receipt as `idlegrid receipts` shows it.
type ReceiptView struct {
	LeaseID        string    `json:"lease_id"`
	Outcome        string    `json:"outcome"`
	Renter         string    `json:"renter"`
	Provider       string    `json:"provider"`
	Start          time.Time `json:"start"`
	End            time.Time `json:"end"`
	MeteredSeconds uint64    `json:"metered_seconds"`
	Beats          uint64    `json:"beats"`
	TelemetryRoot  string    `json:"telemetry_root"`
	Amount         string    `json:"amount"`
	Currency       string    `json:"currency"`
	ExitCode       int32     `json:"exit_code"`
	Note           string    `json:"note,omitempty"`
	// Extension is the hex SHA-256 of the co-signed extension that set
	// the lease's term ('idlegrid extend'); empty for none.
	Extension string `json:"extension,omitempty"`
	// SignedBy lists the parties whose signatures verify: a receipt both
	// signed is settled; one signed by one side is that side's claim.
	SignedBy []string `json:"signed_by"`
	// Voucher is, for a lease paid by a channel, the voucher that pays
	// the receipt; nil for one that is not.
	Voucher *VoucherView `json:"voucher,omitempty"`
}

// RedeemResult is what a provider's redemption did: the channels whose
// latest voucher it redeemed, from its wallet.
type RedeemResult struct {
	Wallet   string `json:"wallet"`
	Redeemed int    `json:"redeemed"`
}

// VoucherView is the voucher a receipt names: on channel (hex), what the
// channel owes the provider in all (token base units, decimal) as of
// nonce.
type VoucherView struct {
	Channel string `json:"channel"`
	Amount  string `json:"amount_units"`
	Nonce   uint64 `json:"nonce"`
}

// LedgerEntry is the local ledger's balance with one counterparty.
type LedgerEntry struct {
	Peer     string `json:"peer"`
	Currency string `json:"currency"`
	// Balance is positive when the peer owes this node.
	Balance  string `json:"balance"`
	Receipts int    `json:"receipts"`
}
