package uplink

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsdht/tsdht/tsdb/coord"
	"github.com/tsdht/tsdht/tsdb/series"
)

// MaxTapBytes bounds what one uplink holds of the points handed to it on the write path
// (its taps), counting 16 bytes a point and a string value's length: a write that would
// pass it drops that series' tap, and the series is read from the store again.
const MaxTapBytes = 2 << 20

// taps are the points this node's coordinator stored for the raw series an uplink
// forwards and has caught up with (docs/uplink.md "From the write path"): the node's
// write hook adds to them (stored), the forwarder takes from them instead of reading
// the store once a read of the store agreed with them.
type taps struct {
	armed atomic.Int32 // len(m): a write of no tapped series costs one load
	arms  atomic.Int64 // taps armed so far (tests)
	mu    sync.Mutex
	m     map[string]*tap
	bytes int // held by every tap
	limit int
}

// tap holds the points stored since it was armed at or after from, in the order they
// were stored.
type tap struct {
	from   int64
	typ    series.Type
	pts    series.Points
	bytes  int
	sorted bool // pts ascend strictly
	late   bool // a point before from was stored since the late check last ran
}

func newTaps(limit int) *taps { return &taps{m: map[string]*tap{}, limit: limit} }

// pointBytes is what taps count for point i of p.
func pointBytes(p *series.Points, i int) int {
	if p.Type == series.String {
		return 16 + len(p.S[i])
	}
	return 16
}

// arm starts holding the points of key stored from now on with timestamps at or after
// from; typ is the series' type.
func (ts *taps) arm(key string, from int64, typ series.Type) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.dropLocked(key)
	ts.m[key] = &tap{from: from, typ: typ, pts: series.Points{Type: typ}, sorted: true}
	ts.armed.Store(int32(len(ts.m)))
	ts.arms.Add(1)
}

// drop forgets key's tap: its series is read from the store.
func (ts *taps) drop(key string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.dropLocked(key)
}

func (ts *taps) dropLocked(key string) {
	if t := ts.m[key]; t != nil {
		ts.bytes -= t.bytes
		delete(ts.m, key)
		ts.armed.Store(int32(len(ts.m)))
	}
}

// dropAll forgets every tap.
func (ts *taps) dropAll() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	clear(ts.m)
	ts.bytes = 0
	ts.armed.Store(0)
}

// armedAt reports whether key has a tap and from when it holds the points.
func (ts *taps) armedAt(key string) (int64, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if t := ts.m[key]; t != nil {
		return t.from, true
	}
	return 0, false
}

// stored is the write hook: what one write stored (coord.Coordinator.OnStored). A
// series whose write failed (some of its points may be stored anyway) or whose points
// have another type than its tap, or that would pass the bound, loses its tap.
func (ts *taps) stored(puts []coord.SeriesPut, res []coord.SeriesResult) {
	if ts.armed.Load() == 0 {
		return
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for i := range puts {
		t := ts.m[puts[i].Key]
		if t == nil {
			continue
		}
		p := &puts[i].Points
		if res[i].Err != nil || p.Len() > 0 && p.Type != t.typ {
			ts.dropLocked(puts[i].Key)
			continue
		}
		n, run := 0, true // run: every point at or after from, ascending
		for j, at := range p.T {
			if at < t.from {
				run = false
				t.late = true // forwarded already, or before the tap: the late check's
				continue
			}
			n += pointBytes(p, j)
			if j > 0 && at <= p.T[j-1] {
				run = false
			}
		}
		if ts.bytes+n > ts.limit {
			ts.dropLocked(puts[i].Key)
			continue
		}
		t.bytes += n
		ts.bytes += n
		if k := t.pts.Len(); run && (k == 0 || p.Len() == 0 || p.T[0] > t.pts.T[k-1]) {
			// The common write: new points after the tap's last, appended whole.
			t.pts.T = append(t.pts.T, p.T...)
			t.pts.F = append(t.pts.F, p.F...)
			t.pts.I = append(t.pts.I, p.I...)
			t.pts.S = append(t.pts.S, p.S...)
			continue
		}
		for j, at := range p.T {
			if at < t.from {
				continue
			}
			if k := t.pts.Len(); k > 0 && at <= t.pts.T[k-1] {
				t.sorted = false
			}
			t.pts.AppendFrom(p, j)
		}
	}
}

// takeLate reports whether a point before key's tap was stored since the last call,
// and forgets it; true when key has no tap (nothing says there was none).
func (ts *taps) takeLate(key string) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.m[key]
	if t == nil {
		return true
	}
	late := t.late
	t.late = false
	return late
}

// take returns key's points in [from, to), as the store would answer them (sorted, the
// last value written for a repeated timestamp), first forgetting those before from
// (forwarded). ok false: no tap holds that range. The points share the tap's arrays:
// use them before the next take of key.
func (ts *taps) take(key string, from, to int64) (series.Points, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.m[key]
	if t == nil || from < t.from {
		return series.Points{}, false
	}
	if !t.sorted {
		t.pts.Normalize() // new arrays: points taken before stay as they were
		t.sorted = true
		n := 0
		for j := range t.pts.T {
			n += pointBytes(&t.pts, j)
		}
		ts.bytes += n - t.bytes
		t.bytes = n
	}
	k := 0
	for k < t.pts.Len() && t.pts.T[k] < from {
		t.bytes -= pointBytes(&t.pts, k)
		ts.bytes -= pointBytes(&t.pts, k)
		k++
	}
	// Re-sliced, not moved: the stored hook appends behind what was taken, and a
	// growing append copies only what is left.
	t.pts = t.pts.Slice(k, t.pts.Len())
	t.from = from
	return t.pts.Trim(from, to), true
}

// armTap gives a raw series that caught up a tap, unless it has one or lost its last
// one lately: it holds the points stored from the next multiple of the interval on, a
// time no read has reached, so that nothing stored before it was armed belongs to it.
func (u *Uplink) armTap(st *state) {
	now := time.Now()
	if u.taps == nil || st.e.Type == series.Unknown || now.Before(st.tapAfter) {
		return
	}
	if _, ok := u.taps.armedAt(st.e.Key); ok {
		return
	}
	iv := int64(u.cfg.Interval)
	t := now.UnixNano()
	u.taps.arm(st.e.Key, t-t%iv+iv, st.e.Type)
	st.verified = time.Time{}
}

// fromTap returns the series' points in [cursor, to) from its tap when a read of the
// store agreed with the tap within tapVerifyEvery; ok false: read the store.
func (u *Uplink) fromTap(st *state, to int64) (series.Points, bool) {
	if u.taps == nil || st.verified.IsZero() || time.Since(st.verified) >= tapVerifyEvery {
		return series.Points{}, false
	}
	return u.taps.take(st.e.Key, st.cursor, to)
}

// checkTap compares what a read of the store found in [cursor, to) with the series'
// tap, when the tap holds that range: the same points (some) let the next reads come
// from the tap; others — the series is written through another node too, or this replica
// lacks points — drop the tap for tapPause.
func (u *Uplink) checkTap(st *state, got *series.Points, to int64) {
	if u.taps == nil {
		return
	}
	mem, ok := u.taps.take(st.e.Key, st.cursor, to)
	switch {
	case !ok || got.Len() == 0 && mem.Len() == 0:
		// Nothing agrees on nothing: a tap that writes through other nodes never reach
		// is empty too. The next read with points decides.
	case series.SameBits(&mem, got):
		if st.verified.IsZero() {
			u.log.Info("forwarding from the write path", "series", st.e.Key)
		}
		st.verified = time.Now()
	default:
		u.log.Info("the points stored through this node differ from the store's; reading the store",
			"series", st.e.Key, "stored", got.Len(), "tapped", mem.Len(), "for", tapPause.String())
		u.dropTap(st)
		st.tapAfter = time.Now().Add(tapPause)
	}
}

// lateDue reports whether the series' late check is due: every LateEvery, but for a
// series forwarded from its tap every tapLateEvery LateEvery unless its tap saw a point
// arrive behind the cursor (all but the late points written through other nodes, which
// the check then finds a little later).
func (u *Uplink) lateDue(st *state, now time.Time) bool {
	since := now.Sub(st.lateAt)
	if since < u.cfg.LateEvery {
		return false
	}
	if u.taps == nil || st.verified.IsZero() {
		return true
	}
	return u.taps.takeLate(st.e.Key) || since >= tapLateEvery*u.cfg.LateEvery
}

// dropTap forgets the series' tap: it is read from the store.
func (u *Uplink) dropTap(st *state) {
	if u.taps != nil {
		u.taps.drop(st.e.Key)
	}
	st.verified = time.Time{}
}
