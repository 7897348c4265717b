package dht

import (
	"context"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/tsdht/tsdht/quanta"
)

// ReplicaSet returns the rf live members closest to id, closest first, this
// node included if it is among them: the nodes that hold the shard id. It is
// the local fast path, computed over memberlist's full list of live members
// with no network hop, so every node that has the same view computes the same
// set. The routing table is not consulted: its buckets overflow past about
// forty nodes and each node would keep different ones. Lookup computes the
// same set through the routing tables when the full list is not at hand.
//
// Members that stopped on purpose less than Config.DownGrace ago count too: they
// keep their shards while they restart, and calls to them fail fast (a writer
// leaves a hint).
func (n *Node) ReplicaSet(id quanta.ID, rf int) []Peer {
	return ClosestPeers(n.owners_(), id, rf)
}

// owners_ returns the members ReplicaSet places on.
func (n *Node) owners_() []Peer {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.owners
}

// Locate returns ReplicaSet(id, rf). It never blocks and never fails: the node has
// the full member list at hand. It is the form tsdb's Placement asks for, which a routing
// mode that looks owners up over the network also fits.
func (n *Node) Locate(_ context.Context, id quanta.ID, rf int) ([]Peer, error) {
	return n.ReplicaSet(id, rf), nil
}

// ClosestPeers returns the count peers of peers closest to id, closest
// first, ordered by kb.SortClosestPeers as the routing table orders them.
func ClosestPeers(peers []Peer, id quanta.ID, count int) []Peer {
	if count < 1 {
		return nil
	}
	ids := make([]peer.ID, len(peers))
	byID := make(map[peer.ID]Peer, len(peers))
	for i, p := range peers {
		ids[i] = p.PeerID()
		byID[ids[i]] = p
	}
	closest := kb.SortClosestPeers(ids, tableKey(id))
	out := make([]Peer, 0, min(count, len(closest)))
	for _, p := range closest[:min(count, len(closest))] {
		out = append(out, byID[p])
	}
	return out
}
