package repair

import (
	"sync"
	"time"
)

// Conflicts: two owners of a pair holding different values at one timestamp. Points
// carry no write version, so neither copy is known to be the newer. Most such
// differences are a write on its way: it reached one owner, and this node's copy was
// read before it reached this one. An owner's push therefore fills only what the other
// owner lacks (wire.WriteReq.Keep) and leaves the values it holds; the other owner
// names the pairs where it kept a value of its own (WriteResp.Conflicts). A conflict
// still there at a later pass, with this node's copy unchanged for at least the call
// timeout — longer than any write's fan-out waits for a replica — is no write on its
// way: the push then replaces the other owner's values, and the owners agree, though
// not necessarily on the newer value (DESIGN-NOTES.md, "overwrites").

// maxConflicts bounds the conflicts remembered (about 100 bytes each); past it they
// are forgotten and found again by the next passes.
const maxConflicts = 1 << 14

type conflictKey struct {
	pair pairRef
	peer string // dht.Peer.ID
}

// conflictSeen is what a pass saw of a conflict.
type conflictSeen struct {
	hash uint64    // this node's set hash of the pair then
	at   time.Time // when
}

// conflicts remembers the conflicts Keep pushes met, until the pair's owners agree.
type conflicts struct {
	mu sync.Mutex
	m  map[conflictKey]conflictSeen
}

// seen records that peer kept values of its own against this node's copy of pr,
// whose set hash is hash; a conflict already recorded with that hash keeps its time.
func (c *conflicts) seen(pr pairRef, peer string, hash uint64, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := conflictKey{pr, peer}
	if old, ok := c.m[k]; ok && old.hash == hash {
		return
	}
	if c.m == nil || len(c.m) >= maxConflicts {
		c.m = make(map[conflictKey]conflictSeen)
	}
	c.m[k] = conflictSeen{hash: hash, at: now}
}

// settled reports whether this node's copy of pr, whose set hash is hash, met a
// conflict at peer at least after ago and has not changed since: its push may replace
// peer's values.
func (c *conflicts) settled(pr pairRef, peer string, hash uint64, now time.Time, after time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.m[conflictKey{pr, peer}]
	return ok && s.hash == hash && now.Sub(s.at) >= after
}

// forget drops what is remembered of pr at peer: the owners agree.
func (c *conflicts) forget(pr pairRef, peer string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, conflictKey{pr, peer})
}
