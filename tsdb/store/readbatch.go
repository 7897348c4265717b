package store

import (
	"bytes"
	"cmp"
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble"

	"github.com/tsdht/tsdht/tsdb/series"
)

// PairRead is one (shard, series) pair's range in a ReadBatch: Read's arguments.
type PairRead struct {
	Ref      ShardRef
	Key      string
	From, To int64
}

// ReadBatcher is a Querier that reads the points of many pairs in one pass: what a
// replica answering a read of many shards asks.
type ReadBatcher interface {
	// ReadBatch calls yield(i, pts, held) with what Read(reads[i]…) returns, for each i
	// in order, and stops at the first error (yield's included). yield keeps pts; it
	// must not call the store. Reads in the order of ComparePairs are read fastest.
	ReadBatch(reads []PairRead, yield func(i int, pts series.Points, held bool) error) error
}

// ReadBatch is q's ReadBatch when q is a ReadBatcher, and otherwise calls Read for each
// of reads.
func ReadBatch(q Querier, reads []PairRead, yield func(i int, pts series.Points, held bool) error) error {
	if b, ok := q.(ReadBatcher); ok {
		return b.ReadBatch(reads, yield)
	}
	for i := range reads {
		r := &reads[i]
		pts, held, err := q.Read(r.Ref, r.Key, r.From, r.To)
		if err != nil {
			return err
		}
		if err := yield(i, pts, held); err != nil {
			return err
		}
	}
	return nil
}

// ReadBatch implements ReadBatcher: the pairs are read as Read reads one, all in one
// iterator (one snapshot) whose bounds move from pair to pair, instead of an iterator
// built over every level of the tree for each pair. Given in the order of their keys
// (ComparePairs), the bounds only move forward and each seek starts from the blocks
// the last one left instead of searching every level of the tree again.
func (p *Pebble) ReadBatch(reads []PairRead, yield func(i int, pts series.Points, held bool) error) error {
	if len(reads) == 0 {
		return nil
	}
	if err := p.settle(); err != nil {
		return err
	}
	for i := range reads {
		if err := series.ValidateKey(reads[i].Key); err != nil {
			return err
		}
	}
	if !p.enter() {
		return ErrClosed
	}
	defer p.state.RUnlock()
	// The iterator copies each pair's bounds, so one buffer serves every pair.
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: []byte{famPair}, UpperBound: []byte{famPair + 1}})
	if err != nil {
		return fmt.Errorf("store: read of %d pairs: %w", len(reads), err)
	}
	defer it.Close()
	var idBuf [pairIDStack]byte
	var keys []byte
	for i := range reads {
		r := &reads[i]
		id := appendPairID(idBuf[:0], r.Ref, r.Key)
		if need := 3*(len(id)+2) + 8; cap(keys) < need {
			keys = make([]byte, 0, need)
		}
		lower, upper, seek := pairBounds(keys, id)
		it.SetBounds(lower, upper)
		lo, hi := inclusive(r.From, r.To)
		pts, held, err := p.scanPair(it, id, lower, seek, lo, hi)
		if err != nil {
			return p.readFailed(r.Ref, r.Key, err)
		}
		if err := yield(i, pts, held); err != nil {
			return err
		}
	}
	return nil
}

// ComparePairs orders pairs (shard ra, series ka) and (rb, kb) as the store keeps them
// (by shard start, shard ID, then series key: appendPairID): -1, 0 or +1. A pass over
// many pairs in this order steps through the store's blocks once.
func ComparePairs(ra ShardRef, ka string, rb ShardRef, kb string) int {
	if c := cmp.Compare(ra.Start, rb.Start); c != 0 {
		return c
	}
	if c := bytes.Compare(ra.ID[:], rb.ID[:]); c != 0 {
		return c
	}
	if c := cmp.Compare(len(ka), len(kb)); c != 0 {
		return c
	}
	return strings.Compare(ka, kb)
}
