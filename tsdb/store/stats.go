package store

import (
	"bytes"
	"fmt"
	"math"

	"github.com/cockroachdb/pebble"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
)

// Analyzer computes aggregates where the points are.
//
// The pebble store keeps each pair's statistics in its summary record and updates them
// in the same batch as every append: new points are merged in; an overwrite that keeps
// a value changes nothing; one that changes a value recomputes the statistics from the
// pair's points (min and max cannot be taken back). A seal recomputes them from the
// sorted points, so a sealed pair's statistics are a function of its points alone,
// whatever order they arrived in. A summary written before statistics were kept gets
// them from its points when first asked. The memory store computes them on each call.
type Analyzer interface {
	// PairStats returns the aggregate of all the points of series key in the shard,
	// with its order-independent Hash set, and whether the store holds the pair (as
	// Read's held).
	PairStats(ref ShardRef, key string) (stats agg.Partial, held bool, err error)
	// Aggregate returns the non-empty windows of width every (ns, > 0) over the pair's
	// points with from <= t < to, ascending, computed from the points (Hash unset), and
	// whether the store holds the pair.
	Aggregate(ref ShardRef, key string, from, to, every int64) (ws []agg.Window, held bool, err error)
}

// pairStats returns the statistics of all of p's points, hash included.
func pairStats(p *series.Points) agg.Partial {
	n := p.Len()
	return agg.WithHash(agg.FromPoints(p, 0, n), p, 0, n)
}

// samePoint reports whether point i of p and point j of q hold the same value, bit for
// bit (so -0 and +0 differ, as they do in the hash).
func samePoint(p *series.Points, i int, q *series.Points, j int) bool {
	switch p.Type {
	case series.Float:
		return math.Float64bits(p.F[i]) == math.Float64bits(q.F[j])
	case series.Int:
		return p.I[i] == q.I[j]
	case series.String:
		return p.S[i] == q.S[j]
	}
	return false
}

// statsAfter returns pair id's statistics once pts (sorted) is appended. old holds the
// pair's points in pts' time span (countNew read them) and fresh how many of pts'
// timestamps the pair does not hold. The caller holds the pair's lock.
func (p *Pebble) statsAfter(id []byte, sum summary, pts, old *series.Points, fresh int64) (agg.Partial, error) {
	if sum.count == 0 {
		return pairStats(pts), nil
	}
	recompute := !sum.hasStats
	var added series.Points
	if !recompute && fresh < int64(pts.Len()) {
		added.Type = pts.Type
		i := 0
		for k := range pts.T {
			for i < old.Len() && old.T[i] < pts.T[k] {
				i++
			}
			if i < old.Len() && old.T[i] == pts.T[k] {
				if !samePoint(old, i, pts, k) {
					recompute = true // a value changed: min or max may have gone
					break
				}
				continue
			}
			added.AppendFrom(pts, k)
		}
		if !recompute {
			pts = &added
		}
	}
	if recompute {
		all, _, err := p.readPair(id, math.MinInt64, math.MaxInt64)
		if err != nil {
			return agg.Partial{}, err
		}
		if all.Len() > 0 && all.Type != pts.Type {
			return agg.Partial{}, fmt.Errorf("%w: pair %x holds %s points, appending %s", ErrCorrupt, id, all.Type, pts.Type)
		}
		merged := series.Merge(all, *pts)
		return pairStats(&merged), nil
	}
	return agg.Merge(sum.stats, pairStats(pts)), nil
}

// PairAgg is one pair's part of an AggregateBatch: PairStats' arguments, and
// Aggregate's where Every > 0.
type PairAgg struct {
	Ref ShardRef
	Key string
	// From, To and Every are the windows wanted from the pair's points, as Aggregate
	// takes them; Every 0 asks for the pair's statistics alone.
	From, To, Every int64
}

// AggBatcher is an Analyzer that answers many pairs' statistics and windows in one
// pass: what a replica answering an aggregate of many shards asks.
type AggBatcher interface {
	// AggregateBatch calls yield(i, stats, held, ws) for each i in order, with what
	// PairStats(aggs[i].Ref, aggs[i].Key) returns and, where aggs[i].Every > 0, the
	// windows Aggregate returns for it; it stops at the first error (yield's
	// included). yield keeps ws; it must not call the store. Pairs in the order of
	// ComparePairs cost the least.
	AggregateBatch(aggs []PairAgg, yield func(i int, stats agg.Partial, held bool, ws []agg.Window) error) error
}

// AggregateBatch is a's AggregateBatch when a is an AggBatcher, and otherwise calls
// PairStats, and Aggregate where asked, for each of aggs.
func AggregateBatch(a Analyzer, aggs []PairAgg, yield func(i int, stats agg.Partial, held bool, ws []agg.Window) error) error {
	if b, ok := a.(AggBatcher); ok {
		return b.AggregateBatch(aggs, yield)
	}
	for i := range aggs {
		r := &aggs[i]
		st, held, err := a.PairStats(r.Ref, r.Key)
		if err != nil {
			return err
		}
		var ws []agg.Window
		if r.Every > 0 && held {
			if ws, _, err = a.Aggregate(r.Ref, r.Key, r.From, r.To, r.Every); err != nil {
				return err
			}
		}
		if err := yield(i, st, held, ws); err != nil {
			return err
		}
	}
	return nil
}

// PairStats implements Analyzer.
func (p *Pebble) PairStats(ref ShardRef, key string) (agg.Partial, bool, error) {
	if err := p.settle(); err != nil {
		return agg.Partial{}, false, err
	}
	if err := series.ValidateKey(key); err != nil {
		return agg.Partial{}, false, err
	}
	if !p.enter() {
		return agg.Partial{}, false, ErrClosed
	}
	defer p.state.RUnlock()
	id := pairID(ref, key)
	sid := string(id)
	s, err := p.summary(id, sid)
	if err != nil {
		return agg.Partial{}, false, fmt.Errorf("store: stats of %q: %w", key, err)
	}
	return p.statsOf(id, sid, key, s)
}

// statsOf returns the statistics of pair id (sid = string(id)) of series key, whose
// summary is s; the caller has entered the store.
func (p *Pebble) statsOf(id []byte, sid, key string, s summary) (agg.Partial, bool, error) {
	if s.count == 0 {
		return agg.Partial{}, false, nil
	}
	if s.hasStats {
		return s.stats, true, nil
	}
	// A summary from before statistics were kept: compute them under the pair's lock
	// and cache them; the pair's next append or seal stores them.
	defer p.pairs.lock(sid)()
	s, err := p.summary(id, sid)
	if err != nil || s.count == 0 || s.hasStats {
		return s.stats, s.count > 0, err
	}
	all, _, err := p.readPair(id, math.MinInt64, math.MaxInt64)
	if err != nil {
		return agg.Partial{}, false, fmt.Errorf("store: stats of %q: %w", key, err)
	}
	s.stats, s.hasStats = pairStats(&all), true
	p.pairs.remember(sid, s)
	return s.stats, true, nil
}

// AggregateBatch implements AggBatcher: a pair's summary comes from the cache of
// recently written pairs (where only its statistics are asked) or from one iterator
// that seeks forward from pair to pair, and its points, where windows are asked of it,
// from the same iterator at the same place — not from a lookup and an iterator built
// over every level of the tree for each pair. Pairs in the order of their keys
// (ComparePairs) keep every seek forward.
func (p *Pebble) AggregateBatch(aggs []PairAgg, yield func(i int, stats agg.Partial, held bool, ws []agg.Window) error) error {
	if len(aggs) == 0 {
		return nil
	}
	if err := p.settle(); err != nil {
		return err
	}
	for i := range aggs {
		if err := series.ValidateKey(aggs[i].Key); err != nil {
			return err
		}
		if aggs[i].Every != 0 {
			if err := agg.CheckWidth(aggs[i].Every); err != nil {
				return err
			}
		}
	}
	if !p.enter() {
		return ErrClosed
	}
	defer p.state.RUnlock()
	var it *pebble.Iterator // opened at the first pair it is needed for
	defer func() {
		if it != nil {
			it.Close()
		}
	}()
	var idBuf [pairIDStack]byte
	var keys []byte // the iterator copies each pair's bounds, so one buffer serves every pair
	family := [2][]byte{{famPair}, {famPair + 1}}
	narrowed := false // the iterator's bounds are a pair's, not the family's
	for i := range aggs {
		r := &aggs[i]
		id := appendPairID(idBuf[:0], r.Ref, r.Key)
		// A pair whose points are read takes its summary from the same snapshot.
		var s summary
		cached := false
		if r.Every == 0 {
			s, cached = p.pairs.summaryOf(id)
		}
		at := false // it stands at the pair's summary
		var lower, seek []byte
		if !cached || r.Every > 0 {
			if it == nil {
				var err error
				if it, err = p.db.NewIter(&pebble.IterOptions{LowerBound: family[0], UpperBound: family[1]}); err != nil {
					return fmt.Errorf("store: aggregate of %d pairs: %w", len(aggs), err)
				}
			}
			if need := 3*(len(id)+2) + 8; cap(keys) < need {
				keys = make([]byte, 0, need)
			}
			var upper []byte
			lower, upper, seek = pairBounds(keys, id)
			// A pair whose points are read is bounded to its keys, where the scan ends. A
			// summary alone is sought within the family's bounds: seeks forward one after
			// another then step on from where the last one stood (pebble's seek using Next),
			// which new bounds would rule out.
			switch {
			case r.Every > 0:
				it.SetBounds(lower, upper)
				narrowed = true
			case narrowed:
				it.SetBounds(family[0], family[1])
				narrowed = false
			}
			at = it.SeekGE(lower) && bytes.Equal(it.Key(), lower)
			if err := it.Error(); err != nil {
				return p.readFailed(r.Ref, r.Key, err)
			}
			if at && !cached {
				var err error
				if s, err = decodeSummary(it.Value()); err != nil {
					return fmt.Errorf("store: stats of %q: %w", r.Key, err)
				}
			}
		}
		var st agg.Partial
		held := s.count > 0
		if held && s.hasStats {
			st = s.stats
		} else if held {
			var err error
			if st, held, err = p.statsOf(id, string(id), r.Key, s); err != nil {
				return err
			}
		}
		var ws []agg.Window
		if lo, hi := inclusive(r.From, r.To); held && at && r.Every > 0 && lo <= hi {
			pts, err := p.scanFrom(it, id, seek, lo, hi)
			if err != nil {
				return p.readFailed(r.Ref, r.Key, err)
			}
			if pts.Len() > 0 {
				ws = agg.Windows(&pts, r.From, r.To, r.Every)
			}
		}
		if err := yield(i, st, held, ws); err != nil {
			return err
		}
	}
	return nil
}

// Aggregate implements Analyzer.
func (p *Pebble) Aggregate(ref ShardRef, key string, from, to, every int64) ([]agg.Window, bool, error) {
	if err := p.settle(); err != nil {
		return nil, false, err
	}
	if err := agg.CheckWidth(every); err != nil {
		return nil, false, err
	}
	pts, held, err := p.Read(ref, key, from, to)
	if err != nil || pts.Len() == 0 {
		return nil, held, err
	}
	return agg.Windows(&pts, from, to, every), held, nil
}

// PairStats implements Analyzer for the memory store, from the points.
func (m *Mem) PairStats(ref ShardRef, key string) (agg.Partial, bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return agg.Partial{}, false, ErrClosed
	}
	pts := m.shards[memKey(ref, key)]
	if pts == nil || pts.Len() == 0 {
		return agg.Partial{}, false, nil
	}
	return pairStats(pts), true, nil
}

// Aggregate implements Analyzer for the memory store.
func (m *Mem) Aggregate(ref ShardRef, key string, from, to, every int64) ([]agg.Window, bool, error) {
	if err := agg.CheckWidth(every); err != nil {
		return nil, false, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return nil, false, ErrClosed
	}
	pts := m.shards[memKey(ref, key)]
	if pts == nil {
		return nil, false, nil
	}
	return agg.Windows(pts, from, to, every), true, nil
}

// AggregateQuantum returns the windows of width every over [from, to) of series key's
// points in shard ref, whose quantum is [begin, end) in ns, and whether a holds the
// pair. A quantum inside [from, to) and inside one window is answered from the pair's
// statistics without touching its points; any other from the points. Windows carry no
// Hash: a reader compares copies by their PairStats.
func AggregateQuantum(a Analyzer, ref ShardRef, key string, begin, end, from, to, every int64) ([]agg.Window, bool, error) {
	if err := agg.CheckWidth(every); err != nil {
		return nil, false, err
	}
	if WholeQuantum(begin, end, from, to, every) {
		st, held, err := a.PairStats(ref, key)
		if err != nil || st.Count == 0 {
			return nil, held, err
		}
		st.Hash = 0
		return []agg.Window{{Start: agg.WindowStart(begin, every), Partial: st}}, held, nil
	}
	return a.Aggregate(ref, key, from, to, every)
}

// WholeQuantum reports whether the quantum [begin, end) lies inside [from, to) and
// inside one window of width every, so that its statistics answer for it.
func WholeQuantum(begin, end, from, to, every int64) bool {
	return from <= begin && end <= to && agg.WindowStart(begin, every) == agg.WindowStart(end-1, every)
}

// statsAgree reports whether st holds what is exact in pts' statistics: count, span,
// first and last, min and max, the hash. (The float sum and variance are only close.)
func statsAgree(st *agg.Partial, pts *series.Points) bool {
	want := pairStats(pts)
	same := st.Count == want.Count && st.FirstT == want.FirstT && st.LastT == want.LastT && st.Hash == want.Hash
	switch pts.Type {
	case series.Float:
		// Min and max by value: which zero an extreme of -0 and +0 is depends on order.
		eq := func(a, b float64) bool { return a == b || (a != a && b != b) }
		bits := func(f float64) uint64 { return math.Float64bits(f) }
		same = same && eq(st.Min, want.Min) && eq(st.Max, want.Max) &&
			bits(st.First) == bits(want.First) && bits(st.Last) == bits(want.Last)
	case series.Int:
		same = same && st.IMin == want.IMin && st.IMax == want.IMax && st.ISum == want.ISum &&
			st.IFirst == want.IFirst && st.ILast == want.ILast
	case series.String:
		same = same && st.SFirst == want.SFirst && st.SLast == want.SLast
	}
	return same
}
