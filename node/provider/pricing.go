package provider

import (
	"context"
	"encoding/binary"
	"time"

	ds "github.com/ipfs/go-datastore"
)

// sinceKey holds when this node began selling: fill rates and earnings
// count from then, a week back at most.
var sinceKey = ds.NewKey("/provider/since")

// fillPeriod is how far back a provider's fill rate and earnings reach.
const fillPeriod = 7 * 24 * time.Hour

// markSince stores now as the start of selling, unless one is stored.
func (p *Provider) markSince(ctx context.Context, now time.Time) {
	if ok, err := p.store.Has(ctx, sinceKey); err == nil && !ok {
		var buf [8]byte
		binary.BigEndian.PutUint64(buf[:], uint64(now.UnixMilli()))
		if err := p.store.Put(ctx, sinceKey, buf[:]); err != nil {
			p.log.Warn("start of selling not stored", "err", err)
		}
	}
}

// SellingSince is the start of the fill period at now.
func (p *Provider) SellingSince(ctx context.Context, now time.Time) time.Time {
	from := now.Add(-fillPeriod)
	if b, err := p.store.Get(ctx, sinceKey); err == nil && len(b) == 8 {
		if began := time.UnixMilli(int64(binary.BigEndian.Uint64(b))); began.After(from) {
			from = began
		}
	}
	return from
}
