package httpapi

import (
	"context"
	"runtime/trace"
	"sync"
	"time"

	"github.com/tsdht/tsdht/tsdb/series"
)

// Write combining across requests, for an Engine that writes many series at once.
//
// Up to writesInFlight WriteManys of requests' series are in flight at a time; the
// requests that arrive meanwhile gather into the next one, each series' points appended to what the others
// brought of it, and that goes as one WriteMany when the one in flight returns. A
// replica then appends a series once per group, not once per request: fewer, larger
// appends, disk syncs and replica requests for the same points. Every request is still
// answered only once its own points reached the write quorum (or failed), and a request
// waits for at most one more WriteMany. When the group's WriteMany refuses a series'
// points for what they are (a timestamp too far ahead, past the retention), each request
// that brought points of it writes its own again alone, so that a request is only ever
// told about its own points.

// manyCombiner gathers concurrent requests' series into one WriteMany.
type manyCombiner struct {
	mw ManyWriter

	max int // WriteManys in flight at once

	mu       sync.Mutex
	inflight int        // WriteManys in flight
	next     *manyGroup // what gathers behind them; nil if nothing does yet
}

// manyGroup is the series of the requests waiting for the next WriteMany.
type manyGroup struct {
	ws       []SeriesWrite
	byKey    map[string]int  // series key → its index in ws
	ctx      context.Context // values (not cancellation) of the request that opened it
	deadline time.Time       // the earliest of its requests' deadlines
	hasDL    bool

	done chan struct{} // closed when its WriteMany returned
	res  []WriteResult // what it returned, per ws
}

func newManyCombiner(mw ManyWriter, max int) *manyCombiner { return &manyCombiner{mw: mw, max: max} }

// write stores the series of one request, combined with those of other requests that
// arrive while a WriteMany is in flight, and returns per series of ws how many of its
// points were stored: all of them, or none when the (combined) write failed.
func (c *manyCombiner) write(ctx context.Context, ws []SeriesWrite) []WriteResult {
	for i := range ws {
		ws[i].Pts.Normalize() // sorted runs merge into a group's points in one pass
	}
	c.mu.Lock()
	if c.inflight < c.max && c.next == nil {
		// Room in flight: this request goes now; later ones gather behind it.
		c.inflight++
		c.mu.Unlock()
		region := trace.StartRegion(ctx, "http.writemany")
		res := c.mw.WriteMany(ctx, ws)
		region.End()
		c.finish()
		return res
	}
	g := c.next
	if g != nil {
		for i := range ws {
			if j, ok := g.byKey[ws[i].Key]; ok && g.ws[j].Pts.Type != ws[i].Pts.Type {
				// A type conflict must be blamed on the request that brings it.
				c.mu.Unlock()
				return c.mw.WriteMany(ctx, ws)
			}
		}
	} else {
		g = &manyGroup{byKey: make(map[string]int, len(ws)), ctx: context.WithoutCancel(ctx), done: make(chan struct{})}
		c.next = g
	}
	if d, ok := ctx.Deadline(); ok && (!g.hasDL || d.Before(g.deadline)) {
		g.deadline, g.hasDL = d, true
	}
	at := make([]int, len(ws))
	for i := range ws {
		j, ok := g.byKey[ws[i].Key]
		if !ok {
			// The group's points are its own: the write sorts them in place.
			j = len(g.ws)
			g.byKey[ws[i].Key] = j
			g.ws = append(g.ws, SeriesWrite{Key: ws[i].Key, Tags: ws[i].Tags, Pts: series.Points{Type: ws[i].Pts.Type}})
		}
		mergePoints(&g.ws[j].Pts, &ws[i].Pts)
		at[i] = j
	}
	c.mu.Unlock()

	res := make([]WriteResult, len(ws))
	select {
	case <-g.done:
	case <-ctx.Done():
		// The group still writes these points; this request just stops waiting.
		for i := range res {
			res[i].Err = ctx.Err()
		}
		return res
	}
	var again []int
	for i, j := range at {
		switch r := g.res[j]; {
		case r.Err == nil:
			res[i].Stored = ws[i].Pts.Len()
		case pointsFault(r.Err):
			again = append(again, i)
		default:
			res[i].Err = r.Err
		}
	}
	if len(again) > 0 {
		// Some request's points of these series were refused: each request finds out
		// whether its own were.
		sub := make([]SeriesWrite, len(again))
		for k, i := range again {
			sub[k] = ws[i]
		}
		for k, r := range c.mw.WriteMany(ctx, sub) {
			res[again[k]] = r
		}
	}
	return res
}

// mergePoints adds src's points to dst's, both sorted, keeping dst sorted; where both
// hold a timestamp, src's value wins (the later request's, as when each request is
// written alone). Requests mostly bring later points than the group holds: then an
// append, otherwise a merge; either way the write has no sort to do (a stable sort of
// the group's points would cost every request).
func mergePoints(dst, src *series.Points) {
	if n := dst.Len(); n == 0 || src.Len() == 0 || src.T[0] > dst.T[n-1] {
		appendPoints(dst, src)
		return
	}
	*dst = series.Merge(*dst, *src)
}

// finish ends the WriteMany in flight: the group that gathered behind it, if any, is
// written next (by a goroutine of its own, so the request that just finished is answered
// now).
func (c *manyCombiner) finish() {
	c.mu.Lock()
	g := c.next
	c.next = nil
	if g == nil {
		c.inflight--
	}
	c.mu.Unlock()
	if g != nil {
		go c.run(g)
	}
}

func (c *manyCombiner) run(g *manyGroup) {
	ctx, cancel := g.ctx, context.CancelFunc(func() {})
	if g.hasDL {
		ctx, cancel = context.WithDeadline(ctx, g.deadline)
	}
	region := trace.StartRegion(ctx, "http.writemany")
	g.res = c.mw.WriteMany(ctx, g.ws)
	region.End()
	cancel()
	c.finish()
	close(g.done)
}

// writesInFlight is how many WriteManys a handler has in flight at once. One gathers
// the most into each: two in flight make smaller groups, more commits and more CPU per
// point without a higher rate (scripts/bench-http --only tsdht-1 compares).
const writesInFlight = 1
