package cluster

import (
	"context"
	"encoding/hex"
	"slices"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
)

// Placement is what tsdb needs of the DHT: who this node is, which nodes own an ID, and
// when that may have changed. *dht.Node implements it over memberlist's full view; tests
// replace it to pin a replica set without gossip.
type Placement interface {
	// Self returns this node.
	Self() dht.Peer
	// Locate returns the rf live nodes closest to id, closest first: the owners of the
	// shard or registry entry id. It may block on the network in routing modes that look
	// owners up, hence ctx; it fails only when no owner can be found. The slice may be
	// shared with other callers (dht caches replica sets per membership version): never
	// modify its elements.
	Locate(ctx context.Context, id quanta.ID, rf int) ([]dht.Peer, error)
	// Live returns the live members, self included.
	Live() []dht.Peer
	// Version increases with every membership change, so that a caller can cache what
	// it computed from placement and recompute it when the version moves.
	Version() uint64
	// Subscribe returns a channel that receives a value after membership changes,
	// coalescing bursts; it is closed when the placement shuts down.
	Subscribe() <-chan struct{}
}

var _ Placement = (*dht.Node)(nil)

// NodeID returns a peer's 160-bit ID in 40 hex digits: how status and the logs name it.
func NodeID(p dht.Peer) string { return hex.EncodeToString(p.Key[:]) }

// IsReplica reports whether id is among replicas.
func IsReplica(replicas []dht.Peer, id string) bool {
	for _, p := range replicas {
		if p.ID == id {
			return true
		}
	}
	return false
}

// SamePeers reports whether two owner lists name the same nodes, in any order.
func SamePeers(a, b []dht.Peer) bool {
	if len(a) != len(b) {
		return false
	}
	for _, p := range a {
		if !slices.ContainsFunc(b, func(q dht.Peer) bool { return q.ID == p.ID }) {
			return false
		}
	}
	return true
}
