// Package records keeps what a node remembers of its leases, on either
// side: each lease's record (its co-signed terms, state, GPUs, the
// telemetry chain so far), its receipt, and the ledger the receipts
// settle in. A record, its receipt and its settlement are written in one
// datastore batch, so a killed node restarts with all of them or none.
//
// records imports market's wire types, node/clock and go-datastore; it
// must never import node, p2p or cmd.
package records

import (
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
)

// Lease states. A lease is accepted (countersigned, not yet running),
// active (its job runs), settling (on the renter, whose provider was
// gone: it holds a receipt of its own and settles with the provider if
// it is back in time), or ended in one of the terminal states.
const (
	Accepted  = "accepted"
	Active    = "active"
	Settling  = "settling"
	Completed = "completed"
	Preempted = "preempted"
	Failed    = "failed"
	Cancelled = "cancelled"
)

// Ended reports whether a lease in state s is over.
func Ended(s string) bool {
	return s == Completed || s == Preempted || s == Failed || s == Cancelled
}

// StateOf maps a receipt's outcome to the lease state it ends in.
func StateOf(o pb.Outcome) string {
	switch o {
	case pb.Outcome_OUTCOME_COMPLETED:
		return Completed
	case pb.Outcome_OUTCOME_PREEMPTED:
		return Preempted
	case pb.Outcome_OUTCOME_CANCELLED:
		return Cancelled
	}
	return Failed
}

// Roles a node plays in a lease.
const (
	Provider = "provider"
	Renter   = "renter"
)

// Lease is what a node keeps of one lease, on either side. It is written
// whole, in one batch with the receipt and the ledger entry it settles.
type Lease struct {
	ID    string `json:"id"`
	Role  string `json:"role"` // Provider or Renter
	State string `json:"state"`
	// Lease is the co-signed lease (protobuf CoSigned).
	Lease []byte `json:"lease"`
	// GPUs are the calendar slots (GPU UUIDs) the provider assigned.
	GPUs []string `json:"gpus,omitempty"`
	Job  string   `json:"job,omitempty"` // executor's job ID
	// Telemetry chain so far: beats signed (provider) or accepted
	// (renter), the last beat's hash and time.
	Beats    uint64 `json:"beats"`
	Root     []byte `json:"root,omitempty"`
	LastBeat int64  `json:"last_beat_ms,omitempty"`
	// LastEnv is the provider's last signed beat, replayed to a renter
	// that attaches after a restart, so it has verified what the receipt
	// counts even when it missed beats while the provider was down.
	LastEnv []byte `json:"last_beat_env,omitempty"`
	// End is when the lease must be off the GPUs (moved earlier by a
	// preemption or a cancellation).
	EndMs int64 `json:"end_ms"`
	// A stop ahead with notice (a preemption): its outcome and note, so a
	// restarted provider ends the lease the way it was told.
	StopOutcome int32  `json:"stop_outcome,omitempty"`
	StopNote    string `json:"stop_note,omitempty"`
	Receipt     []byte `json:"receipt,omitempty"` // co-signed receipt, once ended
	Note        string `json:"note,omitempty"`
	Updated     int64  `json:"updated_ms"`
	// Output is, on the provider, how far the job's stdout and stderr
	// had come when the record was written: a restarted provider follows
	// the job's output from there.
	Output Offsets `json:"output,omitzero"`
	// Extension is the lease's last co-signed extension (protobuf
	// CoSigned), which sets its term; EndMs follows it.
	Extension []byte `json:"extension,omitempty"`
	// Detached: the renter left the job on purpose (rent --detach); the
	// provider runs it on without a renter attached.
	Detached bool `json:"detached,omitempty"`
	// Downloads are, on the renter, where the lease's outputs go once
	// its job ended: taken by the follow that sees the receipt (rent, or
	// idlegrid attach after a detach).
	Downloads []Download `json:"downloads,omitempty"`
	// Undelivered is, on the provider of an ended lease, the output its
	// renter may not have got when the job ended (the last MiB, written
	// to it or not: a renter may drop a stream unread), kept for the
	// renter to attach for until it countersigns the receipt.
	Undelivered *Output `json:"undelivered,omitempty"`
	// Provisional is, on the renter of a settling lease, the receipt it
	// made when its provider was gone (protobuf Receipt, unsigned): the
	// lease's end if the provider is not back by SettleByMs to settle it.
	Provisional []byte `json:"provisional,omitempty"`
	SettleByMs  int64  `json:"settle_by_ms,omitempty"`
	// Voucher is, for a lease paid by a channel, the latest voucher
	// (protobuf Voucher, signed): the last one the renter signed, or the
	// provider took. Written in the batch of the lease's progress, so a
	// restart loses none, and the next lease on the channel begins where
	// it ends.
	Voucher []byte `json:"voucher,omitempty"`
}

// Download is one of a lease's outputs, by its path in the container,
// and where it goes on the renter's machine.
type Download struct {
	Path  string `json:"path"`
	Local string `json:"local"`
}

// Offsets are places in a job's output: bytes of its stdout and of its
// stderr, each counted from the job's first byte.
type Offsets struct {
	Stdout int64 `json:"stdout"`
	Stderr int64 `json:"stderr"`
}

// Output is a part of a job's output: the bytes of its stdout and of its
// stderr from the offsets At on.
type Output struct {
	At     Offsets `json:"at"`
	Stdout []byte  `json:"stdout,omitempty"`
	Stderr []byte  `json:"stderr,omitempty"`
}

// Open decodes the record's co-signed lease and verifies its signatures.
func (r *Lease) Open() (*pb.Lease, *pb.CoSigned, error) {
	cs := new(pb.CoSigned)
	if err := unmarshal(r.Lease, cs); err != nil {
		return nil, nil, err
	}
	l, err := market.OpenCoSigned[*pb.Lease](cs)
	return l, cs, err
}

// OpenReceipt decodes the record's co-signed receipt; nil with none.
func (r *Lease) OpenReceipt() (*pb.Receipt, *pb.CoSigned, error) {
	if len(r.Receipt) == 0 {
		return nil, nil, nil
	}
	cs := new(pb.CoSigned)
	if err := unmarshal(r.Receipt, cs); err != nil {
		return nil, nil, err
	}
	rc, err := market.OpenCoSigned[*pb.Receipt](cs)
	return rc, cs, err
}

// End records the end of the lease: its state, note and end from the
// receipt rc, signed as rcs.
func (r *Lease) End(rc *pb.Receipt, rcs *pb.CoSigned) {
	r.State, r.Note, r.EndMs = StateOf(rc.Outcome), rc.Note, rc.EndUnixMs
	r.Receipt = marshal(rcs)
	r.Provisional, r.SettleByMs = nil, 0
}
