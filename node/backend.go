package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"path/filepath"
	"sync"

	"github.com/idlegrid/idlegrid/attest"
	"github.com/idlegrid/idlegrid/market"
	"github.com/idlegrid/idlegrid/market/pb"
	"github.com/idlegrid/idlegrid/node/api"
	"github.com/idlegrid/idlegrid/node/data"
	"github.com/idlegrid/idlegrid/node/fault"
	"github.com/idlegrid/idlegrid/node/offer"
	"github.com/idlegrid/idlegrid/node/records"
	"github.com/idlegrid/idlegrid/node/renter"
	"github.com/idlegrid/idlegrid/node/repo"
	"github.com/idlegrid/idlegrid/node/views"
	"github.com/idlegrid/idlegrid/p2p"
	ds "github.com/ipfs/go-datastore"
	pebbleds "github.com/ipfs/go-ds-pebble"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"
)

// API is this node's api.Backend in this process: the interface that
// api.Client is over HTTP, which the local API serves and a command that
// runs a node in its own process asks (Kubo's CoreAPI over its node). Its
// methods are the node's own, but for those whose Go form takes no
// context or cannot fail.
func (n *Node) API() api.Backend { return inProcess{n} }

// inProcess is the node as an api.Backend.
type inProcess struct{ *Node }

var _ api.Backend = inProcess{}

func (p inProcess) Status(context.Context) (api.Status, error) { return p.Node.Status(), nil }
func (p inProcess) Peers(context.Context) ([]api.Peer, error)  { return p.Node.Peers(), nil }
func (p inProcess) Offers(ctx context.Context, q api.OfferQuery) ([]api.OfferView, error) {
	p.Node.wantShardsOf(ctx, q.GPU)
	return p.Node.Offers(q)
}
func (p inProcess) Market(ctx context.Context, q api.OfferQuery, limit int) (api.MarketSummary, error) {
	p.Node.wantShardsOf(ctx, q.GPU)
	return p.Node.Market(q, limit)
}

// Fetching a shard this node does not follow, before a view of it.
const (
	wantShardPeers = 3
	wantShardWait  = 5 * time.Second
)

// wantShardsOf fetches the offers of the GPU family gpu names, where this
// node does not follow its shard, from up to wantShardPeers peers, and
// waits for them at most wantShardWait or until ctx ends: a view of one
// family's offers on a node that follows others is then whole.
func (n *Node) wantShardsOf(ctx context.Context, gpu string) {
	if gpu == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, wantShardWait)
	defer cancel()
	var wg sync.WaitGroup
	if n.market.Want(ctx, p2p.WantShards(gpu), wantShardPeers, func() (func(), error) { wg.Add(1); return wg.Done, nil }) == 0 {
		return
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
func (p inProcess) StartRental(_ context.Context, req api.RentRequest) (api.RentalView, error) {
	return p.Node.StartRental(req)
}
func (p inProcess) Rentals(context.Context) ([]api.RentalView, error) { return p.Node.Rentals(), nil }
func (p inProcess) Reload(context.Context) (api.ReloadResult, error)  { return p.Node.ReloadFile() }

// Offers lists the book's offers that pass the query's filters.
func (n *Node) Offers(q api.OfferQuery) ([]api.OfferView, error) {
	scores, rtts := n.reputation.Scores(), n.rtts()
	f, err := views.OfferFilter(q, n.market.Snapshot(), scores, rtts)
	if err != nil {
		return nil, err
	}
	out := []api.OfferView{}
	for _, o := range n.market.Snapshot().FindOffers(f) {
		if q.Dataset != "" && !slices.Contains(o.GetDatasets(), q.Dataset) {
			continue
		}
		v := views.Offer(o, scores)
		v.RTTMillis, v.RTTSource = views.RTT(market.RTTOf(rtts, o))
		v.Implausible = rtts.Implausible(market.Issuer(o), o.GetRegion().GetCountry())
		out = append(out, v)
	}
	views.SortOffers(out, q.Sort)
	return out, nil
}

// LeaseEnded reports whether a lease in state s is over.
func LeaseEnded(s string) bool { return records.Ended(s) }

// Leases lists every lease this node took part in, newest last.
func (n *Node) Leases(ctx context.Context) ([]api.LeaseView, error) {
	return views.Leases(ctx, n.leaseStore())
}

// Receipts lists every receipt this node holds.
func (n *Node) Receipts(ctx context.Context) ([]api.ReceiptView, error) {
	return views.Receipts(ctx, n.leaseStore())
}

// Ledger lists the local ledger's balances.
func (n *Node) Ledger(ctx context.Context) ([]api.LedgerEntry, error) {
	return views.Ledger(ctx, n.leaseStore())
}

// Records reads a repository's leases, receipts and ledger while no
// daemon runs: it holds the repository's lock until Close. It is the
// api.Records a daemon serves.
type Records struct {
	datasetAPI
	store  *pebbleds.Datastore
	unlock func()
}

var _ api.Records = (*Records)(nil)

// OpenRecords locks r and opens its datastore.
func OpenRecords(r *repo.Repo) (*Records, error) {
	unlock, err := r.Lock()
	if err != nil {
		return nil, err
	}
	cfg, err := r.Config()
	if err != nil {
		unlock()
		return nil, err
	}
	store, err := pebbleds.NewDatastore(r.DatastorePath())
	if err != nil {
		unlock()
		return nil, fmt.Errorf("open datastore %s: %w", r.DatastorePath(), err)
	}
	return &Records{datasetAPI: datasetAPI{data: data.Open(store, int64(cfg.Datasets.CacheGiB)<<30, nil)}, store: store, unlock: unlock}, nil
}

// Leases lists the repository's leases.
func (r *Records) Leases(ctx context.Context) ([]api.LeaseView, error) {
	return views.Leases(ctx, records.Store{D: r.store})
}

// Receipts lists the repository's receipts.
func (r *Records) Receipts(ctx context.Context) ([]api.ReceiptView, error) {
	return views.Receipts(ctx, records.Store{D: r.store})
}

// Ledger lists the repository's ledger.
func (r *Records) Ledger(ctx context.Context) ([]api.LedgerEntry, error) {
	return views.Ledger(ctx, records.Store{D: r.store})
}

// Close closes the datastore and releases the lock.
func (r *Records) Close() error {
	err := r.store.Close()
	r.unlock()
	return err
}

// NoteExtension records a lease's co-signed extension in its record.
func (n *Node) NoteExtension(ctx context.Context, id string, extension []byte) (api.LeaseView, error) {
	return noteExtension(ctx, n.leaseStore(), id, extension)
}

// NoteExtension records a lease's co-signed extension in its record.
func (r *Records) NoteExtension(ctx context.Context, id string, extension []byte) (api.LeaseView, error) {
	return noteExtension(ctx, records.Store{D: r.store}, id, extension)
}

// noteExtension records extension (protobuf CoSigned) in lease id's
// record in st, if later than the record's, and returns the lease.
func noteExtension(ctx context.Context, st records.Store, id string, extension []byte) (api.LeaseView, error) {
	ext := new(pb.CoSigned)
	if err := proto.Unmarshal(extension, ext); err != nil {
		return api.LeaseView{}, fault.Mark(fault.ErrInvalid, fmt.Errorf("extension: %w", err))
	}
	_, err := st.NoteExtension(ctx, id, ext)
	switch {
	case errors.Is(err, ds.ErrNotFound):
		return api.LeaseView{}, fault.NotFoundf("no lease %q here", id)
	case err != nil:
		return api.LeaseView{}, fault.Mark(fault.ErrInvalid, err)
	}
	rec, err := st.Get(ctx, id)
	if err != nil {
		return api.LeaseView{}, err
	}
	return views.Lease(rec), nil
}

// CancelLease ends a lease early. A renter's lease is cancelled at its
// provider, which stops the job, and CancelLease returns once the receipt
// both sign is this node's (renter.Cancel): the two sides' records agree.
// A provider's lease is stopped here.
func (n *Node) CancelLease(ctx context.Context, id string) (api.LeaseView, error) {
	rec, err := n.leaseStore().Get(ctx, id)
	if errors.Is(err, ds.ErrNotFound) {
		return api.LeaseView{}, fault.NotFoundf("no lease %q here", id)
	}
	if err != nil {
		return api.LeaseView{}, err
	}
	if LeaseEnded(rec.State) {
		return api.LeaseView{}, fault.Conflictf("lease %s already ended: %s", id, rec.State)
	}
	if rec.Role == records.Provider {
		if n.leases == nil || n.leases.StopLease(ctx, id, "cancelled by the provider", "") == nil {
			return api.LeaseView{}, fault.Conflictf("lease %s is not running here", id)
		}
		return views.Lease(rec), nil
	}
	n.knowProvider(ctx, id)
	res, err := n.renter.Cancel(ctx, id)
	if err != nil {
		return api.LeaseView{}, err
	}
	return res.Lease, nil
}

// Attest challenges a peer and verifies its answer: signature, signer,
// nonce, freshness, each GPU's confidential-computing evidence, that its
// offer in this node's book claims only attested GPUs and names, by hash,
// a standing attestation of the same hardware, and what changed since its
// last document.
func (n *Node) Attest(ctx context.Context, req api.AttestRequest) (api.AttestResult, error) {
	id, err := peer.Decode(req.Peer)
	if err != nil {
		return api.AttestResult{}, &fault.Field{Name: "peer", Value: strconv.Quote(req.Peer), Want: "not a peer ID"}
	}
	res := api.AttestResult{Peer: id.String(), GPUs: []api.AttestedGPU{}, Changes: []string{}}
	// A provider known from gossip alone has no address here yet: look it
	// up, as a rental does, before challenging it.
	if err := n.link.Locate(ctx, id); err != nil {
		res.Reason = "not reachable: " + err.Error()
		return res, nil
	}
	c, err := n.challenger.Challenge(ctx, id)
	if err != nil {
		res.Reason = err.Error()
		return res, nil
	}
	res.RTTMillis = float64(c.Rtt) / float64(time.Millisecond)
	if !c.Verified() {
		res.Reason = c.Err.Error()
		return res, nil
	}
	res.Verified, res.Driver, res.CUDA = true, c.Doc.DriverVersion, c.Doc.CudaVersion
	for i, g := range c.Doc.Gpus {
		res.GPUs = append(res.GPUs, api.AttestedGPU{UUID: g.Uuid, Name: g.Name, MemoryGiB: g.MemoryBytes >> 30, ComputeCapability: g.ComputeCapability, CC: c.CC[i]})
	}
	res.CC, res.Offer = c.CCSummary, c.OfferLine()
	res.Changes = append(res.Changes, c.Changes...)
	return res, nil
}

// Reputation is this node's view of peer p (api.Backend). A provider in
// the book it has not asked lately is asked for its receipts first.
func (n *Node) Reputation(ctx context.Context, p string) (api.ReputationView, error) {
	id, err := peer.Decode(p)
	if err != nil {
		return api.ReputationView{}, fault.Invalidf("peer %q: not a peer ID: %v", p, err)
	}
	if _, ok := n.market.Snapshot().Seq(id, offer.ProviderOfferID); ok {
		n.reputation.LearnNow(ctx, id)
	}
	s := n.reputation.Scores()
	sc := s.Of(id)
	v := api.ReputationView{
		Peer: id.String(), Reliability: sc.Reliability, AsRenter: sc.AsRenter, Trust: sc.Trust,
		Receipts: sc.Receipts, Trusted: sc.Trusted, Failures: sc.Failures, Disputes: sc.Disputes,
		Good: sc.Good, Bad: sc.Bad, Basis: views.Basis(sc), Path: []string{}, Seeds: n.seeds.views(),
	}
	for _, q := range s.Path(id) {
		v.Path = append(v.Path, q.String())
	}
	return v, nil
}

// Lease shows one of this node's leases.
func (n *Node) Lease(ctx context.Context, id string) (api.LeaseView, error) {
	rec, err := n.leaseRecord(ctx, id)
	if err != nil {
		return api.LeaseView{}, err
	}
	return views.Lease(rec), nil
}

// leaseRecord reads lease id's record; one not held is a BadRequest.
func (n *Node) leaseRecord(ctx context.Context, id string) (*records.Lease, error) {
	rec, err := n.leaseStore().Get(ctx, id)
	if errors.Is(err, ds.ErrNotFound) {
		return nil, fault.NotFoundf("no lease %q here", id)
	}
	return rec, err
}

// LeaseLogs names the files this renter keeps lease id's output in.
func (n *Node) LeaseLogs(ctx context.Context, id string) (api.LeaseLogs, error) {
	rec, err := n.leaseRecord(ctx, id)
	if err != nil {
		return api.LeaseLogs{}, err
	}
	if rec.Role != records.Renter {
		return api.LeaseLogs{}, fault.Invalidf("lease %s is sold by this node: its output goes to the renter", id)
	}
	dir := filepath.Join(n.repo.Path, repo.LogsDir)
	return api.LeaseLogs{Stdout: renter.LogFile(dir, id, "stdout"), Stderr: renter.LogFile(dir, id, "stderr")}, nil
}

// marketCache keeps the last market summary: every dashboard open, and
// each of its reloads when the book changed, asks for the same one, which
// costs a walk of the whole book. It is kept for one book snapshot and
// at most marketFresh (the RTTs and scores in it move on their own).
type marketCache struct {
	mu   sync.Mutex
	snap *market.Snapshot
	key  string
	at   time.Time
	sum  api.MarketSummary
}

// marketFresh bounds how long a cached summary is served.
const marketFresh = 2 * time.Second

// Market sums up the offers q selects: per model, a price histogram and
// the cheapest limit of them (10 when limit is 0).
func (n *Node) Market(q api.OfferQuery, limit int) (api.MarketSummary, error) {
	snap, now := n.market.Snapshot(), n.clock.Now()
	key := fmt.Sprintf("%+v/%d", q, limit)
	c := &n.marketCache
	c.mu.Lock()
	if c.snap == snap && c.key == key && now.Sub(c.at) < marketFresh {
		sum := c.sum
		c.mu.Unlock()
		return sum, nil
	}
	c.mu.Unlock()
	sum, err := views.Market(snap, q, limit, n.reputation.Scores(), n.rtts())
	if err == nil {
		c.mu.Lock()
		c.snap, c.key, c.at, c.sum = snap, key, now, sum
		c.mu.Unlock()
	}
	return sum, err
}

// GPUs reads a provider's GPUs now, with the lease each is assigned to,
// and its offer as published.
func (n *Node) GPUs(ctx context.Context) (api.GPUsStatus, error) {
	st := api.GPUsStatus{GPUs: []api.GPUReading{}, ReadAt: n.clock.Now().UTC()}
	if n.provider == nil {
		return st, fault.Unavailablef("this node sells no GPUs (provider.enabled is false)")
	}
	if o, ok := n.provider.OwnOffer(); ok {
		v := views.Offer(o, n.reputation.Scores())
		st.Offer = &v
	}
	src := n.provider.Source()
	if src == nil {
		st.Source, st.Unavailable = "static", "provider.gpu_source is static: the GPUs are as provider.gpus lists them, with no readings"
		return st, nil
	}
	inv, err := src.Inventory(ctx)
	if err != nil {
		return st, err
	}
	st.Source, st.Driver, st.Unavailable = inv.Source, inv.DriverVersion, inv.Unavailable
	leased := map[string]string{}
	if recs, err := n.leaseStore().All(ctx); err == nil {
		for _, r := range recs {
			if r.Role == records.Provider && !records.Ended(r.State) {
				for _, uuid := range r.GPUs {
					leased[uuid] = r.ID
				}
			}
		}
	}
	for _, g := range inv.GPUs {
		st.GPUs = append(st.GPUs, gpuReading(g, leased[g.UUID]))
	}
	return st, nil
}

func gpuReading(g attest.GPU, lease string) api.GPUReading {
	return api.GPUReading{Index: g.Index, UUID: g.UUID, Name: g.Name, Model: attest.ModelOf(g.Name, g.PCIDeviceID),
		MemoryMiB: g.MemoryBytes >> 20, MemoryUsedMiB: g.MemoryUsedBytes >> 20, UtilizationPct: g.UtilizationPct,
		TemperatureC: g.TemperatureC, PowerWatts: g.PowerDrawWatts, PowerLimit: g.PowerLimitWatts, Lease: lease}
}
