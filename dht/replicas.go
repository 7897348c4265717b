package dht

import (
	"context"
	"slices"
	"sync"

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
//
// In RoutingKademlia mode it is the answer of an iterative lookup (cached),
// bounded by the lookup's own timeouts; Locate takes a context.
func (n *Node) ReplicaSet(id quanta.ID, rf int) []Peer {
	if n.kad != nil {
		ps, err := n.kad.replicaSet(context.Background(), id, rf)
		if err != nil {
			return []Peer{n.Self()}[:min(rf, 1)]
		}
		return ps
	}
	pc := n.placed.Load()
	if pc == nil { // not started: no members yet
		n.mu.RLock()
		owners := n.owners
		n.mu.RUnlock()
		return ClosestPeers(owners, id, rf)
	}
	return pc.closest(id, rf)
}

// maxPlaceCache bounds the replica sets a placeCache remembers in each of its
// two generations: past it, the current generation becomes the previous one and
// the oldest is dropped, so a long backfill or a long read (which touch many IDs
// once) pay the sort again for their own IDs only, while a set still in use —
// a writer's, found in the previous generation — moves back into the current one.
const maxPlaceCache = 1 << 14

// placeCache remembers the replica sets computed over one list of owners. A
// membership change builds a new one (rebuild), so a cached set is never older
// than the owners it was computed from, and a write costs no SHA-256 of every
// member's ID (kb.SortClosestPeers) unless its ID is new.
type placeCache struct {
	owners []Peer
	mu     sync.Mutex
	sets   map[placeKey][]Peer // the current generation
	prev   map[placeKey][]Peer // the one before, read only; nil at first

	keysOnce sync.Once
	keys     [][32]byte // the owners' routing-table keys, made once (scan.go)
}

type placeKey struct {
	id quanta.ID
	rf int
}

func newPlaceCache(owners []Peer) *placeCache {
	return &placeCache{owners: owners, sets: make(map[placeKey][]Peer)}
}

// closest returns ClosestPeers(owners, id, rf), from the cache when it can. The
// slice returned is shared: its capacity is its length, so that a caller's
// append copies, and callers must not change its elements.
func (c *placeCache) closest(id quanta.ID, rf int) []Peer {
	k := placeKey{id, rf}
	c.mu.Lock()
	ps, ok := c.sets[k]
	if !ok {
		if ps, ok = c.prev[k]; ok {
			c.putLocked(k, ps)
		}
	}
	c.mu.Unlock()
	if ok {
		return ps
	}
	// The owners' routing-table keys are computed once per membership (closestInto):
	// ClosestPeers would hash every owner's ID again for each set, and a repair pass
	// after a membership change asks for the set of every pair held.
	ps = slices.Clip(c.closestInto(nil, id, rf))
	c.mu.Lock()
	c.putLocked(k, ps)
	c.mu.Unlock()
	return ps
}

// putLocked remembers ps in the current generation, starting a new one when it
// is full: a swap, so the lock is never held for a clear of the whole map.
// c.mu is held.
func (c *placeCache) putLocked(k placeKey, ps []Peer) {
	if len(c.sets) >= maxPlaceCache {
		c.prev, c.sets = c.sets, make(map[placeKey][]Peer, maxPlaceCache/4)
	}
	c.sets[k] = ps
}

// Locate returns the rf live nodes closest to id, closest first: the form
// tsdb's Placement asks for. In RoutingFull mode it is ReplicaSet, which never
// blocks and never fails. In RoutingKademlia mode it is a cached iterative
// lookup, bounded by ctx and the lookup's own timeouts; it fails only if ctx
// ends before any peer answered.
func (n *Node) Locate(ctx context.Context, id quanta.ID, rf int) ([]Peer, error) {
	if n.kad != nil {
		return n.kad.replicaSet(ctx, id, rf)
	}
	return n.ReplicaSet(id, rf), nil
}

// ReportFailure tells the node that a call to p failed as unreachable. In
// RoutingKademlia mode, where liveness comes from the calls themselves, p
// leaves the routing table (a replacement takes its place) and every cached
// replica set that holds it; the next lookup finds it again if it answers
// others. In RoutingFull mode memberlist decides, and this does nothing.
func (n *Node) ReportFailure(p Peer) {
	if n.kad != nil && p.ID != n.Self().ID {
		n.kad.reportFailure(p)
	}
}

// Routing returns the node's routing mode.
func (n *Node) Routing() Routing { return n.cfg.Routing }

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
