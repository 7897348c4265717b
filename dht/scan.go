package dht

import (
	"bytes"
	"crypto/sha256"

	"github.com/tsdht/tsdht/quanta"
)

// ReplicaSetInto is ReplicaSet made in dst (its capacity reused, its length
// ignored) without the placement cache: for a caller that walks many IDs once
// each, such as a read of a long range, which would otherwise fill the cache
// with sets nobody asks for again — evicting the sets that writers use — and
// allocate an entry and a sort for every ID. It computes each owner's
// routing-table key once per membership, so a set costs a scan of the owners
// and no allocation once dst is large enough. ok is false in RoutingKademlia
// mode and before the node has started: use ReplicaSet (or Locate) then.
func (n *Node) ReplicaSetInto(dst []Peer, id quanta.ID, rf int) (ps []Peer, ok bool) {
	if n.kad != nil {
		return nil, false
	}
	pc := n.placed.Load()
	if pc == nil {
		return nil, false
	}
	return pc.closestInto(dst[:0], id, rf), true
}

// closestInto appends to dst the rf owners closest to id, closest first, in
// ClosestPeers' order: by the XOR distance of their routing-table keys (the
// SHA-256 of their peer IDs) to id zero-extended to 256 bits.
func (c *placeCache) closestInto(dst []Peer, id quanta.ID, rf int) []Peer {
	c.keysOnce.Do(func() {
		c.keys = make([][32]byte, len(c.owners))
		for i, p := range c.owners {
			c.keys[i] = sha256.Sum256([]byte(p.PeerID()))
		}
	})
	var target [32]byte
	copy(target[:], id[:])
	rf = min(rf, len(c.owners))
	if rf < 1 {
		return dst
	}
	// An insertion into the best rf so far, by distance: rf is at most 7.
	var dist [maxScanRF][32]byte
	if rf > maxScanRF {
		return append(dst, ClosestPeers(c.owners, id, rf)...)
	}
	start, n := len(dst), 0
	for i := range c.owners {
		var d [32]byte
		for b := range d {
			d[b] = c.keys[i][b] ^ target[b]
		}
		if n == rf && bytes.Compare(d[:], dist[n-1][:]) >= 0 {
			continue
		}
		j := min(n, rf-1) // the slot it takes before moving up
		if n < rf {
			dst = append(dst, Peer{})
			n++
		}
		for j > 0 && bytes.Compare(d[:], dist[j-1][:]) < 0 {
			dist[j], dst[start+j] = dist[j-1], dst[start+j-1]
			j--
		}
		dist[j], dst[start+j] = d, c.owners[i]
	}
	return dst
}

// maxScanRF is the largest replication factor closestInto ranks itself.
const maxScanRF = 7
