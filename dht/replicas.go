package dht

import (
	kb "github.com/libp2p/go-libp2p-kbucket"

	"github.com/tsdht/tsdht/quanta"
)

// ReplicaSet returns the rf live members closest to id, closest first, this
// node included if it is among them: the nodes that hold the shard id. It is
// the local fast path, computed over memberlist's full list of live members
// with no network hop, so every node that has the same view computes the same
// set. The routing table is not consulted: its buckets overflow past about
// forty nodes and each node would keep different ones. Lookup computes the
// same set through the routing tables when the full list is not at hand.
func (n *Node) ReplicaSet(id quanta.ID, rf int) []Peer {
	if rf < 1 {
		return nil
	}
	n.mu.RLock()
	ids, byID := n.liveIDs, n.liveByID // replaced on change, never modified
	n.mu.RUnlock()
	closest := kb.SortClosestPeers(ids, tableKey(id))
	out := make([]Peer, 0, min(rf, len(closest)))
	for _, p := range closest[:min(rf, len(closest))] {
		out = append(out, byID[p])
	}
	return out
}
