package renter

import (
	"time"

	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/pay"
	"github.com/idlegrid/idlegrid/p2p"
	"github.com/libp2p/go-libp2p/core/network"
	"google.golang.org/protobuf/proto"
)

// voucherDeadline bounds the write of one voucher to the job stream.
const voucherDeadline = 10 * time.Second

// startPaying readies the payer of a lease paid by a channel; a renter
// with no wallet (its settlement changed since it leased) cannot pay,
// and its provider stops the job within a beat.
func (f *Follow) startPaying() {
	if f.Lease.GetPayment() == nil {
		return
	}
	if f.R.Wallet == nil {
		f.out.say("lease %s is paid by a channel, and this node has no wallet (settlement kind is not evm): its provider stops the job when no voucher comes", f.Lease.Id)
		return
	}
	t, err := pay.TermsOf(f.Lease)
	if err != nil {
		f.out.say("lease %s: payment: %v", f.Lease.Id, err)
		return
	}
	f.payer = &pay.Payer{Terms: t, Key: f.R.Wallet.Key}
}

// metered is the lease's metered time at the last verified beat.
func (f *Follow) metered() time.Duration { return pay.Metered(f.Lease, f.last()) }

// named is the voucher that pays the last verified beat, unsigned, as a
// receipt names it; nil for a lease not paid by a channel.
func (f *Follow) named() *pb.Voucher {
	if f.payer == nil {
		return nil
	}
	return f.payer.Named(f.beats.Beats(), f.metered())
}

// voucher is the signed voucher that pays the last verified beat; nil
// for a lease not paid by a channel (or if it cannot be signed).
func (f *Follow) voucher() *pb.Voucher {
	if f.payer == nil {
		return nil
	}
	v, err := f.payer.Voucher(f.beats.Beats(), f.metered())
	if err != nil {
		f.R.Log.Warn("voucher not signed", "lease", f.Lease.Id, "err", err)
		return nil
	}
	return v
}

// pay pays the beat just verified: its voucher, signed, is kept with the
// lease's progress (the next lease on the channel begins where it ends)
// and sent to the provider on the job stream. The same beat signs the
// same voucher, so a renter that restarts never signs two amounts with
// one nonce.
func (f *Follow) pay(s network.Stream) {
	v := f.voucher()
	if v == nil {
		return
	}
	f.rec.Voucher, _ = proto.Marshal(v)
	f.persist()
	f.sendVoucher(s, v)
}

// payAgain sends, on a stream just attached, the voucher of the last beat
// this renter verified: the provider may not have taken it (it restarted,
// or the stream broke first); one it took already changes nothing.
func (f *Follow) payAgain(s network.Stream) {
	if f.payer == nil || f.beats.Beats() == 0 {
		return
	}
	if v := f.voucher(); v != nil {
		f.sendVoucher(s, v)
	}
}

func (f *Follow) sendVoucher(s network.Stream, v *pb.Voucher) {
	s.SetWriteDeadline(time.Now().Add(voucherDeadline)) // the network's clock
	if err := p2p.WriteMsg(s, &pb.ReceiptReply{Voucher: v}); err != nil {
		f.R.Log.Debug("voucher not sent", "lease", f.Lease.Id, "err", err)
	}
	s.SetWriteDeadline(time.Time{})
}
