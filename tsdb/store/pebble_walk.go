package store

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/series"
)

// walkBatch is how many pairs Pairs collects from one iterator before it lets go of
// the store and calls fn on them.
const walkBatch = 256

// Pairs calls fn for every (shard, series) the store holds, oldest quantum first, until
// fn returns false (tsdb's repairer walks the store with it). fn runs with nothing of the
// store held, so it may call back into the store; pairs added or deleted during the
// walk may or may not be seen.
func (p *Pebble) Pairs(fn func(ref ShardRef, key string) bool) error {
	if err := p.settle(); err != nil {
		return err
	}
	from := []byte{famPair}
	for {
		refs, keys, next, err := p.pairBatch(from)
		if err != nil {
			return err
		}
		for i := range refs {
			if !fn(refs[i], keys[i]) {
				return nil
			}
		}
		if next == nil {
			return nil
		}
		from = next
	}
}

// pairBatch returns up to walkBatch pairs with keys from from on, and the key to go on
// from (nil at the end). It seeks from one pair's summary to the next.
func (p *Pebble) pairBatch(from []byte) (refs []ShardRef, keys []string, next []byte, err error) {
	if !p.enter() {
		return nil, nil, nil, ErrClosed
	}
	defer p.state.RUnlock()
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: from, UpperBound: []byte{famPair + 1}})
	if err != nil {
		return nil, nil, nil, err
	}
	defer it.Close()
	const fixed = 8 + quanta.IDLen + 1
	for valid := it.First(); valid; {
		k := it.Key()
		if len(refs) == walkBatch {
			return refs, keys, append([]byte(nil), k...), nil
		}
		if len(k) < 1+fixed+1 || len(k) < 1+fixed+int(k[fixed])+1+1 {
			return nil, nil, nil, fmt.Errorf("%w: pair key %x", ErrCorrupt, k)
		}
		id := k[1 : 1+fixed+int(k[fixed])+1]
		if k[1+len(id)] == kindSummary {
			ref := ShardRef{Start: getSortable(id[:8])}
			copy(ref.ID[:], id[8:8+quanta.IDLen])
			refs = append(refs, ref)
			keys = append(keys, string(id[fixed:]))
		}
		valid = it.SeekGE(pairKey(nil, id, kindEnd))
	}
	return refs, keys, nil, it.Error()
}

// Delete drops one series' points in one shard (the repairer hands a pair off to its
// owners with it); the series keeps its type. Deleting a pair the store does not hold
// is not an error.
func (p *Pebble) Delete(ref ShardRef, key string) error {
	if err := p.settle(); err != nil {
		return err
	}
	if err := series.ValidateKey(key); err != nil {
		return err
	}
	if !p.enter() {
		return ErrClosed
	}
	defer p.state.RUnlock()
	// Like an append, a delete must not race a drop of its quantum (retention.go): both
	// would take the pair's points off the counters.
	p.dropMu.RLock()
	defer p.dropMu.RUnlock()
	if ref.Start < p.retFloor.Load() || ref.Start < p.budgetFloor.Load() {
		return nil // dropped already, or being dropped
	}
	id := pairID(ref, key)
	sid := string(id)
	defer p.pairs.lock(sid)()
	sum, err := p.summary(id, sid)
	if err != nil {
		return fmt.Errorf("store: delete %q: %w", key, err)
	}
	if sum.count == 0 {
		return nil
	}
	b := p.db.NewBatch()
	defer b.Close()
	delta := counters{shards: -1, points: -sum.count}
	err = errors.Join(
		b.DeleteRange(pairKey(nil, id, kindSummary), pairKey(nil, id, kindEnd), nil),
		b.Delete(unsealedKey(id), nil),
		b.Merge(countersKey, delta.encode(), nil),
	)
	if err == nil {
		err = p.commit(b)
	}
	if err != nil {
		return fmt.Errorf("store: delete %q: %w", key, err)
	}
	p.pairs.remember(sid, summary{})
	p.addCounters(delta)
	return nil
}
