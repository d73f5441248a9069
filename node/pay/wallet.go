package pay

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/clock"
	"github.com/idlegrid/idlegrid/node/records"
	"google.golang.org/protobuf/proto"
)

// Wallet is a node's side of channel payments (settlement evm): its key,
// the way it pays or is paid, and the chain. A renter's wallet finds or
// opens the channel a lease is paid by and signs its vouchers; a
// provider's admits leases on their channels and redeems its vouchers
// (Redeem).
type Wallet struct {
	Key *ecdsa.PrivateKey
	// Settlement is how this node pays or is paid: kind evm, its chain,
	// contract, token and units, and the wallet's address as payee.
	Settlement *pb.Settlement
	Chain      Chain
	// Deposit is what a renter funds a new channel with, in token units.
	Deposit *big.Int
	// RedeemAt is the share of a channel's deposit (percent) a provider's
	// vouchers may reach before it redeems them; RedeemEvery how often it
	// redeems whatever it holds.
	RedeemAt    int
	RedeemEvery time.Duration
	Clock       clock.Clock
	Log         *slog.Logger

	// opening serialises a renter's channel openings: two leases to one
	// provider at once open one channel.
	opening sync.Mutex
	nudge   chan struct{}
	once    sync.Once
}

// Address is the wallet's address.
func (w *Wallet) Address() common.Address { return crypto.PubkeyToAddress(w.Key.PublicKey) }

// Pays is how a renter's bids say they pay: the wallet's settlement
// without a payee.
func (w *Wallet) Pays() *pb.Settlement {
	s := proto.Clone(w.Settlement).(*pb.Settlement)
	s.Payee = nil
	return s
}

// Tip is the latest voucher of channel among a node's lease records, nil
// with none: where the channel's next lease begins.
func Tip(recs []*records.Lease, channel common.Hash) *pb.Voucher { return tips(recs, "")[channel] }

// tips are the latest vouchers among a node's lease records of role
// (empty: either), by channel.
func tips(recs []*records.Lease, role string) map[common.Hash]*pb.Voucher {
	latest := map[common.Hash]*pb.Voucher{}
	for _, r := range recs {
		if len(r.Voucher) == 0 || role != "" && r.Role != role {
			continue
		}
		v := new(pb.Voucher)
		if proto.Unmarshal(r.Voucher, v) != nil || len(v.Channel) != ChannelLen {
			continue
		}
		id := common.BytesToHash(v.Channel)
		if t := latest[id]; t == nil || v.Nonce > t.Nonce {
			latest[id] = v
		}
	}
	return latest
}

// Near says whether amount has reached RedeemAt percent of deposit (0:
// never): a voucher to redeem before the renter's close can outrun it.
func (w *Wallet) Near(amount, deposit *big.Int) bool {
	return w.RedeemAt > 0 && new(big.Int).Mul(amount, big.NewInt(100)).Cmp(new(big.Int).Mul(deposit, big.NewInt(int64(w.RedeemAt)))) >= 0
}

// Payment is the payment of a renter's lease to the provider whose
// offer takes s (with its payee): the live channel to it, opened with
// Deposit where there is none (one transaction, then none per lease),
// and where it stands: what was redeemed on chain, or the latest voucher
// this renter signed on it (tip reads its records), whichever is later.
func (w *Wallet) Payment(ctx context.Context, s *pb.Settlement, tip func(common.Hash) *pb.Voucher) (*pb.LeasePayment, error) {
	payee := common.BytesToAddress(s.GetPayee())
	w.opening.Lock()
	id, ok, err := w.Chain.LiveChannel(ctx, w.Address(), payee)
	if err == nil && !ok {
		w.logger().Info("opening a payment channel", "provider", payee, "deposit", w.Deposit)
		id, err = w.Chain.Open(ctx, payee, w.Deposit)
	}
	w.opening.Unlock()
	if err != nil {
		return nil, fmt.Errorf("payment channel to %s: %w", payee, err)
	}
	ch, err := w.Chain.Channel(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("payment channel %s: %w", id, err)
	}
	if !ch.ClosesAt.IsZero() || ch.Finished {
		return nil, fmt.Errorf("payment channel %s to %s is closing: withdraw it once its challenge period ends ('idlegrid channel close'), then rent again", id, payee)
	}
	base, nonce := ch.Paid, ch.Nonce
	if t := tip(id); t != nil && t.Nonce >= nonce {
		base, nonce = new(big.Int).SetBytes(t.Amount), t.Nonce
	}
	if base.Cmp(ch.Deposit) >= 0 {
		return nil, fmt.Errorf("payment channel %s to %s is spent (%s of %s paid): top it up with 'idlegrid channel topup %s AMOUNT'", id, payee, base, ch.Deposit, id)
	}
	return &pb.LeasePayment{Settlement: s, Channel: id.Bytes(), Payer: w.Address().Bytes(), Base: base.Bytes(), Nonce: nonce}, nil
}

// Admit checks a lease proposed to this provider that is paid by a
// channel, against the chain and tip, the latest voucher this provider
// holds on that channel: the channel is the renter's to this provider in
// this wallet's token, open, and the lease begins where the channel
// stands, no earlier (a base behind what was paid would let the renter
// pay twice with one amount).
func (w *Wallet) Admit(ctx context.Context, l *pb.Lease, tip *pb.Voucher) error {
	t, err := TermsOf(l)
	if err != nil {
		return err
	}
	s := l.GetPayment().GetSettlement()
	if !market.SameSettlement(s, w.Settlement) || t.Payee != w.Address() {
		return fmt.Errorf("payment.settlement: %s to 0x%x; this provider is paid by %s to %s", market.ShowSettlement(s), s.GetPayee(), market.ShowSettlement(w.Settlement), w.Address())
	}
	ch, err := w.Chain.Channel(ctx, t.Channel)
	switch {
	case err != nil:
		return fmt.Errorf("payment.channel %s: %w", t.Channel, err)
	case ch.Renter != t.Payer || ch.Provider != t.Payee || ch.Token != common.BytesToAddress(w.Settlement.GetToken()):
		return fmt.Errorf("payment.channel %s: from %s to %s in token %s, not the lease's payer %s to this provider", t.Channel, ch.Renter, ch.Provider, ch.Token, t.Payer)
	case ch.Finished || !ch.ClosesAt.IsZero():
		return fmt.Errorf("payment.channel %s is closing", t.Channel)
	case t.Base.Cmp(ch.Paid) < 0 || t.Nonce < ch.Nonce:
		return fmt.Errorf("payment.base %s at nonce %d: behind the channel's %s paid at nonce %d", t.Base, t.Nonce, ch.Paid, ch.Nonce)
	case tip != nil && (t.Nonce < tip.Nonce || t.Base.Cmp(new(big.Int).SetBytes(tip.Amount)) < 0):
		return fmt.Errorf("payment.base %s at nonce %d: behind the last voucher this provider holds on the channel, %s at nonce %d", t.Base, t.Nonce, new(big.Int).SetBytes(tip.Amount), tip.Nonce)
	case t.Base.Cmp(ch.Deposit) >= 0:
		return fmt.Errorf("payment.channel %s is spent: %s of its deposit %s owed before this lease", t.Channel, t.Base, ch.Deposit)
	}
	return nil
}

// TabOf is the tab of a lease paid by a channel, with last the latest
// voucher taken (protobuf Voucher; empty: none), its deposit unknown.
func TabOf(l *pb.Lease, last []byte) (*Tab, error) {
	t, err := TermsOf(l)
	if err != nil {
		return nil, err
	}
	tab := &Tab{Terms: t}
	if len(last) > 0 {
		v := new(pb.Voucher)
		if err := proto.Unmarshal(last, v); err != nil {
			return nil, fmt.Errorf("lease %s: stored voucher: %w", l.GetId(), err)
		}
		tab.Last = v
	}
	return tab, nil
}

// Nudge asks the redeemer to look at the channels now: a voucher taken
// passed RedeemAt of its channel's deposit.
func (w *Wallet) Nudge() {
	w.once.Do(w.init)
	select {
	case w.nudge <- struct{}{}:
	default:
	}
}

func (w *Wallet) init() { w.nudge = make(chan struct{}, 1) }

func (w *Wallet) logger() *slog.Logger {
	if w.Log == nil {
		return slog.Default()
	}
	return w.Log
}

// redeemCheck is how often the redeemer reads its channels' state: a
// renter's close is answered within it (the contract's challenge period
// is longer).
const redeemCheck = time.Minute

// Redeem runs a provider's redemptions until ctx ends: every RedeemEvery
// the latest voucher of each channel (recs lists the lease records that
// hold them) that pays more than the chain has is redeemed; sooner, at
// once, for a channel whose renter started to close it, or whose voucher
// reached RedeemAt of its deposit (Nudge). The vouchers are in the lease
// records, so a restart loses none; the schedule starts again with it.
func (w *Wallet) Redeem(ctx context.Context, recs func(context.Context) ([]*records.Lease, error)) {
	w.once.Do(w.init)
	clk := clock.Or(w.Clock)
	last := clk.Now()
	every := w.RedeemEvery
	if every <= 0 {
		every = 24 * time.Hour
	}
	tick := clk.NewTicker(min(redeemCheck, every))
	defer tick.Stop()
	for {
		all := false
		select {
		case <-ctx.Done():
			return
		case <-w.nudge:
		case <-tick.C():
			if clk.Since(last) >= every {
				all, last = true, clk.Now()
			}
		}
		rs, err := recs(ctx)
		if err != nil {
			w.logger().Warn("vouchers not read for redemption", "err", err)
			continue
		}
		w.RedeemDue(ctx, rs, all)
	}
}

// RedeemDue redeems the channels' latest vouchers among recs that are
// due: all of them that pay more than the chain has (all), or those whose
// renter started a close or that reached RedeemAt of the deposit. It
// returns how many it redeemed.
func (w *Wallet) RedeemDue(ctx context.Context, recs []*records.Lease, all bool) int {
	n := 0
	for id, v := range tips(recs, records.Provider) {
		ch, err := w.Chain.Channel(ctx, id)
		if err != nil {
			w.logger().Warn("channel not read", "channel", id, "err", err)
			continue
		}
		amount := new(big.Int).SetBytes(v.Amount)
		if ch.Finished || ch.Provider != w.Address() || v.Nonce <= ch.Nonce || amount.Cmp(ch.Paid) <= 0 {
			continue
		}
		closing := !ch.ClosesAt.IsZero()
		if !all && !closing && !w.Near(amount, ch.Deposit) {
			continue
		}
		if err := w.Chain.Redeem(ctx, Voucher{Channel: id, Amount: amount, Nonce: v.Nonce}, v.Signature); err != nil {
			w.logger().Warn("voucher not redeemed", "channel", id, "nonce", v.Nonce, "err", err)
			continue
		}
		n++
		w.logger().Info("voucher redeemed", "channel", id, "amount", amount, "nonce", v.Nonce, "closing", closing)
	}
	return n
}

// ErrNoWallet: a lease paid by a channel on a node without settlement
// evm.
var ErrNoWallet = errors.New("this node pays and is paid by no channel (settlement kind is not evm)")
