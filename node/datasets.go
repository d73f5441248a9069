package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"time"

	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/data"
	"github.com/idlegrid/idlegrid/node/fault"
	"github.com/idlegrid/idlegrid/node/lease"
	"github.com/idlegrid/idlegrid/node/renter"
	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// datasetAPI answers api.Records' dataset methods from a store of
// datasets (node/data): a node's once it has opened its datastore, or a
// repository's with no daemon running (Records).
type datasetAPI struct {
	data *data.Store
	// exchange announces the datasets added (nil: none runs).
	exchange *data.Exchange
}

func (a datasetAPI) store() (*data.Store, error) {
	if a.data == nil {
		return nil, fault.Unavailablef("the node's datastore is not open")
	}
	return a.data, nil
}

// AddDataset imports the file or folder at req.Path, an absolute path of
// this machine.
func (a datasetAPI) AddDataset(ctx context.Context, req api.DatasetAdd) (api.DatasetView, error) {
	s, err := a.store()
	if err != nil {
		return api.DatasetView{}, err
	}
	if !filepath.IsAbs(req.Path) {
		return api.DatasetView{}, fault.Fieldf("path", req.Path, "an absolute path of a file or folder on the node's machine")
	}
	add := s.Add
	if req.Encrypt {
		add = s.AddEncrypted
	}
	d, err := add(ctx, req.Path, req.Pin)
	if err != nil {
		return api.DatasetView{}, datasetFault(err)
	}
	if a.exchange != nil {
		c := cid.MustParse(d.CID)
		go a.exchange.Announce(context.WithoutCancel(ctx), c) //nolint:errcheck // the next announcement tries again
	}
	return datasetView(d), nil
}

// Datasets lists the datasets kept, least recently used first.
func (a datasetAPI) Datasets(ctx context.Context) ([]api.DatasetView, error) {
	s, err := a.store()
	if err != nil {
		return nil, err
	}
	ds, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.DatasetView, 0, len(ds))
	for _, d := range ds {
		out = append(out, datasetView(d))
	}
	return out, nil
}

// PinDataset pins or unpins the dataset named by its CID.
func (a datasetAPI) PinDataset(ctx context.Context, id string, pin bool) (api.DatasetView, error) {
	s, c, err := a.named(id)
	if err != nil {
		return api.DatasetView{}, err
	}
	d, err := s.Pin(ctx, c, pin)
	if err != nil {
		return api.DatasetView{}, datasetFault(err)
	}
	return datasetView(d), nil
}

// RemoveDataset removes the dataset named by its CID, and returns it.
func (a datasetAPI) RemoveDataset(ctx context.Context, id string) (api.DatasetView, error) {
	s, c, err := a.named(id)
	if err != nil {
		return api.DatasetView{}, err
	}
	d, err := s.Remove(ctx, c)
	if err != nil {
		return api.DatasetView{}, datasetFault(err)
	}
	return datasetView(d), nil
}

// named is the store and the CID id names.
func (a datasetAPI) named(id string) (*data.Store, cid.Cid, error) {
	s, err := a.store()
	if err != nil {
		return nil, cid.Undef, err
	}
	c, err := cid.Decode(id)
	if err != nil {
		return nil, cid.Undef, fault.Fieldf("cid", id, "a dataset's CID, as idlegrid dataset ls prints it (bafy…)")
	}
	return s, c, nil
}

// datasetFault gives err of the dataset store its kind: the request's
// (a path that is no dataset, a dataset not kept, one in use) or, of no
// kind, the node's own.
func datasetFault(err error) error {
	switch {
	case errors.Is(err, data.ErrNotFound):
		return fault.Mark(fault.ErrNotFound, err)
	case errors.Is(err, data.ErrInUse):
		return fault.Mark(fault.ErrConflict, err)
	case errors.Is(err, data.ErrTooBig), errors.Is(err, data.ErrOnlyFiles), errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission):
		return fault.Invalid(err)
	}
	return err
}

func datasetView(d data.Dataset) api.DatasetView {
	return api.DatasetView{
		CID: d.CID, Name: d.Name, Bytes: d.Bytes, Blocks: d.Blocks, Pinned: d.Pinned,
		Added: time.UnixMilli(d.Added).UTC(), Used: time.UnixMilli(d.Used).UTC(), Encrypted: d.Encrypted,
	}
}

// leaseDatasets stages leases' datasets (lease.Datasets): fetched by the
// exchange from the renter and the swarm's holders, kept in the store.
type leaseDatasets struct {
	s *data.Store
	x *data.Exchange
	// holders are the providers whose offers in this node's book say
	// they keep a dataset.
	holders func(cid string) []peer.ID
	key     crypto.PrivKey // opens the keys sealed to this node
}

// Check refuses datasets whose bytes together pass the cache's bound.
func (d leaseDatasets) Check(dss []*pb.DatasetMount) error {
	var total uint64
	for _, m := range dss {
		total += m.Bytes
	}
	if limit := uint64(d.s.Limit()); total > limit {
		return fmt.Errorf("%d bytes of datasets; this provider's datasets.cache_gib holds %d", total, limit)
	}
	return nil
}

// Open is the tar of the encrypted dataset m, decrypted with its key,
// which m carries sealed to this node's identity.
func (d leaseDatasets) Open(ctx context.Context, m *pb.DatasetMount) (io.ReadCloser, error) {
	c, err := cid.Decode(m.Cid)
	if err != nil {
		return nil, err
	}
	key, err := data.OpenKey(m.SealedKey, d.key)
	if err != nil {
		return nil, err
	}
	return d.s.OpenEncrypted(ctx, c, key)
}

// Stage fetches m (kept already: at once), marks it in use and writes it
// at dir for the job; an encrypted one (dir empty) is written nowhere:
// the job's mount reads it through Open.
func (d leaseDatasets) Stage(ctx context.Context, m *pb.DatasetMount, renter peer.ID, dir string, progress func(lease.Staged)) (func(), error) {
	c, err := cid.Decode(m.Cid)
	if err != nil {
		return nil, err
	}
	from := []peer.ID{renter}
	if d.holders != nil {
		from = append(from, d.holders(m.Cid)...)
	}
	var release func()
	for try := 0; ; try++ {
		if _, err := d.x.Fetch(ctx, c, int64(m.Bytes), from, func(p data.Progress) { progress(lease.Staged{Bytes: p.Bytes, Holders: p.Holders}) }); err != nil {
			return nil, err
		}
		// Another fetch may have evicted it meanwhile: once more, then.
		if release, err = d.s.Use(ctx, c); err == nil || !errors.Is(err, data.ErrNotFound) || try > 0 {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	if dir == "" {
		return release, nil
	}
	if err := d.s.Stage(ctx, c, dir); err != nil {
		release()
		return nil, fmt.Errorf("writing it for the job: %w", err)
	}
	return release, nil
}

// Announcing: the swarm's DHT forgets a holder after 48 hours, so a node
// tells it again which datasets it keeps every announceEvery, the
// maxAnnounced most recently used.
const (
	announceEvery = 12 * time.Hour
	announceRetry = time.Minute
	maxAnnounced  = 1024
)

// startExchange runs the exchange of datasets' blocks on the swarm's
// host, its holders found through the swarm's DHT. A full node announces
// the datasets it keeps; a light one serves them only while it runs.
func (n *Node) startExchange(context.Context) (func() error, error) {
	ctx, cancel := context.WithCancel(n.base)
	x := n.datasetAPI.data.StartExchange(ctx, data.ExchangeConfig{
		Host: n.host, Prefix: n.swarm.DHTPrefix(), Holders: n.disc.DHT(),
		Log: n.opts.Logger.With("subsystem", LogP2P),
	})
	n.datasetAPI.exchange = x
	done := make(chan struct{})
	go func() {
		defer close(done)
		if !n.opts.Light {
			n.announceDatasets(ctx, x)
		}
	}()
	return func() error {
		cancel()
		<-done
		return closeWithin(x.Close, exchangeCloseWait, func() {
			n.log.Warn("the exchange did not close in time; the host's close ends its streams", "waited", exchangeCloseWait)
		})
	}, nil
}

// exchangeCloseWait bounds the exchange's close: bitswap's server waits
// for its workers, one of which may be sending a block to a peer that
// reads nothing (its send times out in minutes). The host, closed after
// it, resets that stream.
const exchangeCloseWait = 5 * time.Second

// closeWithin runs close, and returns its error, or nil after wait (then
// telling late) while it goes on.
func closeWithin(close func() error, wait time.Duration, late func()) error {
	done := make(chan error, 1)
	go func() { done <- close() }()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		late()
		return nil
	}
}

// announceDatasets announces the datasets kept, now and every
// announceEvery, until ctx ends.
func (n *Node) announceDatasets(ctx context.Context, x *data.Exchange) {
	for {
		next := announceEvery
		all, err := n.datasetAPI.data.List(ctx)
		if err == nil {
			for i := len(all) - 1; i >= 0 && i >= len(all)-maxAnnounced; i-- {
				if err := x.Announce(ctx, cid.MustParse(all[i].CID)); err != nil && ctx.Err() == nil {
					n.log.Debug("announcing a dataset", "cid", all[i].CID, "err", err)
					next = announceRetry // the DHT knows no peer yet, say
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-n.clock.After(next):
		}
	}
}

// renterDatasets tells the renter of the datasets kept here.
type renterDatasets struct{ s *data.Store }

func (d renterDatasets) Bytes(ctx context.Context, id string) (int64, error) {
	ds, err := d.kept(ctx, id)
	return ds.Bytes, err
}

func (d renterDatasets) Sealed(ctx context.Context, id string, to peer.ID) ([]byte, error) {
	ds, err := d.kept(ctx, id)
	if err != nil || !ds.Encrypted {
		return nil, err
	}
	pub, err := to.ExtractPublicKey()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", data.ErrNotSealable, err)
	}
	return data.SealKey(ds.Key, pub)
}

// kept is the dataset id names, kept here; renter.ErrDatasetNotKept when
// it is not.
func (d renterDatasets) kept(ctx context.Context, id string) (data.Dataset, error) {
	c, err := cid.Decode(id)
	if err != nil {
		return data.Dataset{}, fault.Fieldf("cid", id, "a dataset's CID, as idlegrid dataset ls prints it (bafy…)")
	}
	ds, err := d.s.Get(ctx, c)
	if errors.Is(err, data.ErrNotFound) {
		return data.Dataset{}, renter.ErrDatasetNotKept
	}
	return ds, err
}

// maxBookHolders bounds the holders a staging takes from the book.
const maxBookHolders = 8

// bookHolders are the providers, other than this node, whose offers in
// its book say they keep the dataset c: the swarm's, signed.
func (n *Node) bookHolders(c string) []peer.ID {
	var out []peer.ID
	for _, o := range n.market.Snapshot().Offers() {
		if p := market.Issuer(o); p != n.id && slices.Contains(o.GetDatasets(), c) && !slices.Contains(out, p) {
			out = append(out, p)
			if len(out) == maxBookHolders {
				break
			}
		}
	}
	return out
}

// keptDatasets are the root CIDs of the datasets kept here, the most
// recently used first, as many as an offer lists.
func (n *Node) keptDatasets() []string {
	ctx, cancel := context.WithTimeout(n.base, 5*time.Second)
	defer cancel()
	all, err := n.datasetAPI.data.List(ctx)
	if err != nil {
		return nil
	}
	var out []string
	for i := len(all) - 1; i >= 0 && len(out) < market.MaxOfferDatasets; i-- {
		out = append(out, all[i].CID)
	}
	return out
}
