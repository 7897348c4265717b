package tsdb

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Series bounds and the latest point, in about one round trip to the registry replicas.
//
// A series' catalog entry (kept at quorum on its registry replicas) holds bounds of the
// times written to it: First and Last, rounded out to hours, widened at quorum before
// points outside them are written (noteWrite), so they never miss a stored point. A
// write then reports the time of its newest point — the tail — to the registry replicas
// in the background, at most once per quantum of data per series and coordinator, and
// without waiting for a quorum (tailReporter): a hint that may lag, never a bound.
//
// A write stamped more than aheadSlack past its coordinator's clock (MaxFuture allows
// that much: a device whose clock lies) also records, at quorum and before its points
// are written, the entry's Ahead: the latest such time, rounded up to a minute.
//
// Latest reads the entry once and aggregates, from the statistics, only the quanta from
// the tail's to the end of the bounds — capped at the coordinator's clock plus
// aheadSlack plus latestClockMargin, or at Ahead when that is later: two or three quanta for
// a live series. A stale or missing tail, a late point, or a delete of
// the newest points only widen what it reads (it walks back from there), never its
// answer: the answer is the aggregate's, which is exact (complete or fails).
//
// The guarantee, as tested: Latest returns the latest point acknowledged before it
// started, provided the clock of no coordinator that wrote ran more than
// latestClockMargin ahead of the clock of the one answering; with one registry replica
// down it still answers (read quorum).

// aheadSlack is how far past its clock a write may be stamped without recording Ahead.
const aheadSlack = 5 * time.Second

// latestClockMargin is how far a writing coordinator's clock may run ahead of the
// answering coordinator's for Latest to stay exact (see above).
const latestClockMargin = 5 * time.Second

// maxTailsInFlight bounds the tail reports in flight on one coordinator; past it a
// report is dropped (it is a hint: the next one carries a newer tail).
const maxTailsInFlight = 64

// tailReporter sends tails to the registry replicas in the background, one report in
// flight per series.
type tailReporter struct {
	mu      sync.Mutex
	pending map[string]catalog.Entry // a newer report waiting for the one in flight
	busy    map[string]bool
	wg      sync.WaitGroup
	closed  bool
}

// noteTail reports, after an acknowledged write, that a point at t was stored. It never
// blocks on the network.
func (c *Coordinator) noteTail(key string, t int64) {
	k := c.cat
	cur, ok := k.cached(key)
	if !ok || !cur.HasBounds || t < cur.First || t > cur.Last {
		return
	}
	q := c.cfg.DHT.Quantum
	if cur.HasTail && q.StartNanos(t) <= q.StartNanos(cur.Tail) {
		return // a report of this quantum was sent: Latest reads the whole quantum anyway
	}
	upd := catalog.Entry{Key: key, Type: cur.Type, Created: cur.Created, HasBounds: true, First: cur.First, Last: cur.Last,
		HasTail: true, Tail: t}
	k.advanceTail(key, t)
	r := &c.tails
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if r.busy[key] {
		if old, ok := r.pending[key]; !ok || old.Tail < t {
			r.pending[key] = upd
		}
		return
	}
	if len(r.busy) >= maxTailsInFlight {
		return
	}
	if r.busy == nil {
		r.busy, r.pending = map[string]bool{}, map[string]catalog.Entry{}
	}
	r.busy[key] = true
	r.wg.Add(1)
	go c.sendTails(upd)
}

// sendTails sends e and then any newer report of its series that arrived meanwhile.
func (c *Coordinator) sendTails(e catalog.Entry) {
	r := &c.tails
	defer r.wg.Done()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.CallTimeout)
		if _, err := c.mergeEntry(ctx, e, 1); err != nil {
			c.log.Debug("tail report failed (a hint: latest stays exact)", "series", e.Key, "err", err)
		}
		cancel()
		r.mu.Lock()
		next, ok := r.pending[e.Key]
		delete(r.pending, e.Key)
		if !ok || r.closed {
			delete(r.busy, e.Key)
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		e = next
	}
}

// closeTails stops new reports and waits for those in flight.
func (c *Coordinator) closeTails() {
	c.tails.mu.Lock()
	c.tails.closed = true
	c.tails.mu.Unlock()
	c.tails.wg.Wait()
}

// advanceTail records in the cached entry that a tail up to t was reported, without
// refreshing the entry's age.
func (k *catalogCoord) advanceTail(key string, t int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if ce, ok := k.cache[key]; ok && (!ce.e.HasTail || ce.e.Tail < t) {
		ce.e.Tail, ce.e.HasTail = t, true
		k.cache[key] = ce
	}
}

// searchRange is where an entry says the points of [since, before) can be: [lo, hi),
// and from where Latest starts looking (start, lo <= start <= hi), now being the
// coordinator's clock.
func (c *Coordinator) searchRange(e catalog.Entry, since, before, now int64) (lo, start, hi int64) {
	if !e.HasBounds {
		return since, since, since
	}
	last := e.Last
	if last < math.MaxInt64 {
		last++
	}
	// A write stamped past aheadSlack recorded Ahead before its points were stored.
	capped := int64(math.MaxInt64)
	if slack := int64(aheadSlack + latestClockMargin); now < math.MaxInt64-slack {
		capped = now + slack
	}
	if e.HasAhead && e.Ahead >= capped {
		capped = e.Ahead + 1
	}
	last = min(last, capped)
	lo, hi = max(since, e.First), min(before, last)
	if lo >= hi {
		return lo, lo, lo
	}
	start = lo
	if e.HasTail {
		start = min(max(lo, c.cfg.DHT.Quantum.StartNanos(e.Tail)), hi)
	}
	return lo, start, hi
}

// Latest returns the latest point of a series in [since, before), none if it has no
// point there: one entry read, then an aggregate of the quanta after the tail (see
// above), walking back only when those hold nothing. The statistics of the last few
// quanta before the clock's cap are asked with the entry, in the same requests
// (speculation, latestRound): for a live series they are the answer, and Latest costs
// one request to each replica involved, settled once a read quorum has answered.
func (c *Coordinator) Latest(ctx context.Context, key string, since, before int64) (series.Points, error) {
	pt, _, err := c.latest(ctx, key, since, before)
	return pt, err
}

// latest is Latest; it also returns where the entry says the points of [since,
// before) start (searchRange's lo), which Bounds answers as First.
func (c *Coordinator) latest(ctx context.Context, key string, since, before int64) (series.Points, int64, error) {
	if since > before {
		return series.Points{}, 0, rpc.Errorf(CodeBadInput, "latest of %q: since %d is after before %d", key, since, before)
	}
	q := c.cfg.DHT.Quantum
	now := time.Now().UnixNano()
	qn := q.Duration().Nanoseconds()
	specLo := q.StartNanos(now) - latestSpecQuanta*qn
	if e, ok := c.cat.cached(key); ok && e.HasTail && e.Tail < specLo && e.Tail >= specLo-maxSpecQuanta*qn {
		specLo = q.StartNanos(e.Tail) // what this coordinator last saw of the tail
	}
	specLo, specHi := max(since, specLo), min(before, now+int64(aheadSlack+latestClockMargin))
	if specLo >= specHi {
		specLo, specHi = 0, 0 // nothing to speculate on: the round reads the entry only
	}
	round, err := c.latestRound(ctx, key, specLo, specHi)
	if err != nil {
		return series.Points{}, 0, err
	}
	if !round.found || !round.entry.Live() {
		return series.Points{}, 0, rpc.Errorf(CodeUnknownSeries, "unknown series %q", key)
	}
	e := round.entry
	if _, ok := c.cat.cached(key); !ok {
		c.cat.remember(e)
	}
	lo, start, hi := c.searchRange(e, since, before, now) // the clock the speculation used
	if lo >= hi {
		return series.Points{}, lo, nil
	}
	if round.settled && specLo < specHi && hi <= specHi {
		// The speculation covered [specLo, hi): its latest point is the latest of
		// [lo, hi) when it found one; when not, look below specLo only.
		if round.ptFound && round.pt.T[0] >= lo {
			return round.pt, lo, nil
		}
		if !round.ptFound {
			start, hi = min(start, specLo), min(hi, specLo)
		}
	}
	if lo >= hi {
		return series.Points{}, lo, nil
	}
	if start < hi {
		pt, found, err := c.latestIn(ctx, key, start, hi)
		if err != nil || found {
			return pt, lo, err
		}
	}
	pt, err := c.latestBefore(ctx, key, lo, start)
	return pt, lo, err
}

// latestSpecQuanta is how many quanta before the current one Latest's speculation
// covers: the tail of a live series is reported about once per quantum. It starts
// earlier, at most maxSpecQuanta earlier, when the coordinator's cached entry has an
// earlier tail.
const (
	latestSpecQuanta = 1
	maxSpecQuanta    = 64
)

// latestIn returns the latest point in [from, to) from one aggregate of whole quanta,
// in windows as wide as the range (so at most two, whatever the range holds).
func (c *Coordinator) latestIn(ctx context.Context, key string, from, to int64) (series.Points, bool, error) {
	q := c.cfg.DHT.Quantum.Duration().Nanoseconds()
	res, err := c.aggregate(ctx, key, from, to, spanWindow(from, to, q), GetOptions{}, true)
	if err != nil {
		return series.Points{}, false, err
	}
	n := len(res.Windows)
	if n == 0 {
		return series.Points{}, false, nil
	}
	return lastPoint(&res.Windows[n-1]), true, nil
}

// Bounds bounds the points of a series with from <= t < to (wire.BoundsResp): First
// from the catalog entry (an hour's rounding), Last exact (as Latest, in the same
// requests).
func (c *Coordinator) Bounds(ctx context.Context, key string, from, to int64) (wire.BoundsResp, error) {
	if from > to {
		return wire.BoundsResp{}, rpc.Errorf(CodeBadInput, "range: from %d is after to %d", from, to)
	}
	pt, lo, err := c.latest(ctx, key, from, to)
	if err != nil || pt.Len() == 0 {
		return wire.BoundsResp{}, err
	}
	return wire.BoundsResp{Found: true, First: lo, Last: pt.T[0]}, nil
}

// spanWindow returns the smallest whole number of quanta q that is at least to − from:
// windows that wide cut [from, to) in at most two, each of whole quanta, so an
// aggregate of any range answers with at most two windows.
func spanWindow(from, to, q int64) int64 {
	if to <= from {
		return q
	}
	d := to - from
	if d < 0 || d > math.MaxInt64-q { // the range overflows: the widest whole window
		return math.MaxInt64 / q * q
	}
	return ((d-1)/q + 1) * q
}
