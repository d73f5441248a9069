package p2p

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"
	"strings"

	"github.com/idlegrid/idlegrid/market"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// PublicSwarm is the name of the open, keyless swarm.
const PublicSwarm = "public"

// Topic kinds gossiped in every swarm.
const (
	TopicOffers   = "offers"
	TopicBids     = "bids"
	TopicEvidence = "evidence"
)

// TopicKinds lists the gossip topics every node joins, in a fixed order.
var TopicKinds = []string{TopicOffers, TopicBids, TopicEvidence}

var swarmNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ValidateSwarmName reports whether name may name a swarm: 1 to 63
// characters of lower-case letters, digits and '-', starting with a letter
// or digit.
func ValidateSwarmName(name string) error {
	if !swarmNameRE.MatchString(name) {
		return fmt.Errorf("%w %q: use 1-63 lower-case letters, digits and '-', starting with a letter or digit", ErrSwarmName, name)
	}
	return nil
}

// Swarm names one idlegrid swarm: its name and, for a private swarm, its
// pre-shared key. Every protocol and topic name a node uses derives from it,
// so two swarms never share a DHT or a topic.
type Swarm struct {
	Name string
	PSK  pnet.PSK
}

// Private reports whether the swarm is guarded by a pre-shared key.
func (s Swarm) Private() bool { return len(s.PSK) > 0 }

// Limits are the market's limits in the swarm: every message must name
// it (Tag).
func (s Swarm) Limits() market.Limits {
	l := market.DefaultLimits()
	l.Swarm = s.Tag()
	return l
}

// ID is the swarm's identifier in protocol and topic names: its name for the
// public swarm, and its name plus the first 8 hex digits of the key's SHA-256
// for a private one, so that two private swarms that happen to share a name
// still get their own DHT and topics.
func (s Swarm) ID() string {
	if s.Name == "" {
		return PublicSwarm // the zero Swarm
	}
	if !s.Private() {
		return s.Name
	}
	sum := sha256.Sum256(s.PSK)
	return s.Name + "-" + hex.EncodeToString(sum[:4])
}

// Tag is what the swarm's signed messages name as theirs (the market's
// Header.swarm): its ID, empty for the public swarm.
func (s Swarm) Tag() string {
	if id := s.ID(); id != PublicSwarm {
		return id
	}
	return ""
}

// Protocol scopes a stream protocol of this package, /idlegrid/<name>/<v>,
// to the swarm: /idlegrid/<id>/<name>/<v>. Two swarms' nodes that meet
// (a private swarm's peer is also in the public DHT, or a key leaked)
// share no protocol.
func (s Swarm) Protocol(base protocol.ID) protocol.ID {
	return protocol.ID("/idlegrid/" + s.ID() + "/" + strings.TrimPrefix(string(base), "/idlegrid/"))
}

// DHTPrefix is the kad-dht protocol prefix: /idlegrid/<id>.
func (s Swarm) DHTPrefix() protocol.ID { return protocol.ID("/idlegrid/" + s.ID()) }

// Topic returns the gossip topic of one kind: /idlegrid/<id>/<kind>/1.
func (s Swarm) Topic(kind string) string { return "/idlegrid/" + s.ID() + "/" + kind + "/1" }

// RendezvousShards is how many namespaces a swarm's rendezvous records
// are spread over. The DHT keeps a namespace's records on the 20 peers
// closest to its key, and every lookup and advertisement dials one of
// them: with one namespace, those 20 took an inbound connection from each
// of the swarm's lookups, and no connection bound held on them (1,000
// nodes: 11 over the bound of 64, up to 93). Spread over 8, each holds an
// eighth.
const RendezvousShards = 8

// Rendezvous is the namespace of shard i (0 ≤ i < RendezvousShards): a
// peer advertises under its own shard (RendezvousShard) and looks shards
// up in random order to find others through the DHT.
func (s Swarm) Rendezvous(i int) string {
	return "/idlegrid/" + s.ID() + "/rendezvous/" + strconv.Itoa(i)
}

// RendezvousShard is the shard p advertises under.
func RendezvousShard(p peer.ID) int {
	h := fnv.New32a()
	h.Write([]byte(p))
	return int(h.Sum32() % RendezvousShards)
}
