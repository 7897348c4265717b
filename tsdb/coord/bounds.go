package coord

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Series bounds and the latest point, in about one round trip.
//
// A series' catalog entry (kept at quorum on its registry replicas) holds bounds of the
// times written to it: First and Last, rounded out to hours, widened at quorum before
// points outside them are acknowledged (noteWrite; a new series' before its points are
// written, one that exists beside them: widen_beside.go), so they never miss an
// acknowledged point.
//
// It also holds Newest: the time of the newest point of the write that first reached
// the series' newest quantum. A write whose newest point lies in a quantum after the
// newest one its coordinator knows a write quorum of registry replicas to hold reports
// it there (reportNewest), at the write's quorum, in parallel with its points, and is
// acknowledged only once both are stored. So no acknowledged point lies in a quantum
// after Newest's, and a read quorum of registry replicas, which meets that write
// quorum, says so. What it costs a write: one more request to each registry replica,
// sent beside the points' requests (for a PutMany, those of all its series in one
// request per registry replica: putmany_newest.go), once per quantum of
// data per series and coordinator — one write in 600 of a 60 Hz series written point
// by point, every write of a series written less often than once a quantum.
//
// Latest reads the entry and, in the same requests (latestRound), the statistics of the
// quantum it expects to be Newest's: the one its coordinator last saw (and the next, when
// the clock has just entered it), or the clock's and the one before. When Newest's quantum is among them and holds a point, that is
// the answer: one request to each of about four nodes (two registry replicas, two of
// the quantum's), settled at a read quorum. Otherwise it reads Newest's quantum, and
// walks back from there only when that holds nothing (a delete of the newest points).
// The answer is the aggregate's, which is exact (complete or fails).
//
// An entry without Newest (written before writes kept it) falls back to the older
// search: from the Tail hint to the end of the bounds, capped at the coordinator's
// clock plus aheadSlack plus latestClockMargin, or at Ahead when that is later (a write
// stamped more than aheadSlack past its coordinator's clock records Ahead at quorum
// before its points are written).
//
// The guarantee, as tested: Latest returns the latest point acknowledged before it
// started; with one registry replica down it still answers (read quorum).

// aheadSlack is how far past its clock a write may be stamped without recording Ahead.
const aheadSlack = 5 * time.Second

// latestClockMargin is how far a writing coordinator's clock may run ahead of the
// answering coordinator's for Latest to stay exact on entries without Newest.
const latestClockMargin = 5 * time.Second

// maxNewestTracked bounds the series whose newest quantum a coordinator remembers; past
// it the memory is cleared (forgetting costs one report per series, never exactness).
const maxNewestTracked = 1 << 16

// newestTracker remembers, per series, the newest quantum this coordinator has stored
// at a write quorum of registry replicas (sure: only its own reports count, since a
// value read from a replica may have reached no quorum), and the newest Newest it has
// seen (a hint for Latest's speculation).
type newestTracker struct {
	mu   sync.Mutex
	sure map[string]newestMark
	seen map[string]int64
}

// newestMark is a quantum start known at quorum for one incarnation of a series.
type newestMark struct{ created, start int64 }

// needsNewest reports whether a write of series key whose newest point is at t must
// report Newest before it is acknowledged, given the entry cur its coordinator holds.
func (c *Coordinator) needsNewest(key string, cur catalog.Entry, t int64) bool {
	r := &c.newest
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.sure[key]
	return !ok || m.created != cur.Created || c.cachedQ(key).StartNanos(t) > m.start
}

// noteNewest records that a write quorum of registry replicas holds Newest >= t for
// incarnation created of key.
func (c *Coordinator) noteNewest(key string, created, t int64) {
	start := c.cachedQ(key).StartNanos(t)
	r := &c.newest
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sure == nil || len(r.sure) >= maxNewestTracked {
		r.sure = map[string]newestMark{}
	}
	if m, ok := r.sure[key]; !ok || m.created != created || m.start < start {
		r.sure[key] = newestMark{created: created, start: start}
	}
	r.seeLocked(key, t)
}

// seeNewest records the Newest of an entry read: where Latest speculates next time.
func (c *Coordinator) seeNewest(e catalog.Entry) {
	if !e.HasNewest {
		return
	}
	r := &c.newest
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seeLocked(e.Key, e.Newest)
}

func (r *newestTracker) seeLocked(key string, t int64) {
	if r.seen == nil || len(r.seen) >= maxNewestTracked {
		r.seen = map[string]int64{}
	}
	if old, ok := r.seen[key]; !ok || old < t {
		r.seen[key] = t
	}
}

// seenNewest returns the newest Newest this coordinator has seen of key.
func (c *Coordinator) seenNewest(key string) (int64, bool) {
	r := &c.newest
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.seen[key]
	return t, ok
}

// reportNewest stores, at write quorum w of key's registry replicas, that a write's
// newest point is at t, unless this coordinator knows a quorum already holds a Newest
// in t's quantum or later. The entry must cover t (noteWrite ran).
func (c *Coordinator) reportNewest(ctx context.Context, key string, t int64, w int) error {
	cur, ok := c.cat.cached(key)
	if !ok {
		got, found, err := c.readEntry(ctx, key)
		if err != nil {
			return err
		}
		if !found {
			return rpc.Errorf(wire.CodeUnavailable, "catalog entry of %q: not found after the write created it (deleted meanwhile?)", key)
		}
		cur = got
	}
	if !c.needsNewest(key, cur, t) {
		return nil
	}
	nw, err := c.sendNewest(ctx, cur, t, w)
	if err != nil {
		return err
	}
	return nw.collect()
}

// newestWrite is a Newest report in flight (sendNewest).
type newestWrite struct {
	c       *Coordinator
	ctx     context.Context
	key     string
	created int64
	t       int64
	w       int
	answers <-chan cluster.FanResult[struct{}, []catalog.Entry]
	n       int  // requests sent
	retry   bool // wait sends the report again (reportNewest)
}

// sendNewest sends, without waiting, Newest = t for entry cur to every registry
// replica of its series. The requests outlive ctx's cancellation (a write acknowledged
// at quorum leaves the others to finish), not its values, nor CallTimeout.
func (c *Coordinator) sendNewest(ctx context.Context, cur catalog.Entry, t int64, w int) (*newestWrite, error) {
	if !cur.Live() || !cur.HasBounds || t < cur.First || t > cur.Last {
		return nil, rpc.Errorf(wire.CodeUnavailable, "catalog entry of %q: its bounds do not cover %d (deleted meanwhile?)", cur.Key, t)
	}
	owners, err := c.catalogOwners(ctx, quanta.KeyID(cur.Key), fmt.Sprintf("catalog entry of %q", cur.Key))
	if err != nil {
		return nil, err
	}
	upd := []catalog.Entry{{Key: cur.Key, Type: cur.Type, Created: cur.Created, HasBounds: true, First: cur.First, Last: cur.Last,
		HasNewest: true, Newest: t}}
	answers := cluster.FanOut(context.WithoutCancel(ctx), owners, 0, c.cfg.CallTimeout, func(ctx context.Context, b *cluster.PeerBatch[struct{}]) ([]catalog.Entry, error) {
		return c.replicas.For(b.Peer).MergeEntries(ctx, upd)
	})
	return &newestWrite{c: c, ctx: ctx, key: cur.Key, created: cur.Created, t: t, w: w, answers: answers, n: len(owners)}, nil
}

// collect waits until w registry replicas (all, if fewer) stored the report, or too
// many failed.
func (nw *newestWrite) collect() error {
	need := min(nw.w, nw.n)
	ok, failed := 0, 0
	var lastErr error
	for ok < need {
		if failed > nw.n-need {
			nw.retry = true
			return rpc.Errorf(quorumCode(lastErr), "newest quantum of %q stored at %d of %d registry replicas, %d needed: %v",
				nw.key, ok, nw.n, need, lastErr)
		}
		select {
		case a := <-nw.answers:
			if a.Err != nil || len(a.Resp) != 1 {
				failed++
				lastErr = errors.Join(a.Err, lastErr)
				continue
			}
			ok++
		case <-nw.ctx.Done():
			nw.retry = true
			return rpc.Errorf(wire.CodeUnavailable, "newest quantum of %q: %v", nw.key, nw.ctx.Err())
		}
	}
	nw.c.noteNewest(nw.key, nw.created, nw.t)
	return nil
}

// searchRange is where an entry says the points of [since, before) can be: [lo, hi),
// and from where Latest starts looking (start, lo <= start <= hi), now being the
// coordinator's clock. With Newest, hi ends with Newest's quantum and start is its
// beginning; without, the older search (see above).
func (c *Coordinator) searchRange(e catalog.Entry, q quanta.Quantum, since, before, now int64) (lo, start, hi int64) {
	if !e.HasBounds {
		return since, since, since
	}
	last := e.Last
	if last < math.MaxInt64 {
		last++
	}
	if e.HasNewest {
		// No acknowledged point lies in a quantum after Newest's.
		qs := q.StartNanos(e.Newest)
		if qn := q.Duration().Nanoseconds(); qs <= math.MaxInt64-qn {
			last = min(last, qs+qn)
		}
		lo, hi = max(since, e.First), min(before, last)
		if lo >= hi {
			return lo, lo, lo
		}
		return lo, min(max(lo, qs), hi), hi
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
		start = min(max(lo, q.StartNanos(e.Tail)), hi)
	}
	return lo, start, hi
}

// Latest returns the latest point of a series in [since, before), none if it has no
// point there: the entry and the quantum expected to be Newest's in one request to each
// node involved (latestRound), settled once a read quorum has answered; then, only if
// Newest's quantum was not among those read, that quantum; then, only if it holds
// nothing, a walk back (see above).
func (c *Coordinator) Latest(ctx context.Context, key string, since, before int64) (series.Points, error) {
	pt, _, err := c.latest(ctx, key, since, before)
	return pt, err
}

// latest is Latest; it also returns where the entry says the points of [since,
// before) start (searchRange's lo), which Bounds answers as First.
func (c *Coordinator) latest(ctx context.Context, key string, since, before int64) (series.Points, int64, error) {
	if since > before {
		return series.Points{}, 0, rpc.Errorf(wire.CodeBadInput, "latest of %q: since %d is after before %d", key, since, before)
	}
	q := c.quantumFor(ctx, key)
	now := time.Now().UnixNano()
	qn := q.Duration().Nanoseconds()
	// Speculate on the quantum of the newest Newest seen here — and the one after when
	// the clock has just entered it (a live series moves there next) — else on the
	// clock's and the one before (and up to the clock's slack after, for entries
	// without Newest).
	var specLo, specHi int64
	if seen, ok := c.seenNewest(key); ok {
		specLo = q.StartNanos(seen)
		n := int64(1)
		if specLo <= math.MaxInt64-qn && q.StartNanos(now) == specLo+qn {
			n = 2
		}
		specHi = math.MaxInt64
		if specLo <= math.MaxInt64-n*qn {
			specHi = specLo + n*qn
		}
	} else {
		specLo, specHi = q.StartNanos(now)-latestSpecQuanta*qn, now+int64(aheadSlack+latestClockMargin)
	}
	specLo, specHi = max(since, specLo), min(before, specHi)
	if specLo >= specHi {
		specLo, specHi = 0, 0 // nothing to speculate on: the round reads the entry only
	}
	round, err := c.latestRound(ctx, key, specLo, specHi)
	if err != nil {
		return series.Points{}, 0, err
	}
	if !round.found || !round.entry.Live() {
		return series.Points{}, 0, rpc.Errorf(wire.CodeUnknownSeries, "unknown series %q", key)
	}
	e := round.entry
	if _, ok := c.cat.cached(key); !ok {
		c.cat.remember(e)
	}
	c.seeNewest(e)
	lo, start, hi := c.searchRange(e, q, since, before, now) // the clock the speculation used
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
		pt, found, err := c.latestIn(ctx, key, q, start, hi)
		if err != nil || found {
			return pt, lo, err
		}
	}
	pt, err := c.latestBefore(ctx, key, lo, start)
	return pt, lo, err
}

// latestSpecQuanta is how many quanta before the clock's Latest's speculation covers
// when its coordinator has seen no Newest of the series.
const latestSpecQuanta = 1

// latestIn returns the latest point in [from, to) from one aggregate of whole quanta,
// in windows as wide as the range (so at most two, whatever the range holds).
func (c *Coordinator) latestIn(ctx context.Context, key string, sq quanta.Quantum, from, to int64) (series.Points, bool, error) {
	q := sq.Duration().Nanoseconds()
	res, err := c.aggregate(ctx, key, from, to, spanWindow(from, to, q), wire.GetOptions{}, true)
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
		return wire.BoundsResp{}, rpc.Errorf(wire.CodeBadInput, "range: from %d is after to %d", from, to)
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
