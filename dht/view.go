package dht

import "github.com/tsdht/tsdht/quanta"

// View is the placement of one membership: the owners ReplicaSet gave every shard ID
// while that membership was current. A repairer keeps the view its last pass began
// with, so that after a membership change it can tell the pairs whose owners moved
// from those whose owners stayed, without asking anyone. The zero View places nothing.
type View struct{ pc *placeCache }

// View returns the current membership's placement. ok is false in RoutingKademlia mode,
// where owners are looked up rather than computed, and before the node has started.
func (n *Node) View() (v View, ok bool) {
	if n.kad != nil {
		return View{}, false
	}
	pc := n.placed.Load()
	if pc == nil {
		return View{}, false
	}
	// A cache of its own over the same owners: holding the view must not keep the live
	// cache's replica sets alive after the membership moves on.
	return View{&placeCache{owners: pc.owners}}, true
}

// ReplicaSetInto returns, made in dst (its length ignored), the rf owners of id under v,
// closest first, as ReplicaSet answered while v was current.
func (v View) ReplicaSetInto(dst []Peer, id quanta.ID, rf int) []Peer {
	if v.pc == nil {
		return dst[:0]
	}
	return v.pc.closestInto(dst[:0], id, rf)
}
