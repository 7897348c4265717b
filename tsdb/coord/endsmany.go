package coord

import (
	"context"
	"math"
	"time"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// EndsMany answers, for many series each over its own range, the statistics of the
// newest quantum of the series that holds a point in the range (the oldest, when
// oldest is set): what a DESC LIMIT 1, last(), ASC LIMIT 1 or first() of each needs,
// at a cost that follows the series asked, not their history.
//
// The catalog entries of all the series are read in one request per registry replica
// at read quorum (entryRanges, as HistoryMany reads them); each entry says where the
// series' newest quantum is (Newest, see bounds.go) and bounds its points. Then one
// AggregateMany of one quantum per series — Newest's, or the one holding the range's
// end when the range ends before it; the quantum of the range's start, or of the
// entry's First when later, for oldest — asks each node once for all of them;
// descending, the quantum of the newest Newest this coordinator has seen of each series
// is aggregated while the entries are read, and taken where the entry agrees (a
// repeated query waits for one round of requests, not two). Only the series whose
// quantum holds no point in the range (its points deleted, or never written there) are
// walked on, all together, over the next quantum and then endsGrowth times more quanta
// at each step, until the range is exhausted.
//
// Each series' result holds at most one window, of width math.MaxInt64 (so its Start
// is 0 for any time at or after the epoch), whose partial covers the part of the range
// read: its LastT (FirstT, for oldest) and Last (First) are the series' latest
// (earliest) point in its range; its other statistics describe that part only. A
// series without points in its range has no window and no error; an unknown one
// likewise. A series whose entry or aggregate could not be read has Err set: the
// caller reads it another way. Exact for every point acknowledged before the call, as
// Latest.
func (c *Coordinator) EndsMany(ctx context.Context, items []SeriesRange, oldest bool, opt wire.GetOptions) ([]AggManyResult, error) {
	return c.EndsManyListed(ctx, items, nil, oldest, opt)
}

// EndsManyListed is EndsMany, given the entries a listing read (SeriesListed): where
// listed[i] is items[i]'s series' entry merged from at least the read quorum's answers,
// it is taken as read, and the series costs no catalog read and no speculation — one
// AggregateMany, where its quantum holds a point in its range. The others are read as
// EndsMany reads them. listed may be shorter than items, or nil.
func (c *Coordinator) EndsManyListed(ctx context.Context, items []SeriesRange, listed []Listed, oldest bool, opt wire.GetOptions) ([]AggManyResult, error) {
	known := make([]bool, len(items)) // listed[i] is taken as items[i]'s entry
	for i := range min(len(items), len(listed)) {
		known[i] = listed[i].Entry.Key == items[i].Key && listed[i].Replicas >= c.readQuorum(opt)
	}
	// Descending, the quantum of the newest Newest this coordinator has seen of each
	// series is aggregated while the entries are read (as Latest speculates): where the
	// entry says it is still the newest, its answer is taken, and a repeated query costs
	// one round of requests, not two.
	var spec []SeriesRange
	var specAt []int // spec[j] is items[specAt[j]]
	if !oldest && len(items) <= MaxManySeries {
		for i, it := range items {
			if known[i] {
				continue
			}
			seen, ok := c.seenNewest(it.Key)
			if !ok {
				continue
			}
			q := c.cachedQ(it.Key).Duration().Nanoseconds()
			if lo := agg.WindowStart(seen, q); lo <= math.MaxInt64-q {
				if from, to := max(lo, it.From), min(lo+q, it.To); from < to {
					spec = append(spec, SeriesRange{Key: it.Key, From: from, To: to})
					specAt = append(specAt, i)
				}
			}
		}
	}
	var specGot []AggManyResult
	specDone := make(chan struct{})
	go func() {
		defer close(specDone)
		if len(spec) > 0 {
			specGot, _ = c.AggregateMany(ctx, spec, math.MaxInt64, opt)
		}
	}()
	er, err := c.entryRanges(ctx, items, listed, known, opt)
	<-specDone
	if err != nil {
		return nil, err
	}
	specOf := make(map[int]int, len(specGot)) // items index -> spec index
	for j := range specGot {
		specOf[specAt[j]] = j
	}
	out := make([]AggManyResult, len(items))
	type walk struct {
		i      int
		lo, hi int64 // where the series' points in its range can be
		q      int64 // its quantum, ns
		at     int64 // the edge of what is read so far: descending, its start; else its end
		step   int64 // quanta the next read covers
	}
	var walks []walk
	for i := range items {
		r := &er[i]
		out[i].Err, out[i].Type = r.err, r.desc.Type
		if r.err != nil || r.lo >= r.hi {
			continue
		}
		// Nothing read yet; descending, the first read is [start, hi) (Newest's quantum,
		// or from the Tail hint) where start < hi, else the quantum holding hi-1.
		w := walk{i: i, lo: r.lo, hi: r.hi, q: r.desc.Q.Duration().Nanoseconds(), step: 1, at: r.hi}
		if oldest {
			w.at = r.lo
		}
		if j, ok := specOf[i]; ok && r.start < r.hi && spec[j].From == r.start && spec[j].To == r.hi && specGot[j].Err == nil {
			// The speculation read exactly the first range.
			if win, ok := endWindow(specGot[j].Windows, false); ok {
				out[i].Windows = []agg.Window{win}
				continue
			}
			if w.at = r.start; w.at <= w.lo {
				continue // nothing below it in the range
			}
		}
		walks = append(walks, w)
	}
	first := true
	for len(walks) > 0 {
		ask := make([]SeriesRange, len(walks))
		for j := range walks {
			w := &walks[j]
			key := items[w.i].Key
			if oldest {
				to := w.hi
				if end := agg.WindowStart(w.at, w.q); end <= math.MaxInt64-w.step*w.q && end+w.step*w.q < to {
					to = end + w.step*w.q
				}
				ask[j] = SeriesRange{Key: key, From: w.at, To: to}
				continue
			}
			from := w.lo
			if first && er[w.i].start < w.hi && w.at == w.hi {
				from = er[w.i].start
			} else if s := agg.WindowStart(w.at-1, w.q); s >= math.MinInt64+(w.step-1)*w.q && s-(w.step-1)*w.q > from {
				from = s - (w.step-1)*w.q
			}
			ask[j] = SeriesRange{Key: key, From: from, To: w.at}
		}
		first = false
		got, err := c.AggregateMany(ctx, ask, math.MaxInt64, opt)
		if err != nil {
			return nil, err
		}
		next := walks[:0]
		for j, w := range walks {
			g := got[j]
			switch {
			case isUnknown(g.Err): // deleted since its entry was read: no points
				continue
			case g.Err != nil:
				out[w.i].Err = g.Err
				continue
			}
			if win, ok := endWindow(g.Windows, oldest); ok {
				out[w.i].Windows = []agg.Window{win}
				continue
			}
			if oldest {
				w.at = ask[j].To
			} else {
				w.at = ask[j].From
			}
			if w.lo < w.at && w.at < w.hi {
				w.step = min(w.step*endsGrowth, math.MaxInt64/w.q/2, quantaPerRangeLimit)
				next = append(next, w)
			}
		}
		walks = next
	}
	return out, nil
}

// endsGrowth is how many times more quanta each step of EndsMany's walk covers than
// the one before.
const endsGrowth = latestGrowth

// endWindow returns the last window of ws holding a point (the first, when oldest).
func endWindow(ws []agg.Window, oldest bool) (agg.Window, bool) {
	for k := range ws {
		j := len(ws) - 1 - k
		if oldest {
			j = k
		}
		if ws[j].Count > 0 {
			return ws[j], true
		}
	}
	return agg.Window{}, false
}

// entryRange is where a series' catalog entry says the acknowledged points of a range
// can be (searchRange): [lo, hi), Latest's start, and the series' type and quantum.
type entryRange struct {
	desc          Desc
	lo, start, hi int64
	err           error // the entry or the type could not be read: read the series alone
}

// readQuorum is the read quorum opt asks for, else the cluster's.
func (c *Coordinator) readQuorum(opt wire.GetOptions) int {
	if opt.ReadQuorum != 0 {
		return opt.ReadQuorum
	}
	return c.cfg.ReadQuorum
}

// entryRanges reads the catalog entries of items' series in one request per registry
// replica, at opt's read quorum — but those known says listed holds, taken as read —
// and narrows each item's range to where its entry says its acknowledged points can
// be. A series the catalog does not hold (never written, deleted) gets an empty range
// and no error. known may be shorter than items, or nil.
func (c *Coordinator) entryRanges(ctx context.Context, items []SeriesRange, listed []Listed, known []bool, opt wire.GetOptions) ([]entryRange, error) {
	if len(items) > MaxManySeries {
		return nil, rpc.Errorf(wire.CodeBadInput, "%d series in one read; at most %d: ask in parts", len(items), MaxManySeries)
	}
	var keys []string
	var at []int // keys[j] is items[at[j]]'s
	for i, it := range items {
		if i >= len(known) || !known[i] {
			keys = append(keys, it.Key)
			at = append(at, i)
		}
	}
	out := make([]entryRange, len(items))
	entries, found, errs := make([]catalog.Entry, len(items)), make([]bool, len(items)), make([]error, len(items))
	for i := range items {
		if i < len(known) && known[i] {
			entries[i], found[i] = listed[i].Entry, true
		}
	}
	if len(keys) > 0 {
		es, fs, ers := c.readEntriesAt(ctx, keys, c.readQuorum(opt))
		for j, i := range at {
			entries[i], found[i], errs[i] = es[j], fs[j], ers[j]
		}
	}
	// The series the entries say may hold points in their ranges, and their quanta
	// (looked up as GetMany would, which then finds them cached).
	p := &manyPlan{descs: make([]Desc, len(items)), errs: make([]error, len(items))}
	for i, it := range items {
		e := &entries[i]
		switch {
		case errs[i] != nil:
			p.errs[i] = errs[i]
		case !found[i] || !e.Live() || !e.HasBounds || it.From >= it.To:
			p.errs[i] = errNothing // no points: nothing to look up
		}
	}
	c.lookupMany(ctx, items, p)
	now := time.Now().UnixNano()
	for i, it := range items {
		switch {
		case p.errs[i] == errNothing:
			continue
		case p.errs[i] != nil:
			if !isUnknown(p.errs[i]) {
				out[i].err = p.errs[i]
			}
			continue
		}
		out[i].desc = p.descs[i]
		c.seeNewest(entries[i]) // where EndsMany speculates next time
		out[i].lo, out[i].start, out[i].hi = c.searchRange(entries[i], p.descs[i].Q, it.From, it.To, now)
	}
	return out, nil
}
