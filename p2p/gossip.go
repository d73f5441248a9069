package p2p

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idlegrid/idlegrid/market"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
)

// GossipConfig configures the swarm's gossipsub router.
type GossipConfig struct {
	Swarm Swarm
	// OutboundQueue is the per-peer outbound queue; at pubsub's default of
	// 32 a burst of offers is dropped silently.
	OutboundQueue int
	// MaxMessageSize bounds every gossiped message, in bytes.
	MaxMessageSize int
	// PeerScoring turns gossipsub v1.1 peer scoring on.
	PeerScoring bool
	// ValidatorTimeout bounds each topic validator call.
	ValidatorTimeout time.Duration
	Logger           *slog.Logger
}

// Gossip is the swarm's gossipsub router joined to the swarm's topics.
type Gossip struct {
	ps     *pubsub.PubSub
	topics map[string]*pubsub.Topic
	mesh   *meshTracker
	watch  *subWatch
	cfg    GossipConfig

	scoreMu sync.Mutex
	scores  map[peer.ID]float64 // as of the last inspection

	appScore atomic.Pointer[func(peer.ID) float64]
	dropped  atomic.Int64 // RPCs inspectRPC dropped

	admission atomic.Pointer[admission]
	kinds     atomic.Pointer[map[string]string] // topic -> kind; replaced whole when a shard is joined
	let       idSet                             // messages admission let in

	// shardMu is held across calls into the router (Join, a topic's
	// validator and score parameters), which wait for its loop: nothing
	// the loop calls (admission, the application score, the tracer) may
	// take it, or the loop and the caller wait on each other for good.
	shardMu    sync.Mutex
	shards     map[string]*pubsub.Topic // shard topic -> the joined topic
	validators map[string]pubsub.ValidatorEx
}

// SetAppScore makes f the application-specific part of every peer's
// gossipsub score (the market validator's AppScore); until it is set,
// that part is 0.
func (g *Gossip) SetAppScore(f func(peer.ID) float64) { g.appScore.Store(&f) }

func (g *Gossip) appSpecificScore(p peer.ID) float64 {
	if f := g.appScore.Load(); f != nil {
		return (*f)(p)
	}
	return 0
}

// scoreInspectPeriod is how often the router reports peer scores.
const scoreInspectPeriod = time.Second

// MessageID is the content-hash message ID: every payload is already signed
// by its issuer, so identical bytes are the same message whoever relays them.
// On a shard's topic the hash covers the topic too (see ShardedKinds).
func MessageID(m *pb.Message) string {
	if shardOfTopic(m.GetTopic()) != "" {
		return shardMessageID(m.GetTopic(), m.Data)
	}
	sum := sha256.Sum256(m.Data)
	return string(sum[:])
}

// NewGossip starts gossipsub on h and joins the swarm's topics. Messages
// carry no pubsub signature or author (StrictNoSign): the payloads are
// signed envelopes verified by the topic validators.
func NewGossip(ctx context.Context, h host.Host, cfg GossipConfig) (*Gossip, error) {
	mesh := newMeshTracker()
	filter := topicFilter(cfg.Swarm)
	watch := newSubWatch(h, cfg.Swarm, filter, cfg.Logger)
	opts := []pubsub.Option{
		pubsub.WithMessageSignaturePolicy(pubsub.StrictNoSign),
		pubsub.WithNoAuthor(),
		pubsub.WithMessageIdFn(MessageID),
		pubsub.WithPeerOutboundQueueSize(cfg.OutboundQueue),
		pubsub.WithMaxMessageSize(cfg.MaxMessageSize),
		pubsub.WithRawTracer(mesh),
		// Messages wait here for a validation worker (one per core).
		// pubsub's 32 dropped part of a burst of 40 offers on a loaded
		// 2-core machine, uncounted; what validation holds in flight is
		// bounded by pubsub's throttle (8,192) either way.
		pubsub.WithValidateQueueSize(validateQueue),
		pubsub.WithSubscriptionFilter(filter),
	}
	if cfg.Logger != nil {
		opts = append(opts, pubsub.WithLogger(cfg.Logger))
	}
	g := &Gossip{topics: make(map[string]*pubsub.Topic), mesh: mesh, watch: watch, cfg: cfg,
		shards: make(map[string]*pubsub.Topic), validators: make(map[string]pubsub.ValidatorEx)}
	g.let.ttl = pubsub.TimeCacheDuration
	kinds := make(map[string]string)
	for _, kind := range TopicKinds {
		kinds[cfg.Swarm.Topic(kind)] = kind
	}
	g.kinds.Store(&kinds)
	opts = append(opts, pubsub.WithAppSpecificRpcInspector(g.inspectRPC))
	if cfg.PeerScoring {
		opts = append(opts,
			pubsub.WithPeerScore(peerScoreParams(cfg.Swarm, g.appSpecificScore), peerScoreThresholds()),
			pubsub.WithPeerScoreInspect(g.inspectScores, scoreInspectPeriod))
	}
	ps, err := pubsub.NewGossipSub(ctx, h, opts...)
	if err != nil {
		return nil, fmt.Errorf("gossipsub: %w", err)
	}
	g.ps = ps
	for _, kind := range TopicKinds {
		t, err := ps.Join(cfg.Swarm.Topic(kind))
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("join topic %s: %w", cfg.Swarm.Topic(kind), err)
		}
		g.topics[kind] = t
	}
	go watch.run(ctx, ps)
	return g, nil
}

// topicFilter admits the swarm's topics alone, its kinds' and the
// shards of the catalog's families (KnownShards): the router keeps a
// peer's subscriptions only to those, and an RPC that names more
// subscriptions than there are such topics is dropped whole.
func topicFilter(sw Swarm) pubsub.SubscriptionFilter {
	var topics []string
	for _, kind := range TopicKinds {
		topics = append(topics, sw.Topic(kind))
	}
	for _, kind := range ShardedKinds {
		for _, sh := range KnownShards() {
			topics = append(topics, sw.ShardTopic(kind, sh))
		}
	}
	return pubsub.WrapLimitSubscriptionFilter(pubsub.NewAllowlistSubscriptionFilter(topics...), len(topics))
}

// validateQueue is how many received messages wait for validation.
const validateQueue = 256

// inspectRPC drops, before anything in it is read, an RPC from a peer
// whose application-specific score alone is below the graylist
// threshold. The router graylists by the whole score, but it scores only
// peers it opened a stream to: a peer that sends RPCs and refuses the
// router's own stream is never scored, and so never graylisted, however
// much it floods.
//
// Then it takes out of the RPC each message that admission (SetAdmission)
// refuses, before the router sees it, and tells the subWatch of the
// subscriptions the router is about to keep.
func (g *Gossip) inspectRPC(from peer.ID, rpc *pubsub.RPC) error {
	a := g.admission.Load()
	if g.appSpecificScore(from) < graylistThreshold {
		g.dropped.Add(1)
		if a != nil && a.unread != nil {
			for _, m := range rpc.Publish {
				if kind, ours := (*g.kinds.Load())[m.GetTopic()]; ours {
					a.unread(kind, from)
				}
			}
		}
		return errGraylisted
	}
	if a != nil && len(rpc.Publish) > 0 {
		rpc.Publish = g.admit(a.admit, from, rpc.Publish)
	}
	g.watch.heard(from, rpc)
	return nil
}

type admission struct {
	admit  func(kind string, from peer.ID, data []byte) bool
	unread func(kind string, from peer.ID)
}

// SetAdmission makes f decide, for each message a peer hands this node on
// one of the swarm's topics, whether the router reads it at all, before
// it does: f is the budgets (MarketValidator.admit). The router marks a
// message seen as soon as it reads it (before its validators run), so a
// message that a validator ignored for a relay's spent budget would be
// lost at this node, however many relays with budget to spare then
// offered it; one admission refuses is dropped unseen, and the next copy,
// from another relay, is judged on its own. f is asked once per message
// it lets in: a later copy of one passes unasked (the router drops it as
// a duplicate, or checks it if it dropped the first unread), so a relay
// never pays for the duplicates gossipsub's mesh sends. f runs in the
// router's event loop, so it must be quick and do no I/O.
//
// unread, if not nil, is told of each message in an RPC dropped unread
// for its sender's score (inspectRPC), to count it against the sender as
// if it had been read: a graylisted peer that keeps flooding stays
// graylisted, and one that stops is forgiven as its excess decays.
func (g *Gossip) SetAdmission(admit func(kind string, from peer.ID, data []byte) bool, unread func(kind string, from peer.ID)) {
	g.admission.Store(&admission{admit, unread})
}

func (g *Gossip) admit(f func(string, peer.ID, []byte) bool, from peer.ID, msgs []*pb.Message) []*pb.Message {
	kept, now, kinds := msgs[:0], time.Now(), *g.kinds.Load()
	for _, m := range msgs {
		kind, ours := kinds[m.GetTopic()]
		if !ours {
			kept = append(kept, m) // the router ignores it
			continue
		}
		switch id := MessageID(m); {
		case g.let.has(id, now):
			kept = append(kept, m)
		case f(kind, from, m.Data):
			g.let.add(id, now)
			kept = append(kept, m)
		}
	}
	clear(msgs[len(kept):])
	return kept
}

// idSet is a set of message IDs, each kept for ttl after it was added.
type idSet struct {
	ttl   time.Duration
	mu    sync.Mutex
	ids   map[string]struct{}
	queue []stampedID // in the order added, from head on
	head  int
}

type stampedID struct {
	id string
	at time.Time
}

func (s *idSet) has(id string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(now)
	_, ok := s.ids[id]
	return ok
}

// add puts id in s; it is not there (has said so).
func (s *idSet) add(id string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = make(map[string]struct{})
	}
	s.ids[id] = struct{}{}
	s.queue = append(s.queue, stampedID{id, now})
}

func (s *idSet) expire(now time.Time) {
	for s.head < len(s.queue) && now.Sub(s.queue[s.head].at) >= s.ttl {
		delete(s.ids, s.queue[s.head].id)
		s.queue[s.head] = stampedID{}
		s.head++
	}
	if s.head > len(s.queue)/2 {
		s.queue = append(s.queue[:0], s.queue[s.head:]...)
		s.head = 0
	}
}

// DroppedRPCs counts the RPCs dropped unread for their sender's
// application-specific score.
func (g *Gossip) DroppedRPCs() int64 { return g.dropped.Load() }

var errGraylisted = errors.New("the peer's application-specific score is below the graylist threshold")

func (g *Gossip) inspectScores(scores map[peer.ID]float64) {
	g.scoreMu.Lock()
	defer g.scoreMu.Unlock()
	g.scores = scores
}

// Score returns a peer's gossipsub score as of the last inspection (once
// a second), and whether the router scored it at all.
func (g *Gossip) Score(p peer.ID) (float64, bool) {
	g.scoreMu.Lock()
	defer g.scoreMu.Unlock()
	s, ok := g.scores[p]
	return s, ok
}

// PubSub returns the router.
func (g *Gossip) PubSub() *pubsub.PubSub { return g.ps }

// Topic returns the joined topic of a kind (TopicOffers, …), or nil.
func (g *Gossip) Topic(kind string) *pubsub.Topic { return g.topics[kind] }

// InMesh says whether p is in this node's mesh for a topic kind, on
// the kind's own topic or on one of its shards.
//
// Admission asks it on the router's loop, so it takes no lock that is
// held across a call into the router (shardMu): it reads the topics from
// kinds, replaced whole when a shard is joined.
func (g *Gossip) InMesh(kind string, p peer.ID) bool {
	for topic, k := range *g.kinds.Load() {
		if k == kind && g.mesh.has(topic, p) {
			return true
		}
	}
	return false
}

func (m *meshTracker) has(topic string, p peer.ID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.mesh[topic][p]
	return ok
}

// Mesh returns the peers in this node's mesh for a topic kind.
func (g *Gossip) Mesh(kind string) []peer.ID { return g.mesh.peers(g.cfg.Swarm.Topic(kind)) }

// PublishFlushed publishes data on a topic kind and waits until it has
// been written to at least one peer's stream, or ctx ends. A node that is
// about to shut down uses it so its last word (an offer's withdrawal)
// leaves before the connections close.
func (g *Gossip) PublishFlushed(ctx context.Context, kind string, data []byte) error {
	t := g.topics[kind]
	if t == nil {
		return fmt.Errorf("publish: unknown topic kind %q", kind)
	}
	if err := g.PublishOnShards(ctx, kind, ClaimedShards(kind, data), data); err != nil {
		return err
	}
	topic := t.String()
	written, stop := g.mesh.awaitWritten(MessageID(&pb.Message{Data: data, Topic: &topic}))
	defer stop()
	if err := t.Publish(ctx, data); err != nil {
		return err
	}
	select {
	case <-written:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SetValidator installs v as the validator of a topic kind, wrapped so a
// panic is a Reject rather than a crash and a slow validator times out.
func (g *Gossip) SetValidator(kind string, v pubsub.ValidatorEx) error {
	safe := func(ctx context.Context, from peer.ID, m *pubsub.Message) (res pubsub.ValidationResult) {
		defer func() {
			if r := recover(); r != nil {
				if g.cfg.Logger != nil {
					g.cfg.Logger.Error("validator panicked", "topic", kind, "from", from, "panic", r)
				}
				res = pubsub.ValidationReject
			}
		}()
		return v(ctx, from, m)
	}
	g.shardMu.Lock()
	defer g.shardMu.Unlock()
	g.validators[kind] = safe
	if err := g.ps.RegisterTopicValidator(g.cfg.Swarm.Topic(kind), safe, pubsub.WithValidatorTimeout(g.cfg.ValidatorTimeout)); err != nil {
		return err
	}
	for topic, t := range g.shards {
		if (*g.kinds.Load())[topic] != kind {
			continue
		}
		if err := g.ps.RegisterTopicValidator(t.String(), safe, pubsub.WithValidatorTimeout(g.cfg.ValidatorTimeout)); err != nil {
			return err
		}
	}
	return nil
}

// JoinShard joins one shard of a sharded kind (ShardedKinds) and returns
// its topic; joining one already joined returns it again. The kind's
// validator (SetValidator) checks what the shard carries, and the
// kind's score parameters score its peers. A node joins at most
// MaxShards shards of each kind. Joining is not subscribing: a node
// that publishes on a shard it does not follow joins it to publish.
func (g *Gossip) JoinShard(kind, shard string) (*pubsub.Topic, error) {
	if !slices.Contains(ShardedKinds, kind) {
		return nil, fmt.Errorf("join shard: %q is not a sharded topic kind", kind)
	}
	if err := ValidateShard(shard); err != nil {
		return nil, err
	}
	topic := g.cfg.Swarm.ShardTopic(kind, shard)
	g.shardMu.Lock()
	defer g.shardMu.Unlock()
	if t := g.shards[topic]; t != nil {
		return t, nil
	}
	n := 0
	for tp := range g.shards {
		if (*g.kinds.Load())[tp] == kind {
			n++
		}
	}
	if n >= MaxShards {
		return nil, fmt.Errorf("join shard %s: this node has joined %d shards of %s, the most it may", shard, n, kind)
	}
	t, err := g.ps.Join(topic)
	if err != nil {
		return nil, fmt.Errorf("join shard %s: %w", topic, err)
	}
	if v := g.validators[kind]; v != nil {
		if err := g.ps.RegisterTopicValidator(topic, v, pubsub.WithValidatorTimeout(g.cfg.ValidatorTimeout)); err != nil {
			t.Close()
			return nil, fmt.Errorf("join shard %s: %w", topic, err)
		}
	}
	if g.cfg.PeerScoring {
		if err := t.SetScoreParams(topicScoreParams()); err != nil {
			t.Close()
			return nil, fmt.Errorf("join shard %s: %w", topic, err)
		}
	}
	kinds := maps.Clone(*g.kinds.Load())
	kinds[topic] = kind
	g.kinds.Store(&kinds)
	g.shards[topic] = t
	return t, nil
}

// Publish publishes data on a topic kind; an offer or a bid on its
// shards too (OfferShards, BidShards), before its kind's own topic.
func (g *Gossip) Publish(ctx context.Context, kind string, data []byte) error {
	t := g.topics[kind]
	if t == nil {
		return fmt.Errorf("publish: unknown topic kind %q", kind)
	}
	if err := g.PublishOnShards(ctx, kind, ClaimedShards(kind, data), data); err != nil {
		return err
	}
	return t.Publish(ctx, data)
}

// ClaimedShards are the shards of an offer or a bid envelope of a kind,
// as the envelope claims them, unverified (the validators check them);
// none for another kind, or an envelope that does not decode.
func ClaimedShards(kind string, data []byte) []string {
	switch kind {
	case TopicOffers:
		if o, ok := market.Claimed(data); ok {
			return OfferShards(o)
		}
	case TopicBids:
		if b, ok := market.ClaimedBid(data); ok {
			return BidShards(b)
		}
	}
	return nil
}

// PublishOnShards publishes data on each of shards of a sharded kind,
// joining those not joined yet; a node publishes on the kind's own topic
// as well (Publish, PublishFlushed), for the nodes that follow every
// shard. A shard this node does not follow has no mesh here: pubsub
// sends to the shard's followers it knows (its fanout).
func (g *Gossip) PublishOnShards(ctx context.Context, kind string, shards []string, data []byte) error {
	for _, sh := range shards {
		t, err := g.JoinShard(kind, sh)
		if err != nil {
			return err
		}
		if err := t.Publish(ctx, data); err != nil {
			return fmt.Errorf("publish on shard %s: %w", sh, err)
		}
	}
	return nil
}

// ShardTopic returns a joined shard's topic, or nil.
func (g *Gossip) ShardTopic(kind, shard string) *pubsub.Topic {
	g.shardMu.Lock()
	defer g.shardMu.Unlock()
	return g.shards[g.cfg.Swarm.ShardTopic(kind, shard)]
}

// ShardMesh returns the peers in this node's mesh for a shard.
func (g *Gossip) ShardMesh(kind, shard string) []peer.ID {
	return g.mesh.peers(g.cfg.Swarm.ShardTopic(kind, shard))
}

// ShardPeers are the peers this node knows to follow a shard, whether or
// not it has joined the shard itself.
func (g *Gossip) ShardPeers(kind, shard string) []peer.ID {
	return g.ps.ListPeers(g.cfg.Swarm.ShardTopic(kind, shard))
}

// Close leaves the topics; cancel every subscription first, or a topic
// refuses to close. The router itself stops with the context given to
// NewGossip, which must still be live here.
func (g *Gossip) Close() error {
	var errs []error
	for kind, t := range g.topics {
		if err := t.Close(); err != nil {
			errs = append(errs, fmt.Errorf("leave %s: %w", kind, err))
		}
	}
	g.shardMu.Lock()
	defer g.shardMu.Unlock()
	for topic, t := range g.shards {
		if err := t.Close(); err != nil {
			errs = append(errs, fmt.Errorf("leave %s: %w", topic, err))
		}
	}
	return errors.Join(errs...)
}

func peerScoreThresholds() *pubsub.PeerScoreThresholds {
	return &pubsub.PeerScoreThresholds{
		GossipThreshold:             -500,
		PublishThreshold:            -1000,
		GraylistThreshold:           graylistThreshold,
		AcceptPXThreshold:           10,
		OpportunisticGraftThreshold: 3,
	}
}

// topicScoreParams are every topic's score parameters, a shard's
// included.
func topicScoreParams() *pubsub.TopicScoreParams {
	return &pubsub.TopicScoreParams{
		TopicWeight:                    1,
		TimeInMeshWeight:               0.01,
		TimeInMeshQuantum:              time.Second,
		TimeInMeshCap:                  300,
		FirstMessageDeliveriesWeight:   1,
		FirstMessageDeliveriesDecay:    pubsub.ScoreParameterDecay(10 * time.Minute),
		FirstMessageDeliveriesCap:      100,
		InvalidMessageDeliveriesWeight: -100,
		InvalidMessageDeliveriesDecay:  pubsub.ScoreParameterDecay(time.Hour),
		SkipAtomicValidation:           true,
	}
}

// graylistThreshold is the score below which a peer's RPCs are dropped
// unread.
const graylistThreshold = -2500

// peerScoreParams scores peers on time in the mesh, first deliveries and,
// above all, invalid messages: a peer that relays forged offers is
// graylisted after a handful.
//
// The IP colocation penalty is off. It counts every peer of one IPv4
// address or IPv6 /64 against the rest, and the providers this market
// serves often sit many to one address (a rack behind one NAT, a cloud
// /64): with it on they would score negative and never be grafted. A
// Sybil gains nothing from sharing an address here, since every payload is
// signed by its issuer and checked by the topic validators.
func peerScoreParams(s Swarm, app func(peer.ID) float64) *pubsub.PeerScoreParams {
	topics := make(map[string]*pubsub.TopicScoreParams, len(TopicKinds))
	for _, kind := range TopicKinds {
		topics[s.Topic(kind)] = topicScoreParams()
	}
	return &pubsub.PeerScoreParams{
		Topics:                    topics,
		TopicScoreCap:             100,
		AppSpecificScore:          app,
		AppSpecificWeight:         1,
		BehaviourPenaltyWeight:    -10,
		BehaviourPenaltyThreshold: 6,
		BehaviourPenaltyDecay:     pubsub.ScoreParameterDecay(10 * time.Minute),
		DecayInterval:             time.Second,
		DecayToZero:               0.01,
		RetainScore:               10 * time.Minute,
		SkipAtomicValidation:      true,
	}
}
