package httpapi

import (
	"context"
	"sync"
	"time"

	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/series"
)

// Write combining.
//
// With the store syncing every write to disk, a node's write rate is set by how many
// points each sync carries, not by the CPU. Several write requests in flight at once
// usually name the same series (a fleet of writers, one series per sensor), and a
// replica's store takes one append of a series at a time. So the handler combines:
// while one Engine.Write of a series is in flight, the points other requests bring for
// that series wait together, and go as one Write when it returns. Every request is
// still answered only once its own points reached the write quorum (or failed), so the
// acknowledgement means what it meant; a request's latency is at most one more Write
// of its series. When a combined Write refuses points for what they are (a timestamp
// too far ahead, past the retention), each of its requests writes its own points again
// alone, so that a request is only ever told about its own points.

// combiner merges concurrent writes of the same series into one Engine.Write. Its
// state is split in combinerShards by series, so that the hundreds of series of
// concurrent requests do not queue for one lock.
type combiner struct {
	eng    Engine
	shards [combinerShards]combinerShard
}

const combinerShards = 64

type combinerShard struct {
	mu      sync.Mutex
	running map[string]*writeGroup // series with a Write in flight → the group waiting for the next
}

// shard returns the part of the state that holds key.
func (c *combiner) shard(key string) *combinerShard {
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	return &c.shards[h%combinerShards]
}

// writeGroup is the points of one series that go in one Engine.Write, gathered from
// the requests that wait for it.
type writeGroup struct {
	key      string
	tags     map[string]string
	pts      series.Points
	deadline time.Time // the earliest of its requests' deadlines
	hasDL    bool
	ctx      context.Context // values (not cancellation) of the request that opened it

	done   chan struct{} // closed when the Write returned
	stored int           // what the Write returned
	err    error
}

func newCombiner(eng Engine) *combiner {
	c := &combiner{eng: eng}
	for i := range c.shards {
		c.shards[i].running = make(map[string]*writeGroup)
	}
	return c
}

// write stores pts of series key like Engine.Write, combined with other requests' points
// of the same series that arrive while a Write of it is in flight. It returns how many
// of pts were stored: all of them, or none when the (combined) Write failed.
func (c *combiner) write(ctx context.Context, key string, tags map[string]string, pts series.Points) (int, error) {
	sh := c.shard(key)
	sh.mu.Lock()
	next, busy := sh.running[key]
	if !busy {
		// Nothing in flight: this request's Write goes now; later ones gather behind it.
		sh.running[key] = nil
		sh.mu.Unlock()
		n, err := c.eng.Write(ctx, key, tags, pts)
		c.finish(key)
		return n, err
	}
	if next != nil && next.pts.Type != pts.Type {
		// A type conflict must be blamed on the request that brings it: no combining.
		sh.mu.Unlock()
		return c.eng.Write(ctx, key, tags, pts)
	}
	if next == nil {
		next = &writeGroup{key: key, tags: tags, ctx: context.WithoutCancel(ctx), done: make(chan struct{})}
		next.pts.Type = pts.Type
		sh.running[key] = next
	}
	if d, ok := ctx.Deadline(); ok && (!next.hasDL || d.Before(next.deadline)) {
		next.deadline, next.hasDL = d, true
	}
	appendPoints(&next.pts, &pts)
	sh.mu.Unlock()
	select {
	case <-next.done:
	case <-ctx.Done():
		// The group still writes these points; this request just stops waiting.
		return 0, ctx.Err()
	}
	if next.err != nil {
		if pointsFault(next.err) {
			// Some request's points were refused (a timestamp too far ahead, past the
			// retention, a type conflict): each request finds out whether its own were.
			return c.eng.Write(ctx, key, tags, pts)
		}
		return 0, next.err
	}
	return pts.Len(), nil
}

// pointsFault reports whether err refuses points for what they are, not because the
// cluster failed.
func pointsFault(err error) bool {
	switch errorCode(err) {
	case tsdb.CodeTypeMismatch, tsdb.CodeBadInput, tsdb.CodeExpired:
		return true
	}
	return false
}

// finish ends the Write in flight of key: the group that gathered behind it, if any,
// is written next (by a goroutine of its own, so the request that just finished is
// answered now).
func (c *combiner) finish(key string) {
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	next := sh.running[key]
	if next == nil {
		delete(sh.running, key)
		return
	}
	sh.running[key] = nil // next is in flight: new arrivals open another group
	go c.run(next)
}

func (c *combiner) run(g *writeGroup) {
	ctx, cancel := g.ctx, context.CancelFunc(func() {})
	if g.hasDL {
		ctx, cancel = context.WithDeadline(ctx, g.deadline)
	}
	g.stored, g.err = c.eng.Write(ctx, g.key, g.tags, g.pts)
	cancel()
	c.finish(g.key)
	close(g.done)
}

// appendPoints appends src's points to dst (of the same type).
func appendPoints(dst, src *series.Points) {
	dst.T = append(dst.T, src.T...)
	switch src.Type {
	case series.Float:
		dst.F = append(dst.F, src.F...)
	case series.Int:
		dst.I = append(dst.I, src.I...)
	case series.String:
		dst.S = append(dst.S, src.S...)
	}
}
