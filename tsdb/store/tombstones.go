package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/cockroachdb/pebble"

	"github.com/tsdht/tsdht/tsdb/chunk"
	"github.com/tsdht/tsdht/tsdb/series"
)

// Deletes. A delete of [from, to) reaches each replica of each shard the range covers
// as DeleteRange: the replica drops the points it holds in the range and keeps a
// tombstone, the range, for that (shard, series) pair. From then on:
//
//   - points written directly by a coordinator (Append) are stored as usual: data
//     written after a delete is new data, and wins;
//   - points another replica sends (Restore: anti-entropy, hinted hand-off, read
//     repair) are dropped where a tombstone covers them, so a replica that missed the
//     delete cannot bring the deleted points back to one that has it — unless the
//     sender holds the same tombstone: then its points there were written after the
//     delete, and are kept.
//
// A tombstone lives as long as its quantum: retention drops both together. A pair
// keeps at most MaxTombstones disjoint ranges (adjacent and overlapping ones merge).

// Range is a half-open time range [From, To) in ns.
type Range struct {
	From, To int64
}

// Contains reports whether t is in r.
func (r Range) Contains(t int64) bool { return r.From <= t && t < r.To }

// MaxTombstones bounds the disjoint deleted ranges of one (shard, series) pair. Past
// it a delete is refused: delete a wider range (the whole quantum) instead.
const MaxTombstones = 64

// Deleter deletes points under tombstones.
type Deleter interface {
	// DeleteRange drops the points of key in shard ref with from <= t < to, records the
	// range as a tombstone of the pair (even when it holds nothing yet) and returns how
	// many points it dropped. A quantum the store has expired is a no-op.
	DeleteRange(ref ShardRef, key string, from, to int64) (int64, error)
	// Tombstones returns the pair's deleted ranges, disjoint and ascending.
	Tombstones(ref ShardRef, key string) ([]Range, error)
	// Restore appends points sent by another replica: those under the pair's
	// tombstones are dropped, except inside the ranges the sender deleted too
	// (RestoreOptions.SenderDeleted): a replica that applied the same delete holds there
	// only points written after it. With KeepHeld, a timestamp the pair already holds
	// keeps its value. It says how many points it stored and how many timestamps it
	// held with another value.
	Restore(ref ShardRef, key string, pts series.Points, o RestoreOptions) (Restored, error)
	// ForgetType removes the series' type, so that a new one may be declared: the
	// last step of deleting a whole series. Its points must be deleted first.
	ForgetType(key string) error
}

// RestoreOptions says how Restore treats the points another replica sends.
type RestoreOptions struct {
	// SenderDeleted lists the sender's tombstones of the pair: its points inside them
	// were written after the delete, and are kept.
	SenderDeleted []Range
	// KeepHeld keeps the value the pair holds at a timestamp the points carry too: they
	// only fill what the pair lacks. Points carry no write version, so an owner's copy
	// is not known to be newer than the receiver's: a copy read before a write reached
	// its sender, and sent after the write reached the receiver, would otherwise
	// replace the written value with the older one (DESIGN-NOTES.md, "overwrites").
	KeepHeld bool
}

// Restored says what a Restore did.
type Restored struct {
	// Stored is how many of the points were stored.
	Stored int
	// Conflicts is, with KeepHeld, how many timestamps the pair held with another
	// value than the points', and kept.
	Conflicts int
}

// dropHeld returns the points of p at timestamps held does not hold, and how many of
// p's timestamps held holds with another value (both sorted, of one type).
func dropHeld(p, held series.Points) (series.Points, int) {
	if held.Len() == 0 || p.Len() == 0 {
		return p, 0
	}
	keep := make([]int, 0, p.Len())
	conflicts, j := 0, 0
	for i, t := range p.T {
		for j < held.Len() && held.T[j] < t {
			j++
		}
		if j < held.Len() && held.T[j] == t {
			if !samePoint(&p, i, &held, j) {
				conflicts++
			}
			continue
		}
		keep = append(keep, i)
	}
	if len(keep) == p.Len() {
		return p, conflicts
	}
	out := series.Points{Type: p.Type}
	for _, i := range keep {
		out.AppendFrom(&p, i)
	}
	return out, conflicts
}

// addRange returns rs with r added, merged with what it overlaps or touches.
func addRange(rs []Range, r Range) ([]Range, error) {
	out := make([]Range, 0, len(rs)+1)
	for _, x := range rs {
		if x.To < r.From || r.To < x.From {
			out = append(out, x)
			continue
		}
		r = Range{min(r.From, x.From), max(r.To, x.To)}
	}
	out = append(out, r)
	sort.Slice(out, func(i, j int) bool { return out[i].From < out[j].From })
	if len(out) > MaxTombstones {
		return nil, fmt.Errorf("%d deleted ranges in one quantum of one series; at most %d (delete a wider range)", len(out), MaxTombstones)
	}
	return out, nil
}

// Exempt returns the ranges of rs minus every range of exempt: what a replica's
// tombstones delete from the points of a sender that holds the exempt ones.
func Exempt(rs, exempt []Range) []Range {
	out := append([]Range(nil), rs...)
	for _, e := range exempt {
		var next []Range
		for _, r := range out {
			if e.To <= r.From || r.To <= e.From {
				next = append(next, r)
				continue
			}
			if r.From < e.From {
				next = append(next, Range{r.From, e.From})
			}
			if e.To < r.To {
				next = append(next, Range{e.To, r.To})
			}
		}
		out = next
	}
	sort.Slice(out, func(i, j int) bool { return out[i].From < out[j].From })
	return out
}

// dropCovered returns the points of p outside every range of rs (p sorted).
func dropCovered(p series.Points, rs []Range) series.Points {
	if len(rs) == 0 || p.Len() == 0 {
		return p
	}
	var parts []series.Points
	lo := 0
	for _, r := range rs {
		i := sort.Search(p.Len(), func(i int) bool { return p.T[i] >= r.From })
		j := sort.Search(p.Len(), func(i int) bool { return p.T[i] >= r.To })
		if i > lo {
			parts = append(parts, p.Slice(lo, i))
		}
		lo = max(lo, j)
	}
	if lo < p.Len() {
		parts = append(parts, p.Slice(lo, p.Len()))
	}
	out := series.Concat(parts...)
	out.Type = p.Type
	return out
}

func encodeRanges(rs []Range) []byte {
	b := binary.AppendUvarint(nil, uint64(len(rs)))
	for _, r := range rs {
		b = binary.AppendVarint(b, r.From)
		b = binary.AppendVarint(b, r.To)
	}
	return b
}

func decodeRanges(v []byte) ([]Range, error) {
	n, k := binary.Uvarint(v)
	if k <= 0 || n > MaxTombstones || n > uint64(len(v)) {
		return nil, errCorruptValue("tombstones")
	}
	v = v[k:]
	rs := make([]Range, n)
	for i := range rs {
		var a, b int
		rs[i].From, a = binary.Varint(v)
		if a <= 0 {
			return nil, errCorruptValue("tombstones")
		}
		rs[i].To, b = binary.Varint(v[a:])
		if b <= 0 || rs[i].From >= rs[i].To {
			return nil, errCorruptValue("tombstones")
		}
		v = v[a+b:]
	}
	if len(v) != 0 {
		return nil, errCorruptValue("tombstones")
	}
	return rs, nil
}

func checkDelete(key string, from, to int64) error {
	if err := series.ValidateKey(key); err != nil {
		return err
	}
	if from >= to {
		return fmt.Errorf("delete of %q: empty or inverted range [%d, %d)", key, from, to)
	}
	return nil
}

// --- memory store ---

// DeleteRange implements Deleter.
func (m *Mem) DeleteRange(ref ShardRef, key string, from, to int64) (int64, error) {
	if err := checkDelete(key, from, to); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, ErrClosed
	}
	sk := memKey(ref, key)
	rs, err := addRange(m.tombs[sk], Range{from, to})
	if err != nil {
		return 0, err
	}
	if m.tombs == nil {
		m.tombs = make(map[shardKey][]Range)
	}
	m.tombs[sk] = rs
	old := m.shards[sk]
	if old == nil {
		return 0, nil
	}
	kept := dropCovered(*old, []Range{{from, to}})
	dropped := int64(old.Len() - kept.Len())
	m.points -= dropped
	if kept.Len() == 0 {
		delete(m.shards, sk)
	} else {
		*old = kept
	}
	return dropped, nil
}

// Tombstones implements Deleter.
func (m *Mem) Tombstones(ref ShardRef, key string) ([]Range, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return nil, ErrClosed
	}
	return append([]Range(nil), m.tombs[memKey(ref, key)]...), nil
}

// Restore implements Deleter.
func (m *Mem) Restore(ref ShardRef, key string, pts series.Points, o RestoreOptions) (Restored, error) {
	if empty, err := prepareAppend(key, &pts); empty || err != nil {
		return Restored{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var r Restored
	pts = dropCovered(pts, Exempt(m.tombs[memKey(ref, key)], o.SenderDeleted))
	if held := m.shards[memKey(ref, key)]; o.KeepHeld && held != nil && pts.Len() > 0 {
		pts, r.Conflicts = dropHeld(pts, held.Trim(pts.T[0], pts.T[pts.Len()-1]+1))
	}
	if pts.Len() == 0 {
		return r, nil
	}
	r.Stored = pts.Len()
	return r, m.appendLocked(ref, key, pts)
}

// ForgetType implements Deleter.
func (m *Mem) ForgetType(key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	delete(m.types, key)
	delete(m.quanta, key)
	return nil
}

// --- pebble store ---

// tombState: whether the store holds tombstones (tombsUnknown until first asked).
const (
	tombsUnknown = iota
	tombsNone
	tombsSome
)

// famTombstone: 'd' ‖ pair id → the pair's deleted ranges (encodeRanges). Keyed like
// the pairs, by quantum first, so retention drops them with their quanta.
const famTombstone = 'd'

func tombstoneKey(id []byte) []byte { return append([]byte{famTombstone}, id...) }

func (p *Pebble) loadTombstones(id []byte) ([]Range, error) {
	// A store that never deleted anything answers every read's question at no cost.
	switch p.tombState.Load() {
	case tombsNone:
		return nil, nil
	case tombsUnknown:
		it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: []byte{famTombstone}, UpperBound: []byte{famTombstone + 1}})
		if err != nil {
			return nil, err
		}
		any := it.First()
		if err := errors.Join(it.Error(), it.Close()); err != nil {
			return nil, err
		}
		if !any {
			p.tombState.CompareAndSwap(tombsUnknown, tombsNone)
			return nil, nil
		}
		p.tombState.Store(tombsSome)
	}
	v, closer, err := p.db.Get(tombstoneKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return decodeRanges(v)
}

// Tombstones implements Deleter.
func (p *Pebble) Tombstones(ref ShardRef, key string) ([]Range, error) {
	if err := series.ValidateKey(key); err != nil {
		return nil, err
	}
	if !p.enter() {
		return nil, ErrClosed
	}
	defer p.state.RUnlock()
	return p.loadTombstones(pairID(ref, key))
}

// DeleteRange implements Deleter. It rewrites the pair's remaining points as fresh
// blocks, in one atomic batch with the tombstone; the sealer compresses them later.
func (p *Pebble) DeleteRange(ref ShardRef, key string, from, to int64) (int64, error) {
	if err := p.settle(); err != nil {
		return 0, err
	}
	if err := checkDelete(key, from, to); err != nil {
		return 0, err
	}
	if !p.enter() {
		return 0, ErrClosed
	}
	defer p.state.RUnlock()
	p.dropMu.RLock()
	defer p.dropMu.RUnlock()
	if ref.Start < p.retFloor.Load() || ref.Start < p.budgetFloor.Load() {
		return 0, nil // expired: retention drops whatever is left
	}
	id := pairID(ref, key)
	sid := string(id)
	defer p.pairs.lock(sid)()
	if err := p.failure(); err != nil {
		return 0, err
	}
	fail := func(err error) (int64, error) { return 0, fmt.Errorf("store: delete from %q: %w", key, err) }
	rs, err := p.loadTombstones(id)
	if err != nil {
		return fail(err)
	}
	if rs, err = addRange(rs, Range{from, to}); err != nil {
		return fail(err)
	}
	sum, err := p.summary(id, sid)
	if err != nil {
		return fail(err)
	}
	b := p.db.NewBatch()
	defer b.Close()
	if err := b.Set(tombstoneKey(id), encodeRanges(rs), nil); err != nil {
		return fail(err)
	}
	p.tombState.Store(tombsSome) // before the commit: a read after it must look
	var dropped int64
	next := sum
	var delta counters
	if sum.count > 0 && sum.maxT >= from && sum.minT < to {
		all, _, err := p.readPair(id, math.MinInt64, math.MaxInt64)
		if err != nil {
			return fail(err)
		}
		kept := dropCovered(all, []Range{{from, to}})
		dropped = int64(all.Len() - kept.Len())
		if dropped > 0 {
			if kept.Len() == 0 {
				next = summary{}
				delta = counters{shards: -1, points: -dropped}
				err = errors.Join(
					b.DeleteRange(pairKey(nil, id, kindSummary), pairKey(nil, id, kindEnd), nil),
					b.Delete(unsealedKey(id), nil))
			} else {
				delta = counters{points: -dropped}
				next, err = p.rewritePair(b, id, sum, kept)
			}
			if err != nil {
				return fail(err)
			}
			err = b.Merge(countersKey, delta.encode(), nil)
			if err != nil {
				return fail(err)
			}
		}
	}
	if err := p.commit(b); err != nil {
		return fail(err)
	}
	p.pairs.remember(sid, next)
	p.changes.note(sid) // the tombstone, even if nothing here was covered: owners must learn it
	p.addCounters(delta)
	return dropped, nil
}

// rewritePair replaces all of pair id's chunks and blocks with pts, as blocks numbered
// after the old ones (so no stale cached chunk is read), and marks the pair unsealed.
func (p *Pebble) rewritePair(b *pebble.Batch, id []byte, sum summary, pts series.Points) (summary, error) {
	if err := p.deleteKeys(b, pairKey(nil, id, kindChunk), pairKey(nil, id, kindEnd)); err != nil {
		return summary{}, err
	}
	enc := encoders.Get().(*chunk.Encoder)
	defer encoders.Put(enc)
	n := pts.Len()
	next := summary{count: int64(n), minT: pts.T[0], maxT: pts.T[n-1], nextBlock: sum.nextBlock, tailBlock: sum.nextBlock}
	var v []byte
	var err error
	for i := 0; i < n; i += p.opts.ChunkMaxPoints {
		part := pts.Slice(i, min(i+p.opts.ChunkMaxPoints, n))
		if v, err = enc.Encode(v[:0], part); err != nil {
			return summary{}, err
		}
		if err := b.Set(blockKey(nil, id, next.nextBlock), v, nil); err != nil {
			return summary{}, err
		}
		next.nextBlock++
	}
	if next.nextBlock-next.tailBlock > 1 {
		next.tailBlock = next.nextBlock // big blocks: leave the fold alone
	}
	return next, errors.Join(
		b.Set(pairKey(nil, id, kindSummary), next.encode(), nil),
		b.Set(unsealedKey(id), nil, nil))
}

// Restore implements Deleter: Append with the pair's tombstones applied, both under
// the pair's lock, so a concurrent delete is either before (and filters) or after
// (and drops what was restored).
func (p *Pebble) Restore(ref ShardRef, key string, pts series.Points, o RestoreOptions) (Restored, error) {
	if err := p.settle(); err != nil {
		return Restored{}, err
	}
	if empty, err := prepareAppend(key, &pts); empty || err != nil {
		return Restored{}, err
	}
	var r Restored
	err := p.append([]PairAppend{{Ref: ref, Key: key, Points: pts}}, func(id []byte, pts *series.Points) error {
		rs, err := p.loadTombstones(id)
		if err != nil {
			return err
		}
		*pts = dropCovered(*pts, Exempt(rs, o.SenderDeleted))
		if o.KeepHeld && pts.Len() > 0 {
			// Under the pair's lock: what it holds now is what the append would replace.
			held, _, err := p.readPair(id, pts.T[0], pts.T[pts.Len()-1])
			if err != nil {
				return err
			}
			*pts, r.Conflicts = dropHeld(*pts, held)
		}
		r.Stored = pts.Len()
		return nil
	}, false)
	return r, err
}

// ForgetType implements Deleter.
func (p *Pebble) ForgetType(key string) error {
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
	p.catMu.Lock()
	defer p.catMu.Unlock()
	_, ok, err := p.loadType(key)
	if err != nil || !ok {
		p.types.forget(key)
		return err
	}
	b := p.db.NewBatch()
	defer b.Close()
	err = errors.Join(b.Delete(metaKey(key), nil), b.Merge(countersKey, counters{series: -1}.encode(), nil))
	if err == nil {
		err = p.commit(b)
	}
	if err != nil {
		return fmt.Errorf("store: forget the type of %q: %w", key, err)
	}
	p.types.forget(key)
	p.series.Add(-1)
	return nil
}
