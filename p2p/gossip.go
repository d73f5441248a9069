package p2p

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

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
	cfg    GossipConfig

	scoreMu sync.Mutex
	scores  map[peer.ID]float64 // as of the last inspection

	appScore atomic.Pointer[func(peer.ID) float64]
	dropped  atomic.Int64 // RPCs inspectRPC dropped

	admission atomic.Pointer[admission]
	kinds     map[string]string // topic -> kind
	let       idSet             // messages admission let in
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
func MessageID(m *pb.Message) string {
	sum := sha256.Sum256(m.Data)
	return string(sum[:])
}

// NewGossip starts gossipsub on h and joins the swarm's topics. Messages
// carry no pubsub signature or author (StrictNoSign): the payloads are
// signed envelopes verified by the topic validators.
func NewGossip(ctx context.Context, h host.Host, cfg GossipConfig) (*Gossip, error) {
	mesh := newMeshTracker()
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
	}
	if cfg.Logger != nil {
		opts = append(opts, pubsub.WithLogger(cfg.Logger))
	}
	g := &Gossip{topics: make(map[string]*pubsub.Topic), mesh: mesh, cfg: cfg}
	g.kinds, g.let.ttl = make(map[string]string), pubsub.TimeCacheDuration
	for _, kind := range TopicKinds {
		g.kinds[cfg.Swarm.Topic(kind)] = kind
	}
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
	return g, nil
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
// refuses, before the router sees it.
func (g *Gossip) inspectRPC(from peer.ID, rpc *pubsub.RPC) error {
	a := g.admission.Load()
	if g.appSpecificScore(from) < graylistThreshold {
		g.dropped.Add(1)
		if a != nil && a.unread != nil {
			for _, m := range rpc.Publish {
				if kind, ours := g.kinds[m.GetTopic()]; ours {
					a.unread(kind, from)
				}
			}
		}
		return errGraylisted
	}
	if a != nil && len(rpc.Publish) > 0 {
		rpc.Publish = g.admit(a.admit, from, rpc.Publish)
	}
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
	kept, now := msgs[:0], time.Now()
	for _, m := range msgs {
		kind, ours := g.kinds[m.GetTopic()]
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

// InMesh says whether p is in this node's mesh for a topic kind.
func (g *Gossip) InMesh(kind string, p peer.ID) bool { return g.mesh.has(g.cfg.Swarm.Topic(kind), p) }

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
	written, stop := g.mesh.awaitWritten(MessageID(&pb.Message{Data: data}))
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
	return g.ps.RegisterTopicValidator(g.cfg.Swarm.Topic(kind), safe, pubsub.WithValidatorTimeout(g.cfg.ValidatorTimeout))
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
		topics[s.Topic(kind)] = &pubsub.TopicScoreParams{
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
