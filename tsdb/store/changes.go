package store

import (
	"sync"

	"github.com/tsdht/tsdht/quanta"
)

// ChangeTracker is a store that remembers which pairs changed — points appended or
// restored, ranges deleted — so that tsdb's repairer compares those between its full
// passes instead of every pair held. It has one consumer: TakeChanged hands each
// change over once.
type ChangeTracker interface {
	// TakeChanged returns the pairs changed since the previous call (or since the store
	// opened), each once, in no particular order, and forgets them. complete is false
	// when more pairs changed than the store keeps (MaxChangedPairs): the caller must
	// then treat every pair as changed.
	TakeChanged() (pairs []PairRef, complete bool)
}

// PairRef names one (shard, series) pair.
type PairRef struct {
	Ref ShardRef
	Key string
}

// MaxChangedPairs bounds the changes a store keeps between two TakeChanged calls
// (about 100 bytes each): an idle-but-for-ingest node changes a few pairs per series
// and quantum; a backfill of many quanta overflows it and costs one full comparison.
const MaxChangedPairs = 1 << 15

// changeLog is the pebble store's ChangeTracker: pair ids in memory. A restart forgets
// it, as a restarted repairer compares everything anyway.
type changeLog struct {
	mu   sync.Mutex
	ids  map[string]struct{}
	over bool
}

// note records that pair id (a string of pairID) changed.
func (c *changeLog) note(sid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.over {
		return
	}
	if _, ok := c.ids[sid]; ok {
		return
	}
	if len(c.ids) >= MaxChangedPairs {
		c.over, c.ids = true, nil
		return
	}
	if c.ids == nil {
		c.ids = make(map[string]struct{})
	}
	c.ids[sid] = struct{}{}
}

func (c *changeLog) take() ([]PairRef, bool) {
	c.mu.Lock()
	ids, over := c.ids, c.over
	c.ids, c.over = nil, false
	c.mu.Unlock()
	if over {
		return nil, false
	}
	out := make([]PairRef, 0, len(ids))
	for sid := range ids {
		ref, key := splitPairID([]byte(sid))
		out = append(out, PairRef{ref, key})
	}
	return out, true
}

// TakeChanged implements ChangeTracker.
func (p *Pebble) TakeChanged() ([]PairRef, bool) {
	_ = p.settle() // a pair still buffered after a failed drain is noted when it drains
	return p.changes.take()
}

// splitPairID returns the shard and series of a well-formed pair id (validPairID).
func splitPairID(id []byte) (ShardRef, string) {
	ref := ShardRef{Start: getSortable(id[:8])}
	copy(ref.ID[:], id[8:8+quanta.IDLen])
	return ref, string(id[8+quanta.IDLen+1:])
}
