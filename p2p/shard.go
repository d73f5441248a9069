package p2p

import (
	"crypto/sha256"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/idlegrid/idlegrid/market/gpus"
	"github.com/idlegrid/idlegrid/market/pb"
)

// Offers and bids are gossiped on shards as well as on their kind's
// topic: one shard per GPU family, so that a node that buys, sells or
// watches one family hears only that family's traffic. A shard is
// named by its family's key in the GPU catalog ("h100", "a100",
// "rtx4090"); a GPU the catalog lacks is in ShardOther, and a bid that
// names no model is in ShardAny.
//
// The kind's own topic (Swarm.Topic) carries every offer and bid, as it
// did before there were shards: a node that follows every family
// subscribes to it alone, and so does a node of the last version, which
// knows no shards. A node publishes each offer and bid on its shards and
// on the kind's topic, so both see it; a shard's message ID is its
// content hash under the shard's topic (MessageID), so the two copies are
// two messages and neither is dropped as the other's duplicate.
const (
	ShardOther = "other"
	ShardAny   = "any"
)

// ShardedKinds are the topic kinds gossiped on shards too.
var ShardedKinds = []string{TopicOffers, TopicBids}

// MaxShards bounds how many shards one node follows, and how many one
// book sync may ask for.
const MaxShards = 16

// maxShardLen is the longest shard name.
const maxShardLen = 40

var shardRE = regexp.MustCompile(`^[a-z0-9]{1,40}$`)

// ValidateShard reports whether name may name a shard.
func ValidateShard(name string) error {
	if !shardRE.MatchString(name) {
		return fmt.Errorf("%w: shard %q: use 1-40 lower-case letters and digits, a GPU family's key such as \"h100\"", ErrShard, name)
	}
	return nil
}

// KnownShards are the shards this node's GPU catalog names: each
// family's, ShardOther and ShardAny, sorted. A node tracks peers'
// subscriptions to these shards' topics alone (topicFilter), so a peer
// cannot have it keep a subscription per name it makes up; and it
// judges only offers of these (validateOffer ignores what a newer
// catalog's shard carries).
func KnownShards() []string {
	out := []string{ShardOther, ShardAny}
	for _, m := range gpus.Default().Models() {
		out = append(out, FamilyShard(m.Family))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ShardTopic is the topic of one shard of a kind:
// /idlegrid/<id>/<kind>/<shard>/1.
func (s Swarm) ShardTopic(kind, shard string) string {
	return "/idlegrid/" + s.ID() + "/" + kind + "/" + shard + "/1"
}

// shardOfTopic is the shard a topic names, "" for a kind's own topic.
// It reads only the topic's shape: /idlegrid/<id>/<kind>/<shard>/1.
func shardOfTopic(topic string) string {
	parts := strings.Split(topic, "/")
	if len(parts) != 6 {
		return ""
	}
	return parts[4]
}

// FamilyShard is the shard of a GPU family, as the catalog names it
// ("H100", "RTX PRO 6000 Blackwell").
func FamilyShard(family string) string {
	k := gpus.Key(family)
	if k == "" || len(k) > maxShardLen {
		return ShardOther
	}
	return k
}

// ModelShard is the shard of the family of a GPU an offer names (its
// canonical model ID, or any name the catalog reads): ShardOther where
// the catalog does not know it.
func ModelShard(model string) string {
	if m, ok := gpus.Default().Lookup(model); ok {
		return FamilyShard(m.Family)
	}
	if ms, ok := gpus.Default().Family(model); ok {
		return FamilyShard(ms[0].Family)
	}
	return ShardOther
}

// WantShards are the shards of what a renter names ("H100", "A100 80GB",
// "RTX 4090"): the families of the models it resolves to, sorted, or
// ShardOther where the catalog does not read it.
func WantShards(name string) []string {
	w, err := gpus.Default().Resolve(name)
	if err != nil {
		return []string{ShardOther}
	}
	var out []string
	for _, id := range w.Models {
		out = append(out, ModelShard(id))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// OfferShards are the shards an offer is gossiped on: its GPU groups'
// families, sorted, each once.
func OfferShards(o *pb.Offer) []string {
	var out []string
	for _, g := range o.GetGpus() {
		out = append(out, ModelShard(g.GetModel()))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// BidShards are the shards a bid is gossiped on: its models' families,
// sorted, each once; ShardAny for a bid that names none.
func BidShards(b *pb.Bid) []string {
	models := b.GetGpu().GetModels()
	if len(models) == 0 {
		return []string{ShardAny}
	}
	var out []string
	for _, m := range models {
		out = append(out, WantShards(m)...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// shardMessageID is a shard's message ID: the content hash under the
// shard's topic, so that the copy a node publishes on a kind's own topic
// and the copy it publishes on a shard are not one message to the router.
func shardMessageID(topic string, data []byte) string {
	h := sha256.New()
	h.Write([]byte(topic))
	h.Write([]byte{0})
	h.Write(data)
	return string(h.Sum(nil))
}
