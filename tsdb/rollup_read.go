package tsdb

import (
	"context"
	"math"
	"sort"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// registerRollups serves the home side of rollups.
func (n *Node) registerRollups(r *rollups) {
	cluster.Handle(n.srv, wire.MethodRollupMark, func(_ context.Context, req *wire.RollupMarkReq) (*wire.RollupMarkResp, error) {
		if err := r.mark(req); err != nil {
			return nil, err
		}
		return &wire.RollupMarkResp{}, nil
	})
	cluster.Handle(n.srv, wire.MethodRollupRead, func(_ context.Context, req *wire.RollupReadReq) (*wire.RollupReadResp, error) {
		return r.read(req)
	})
}

// RollupNow runs one pull pass as a home: every series this node keeps rollups of up
// to the horizon, or 64 rounds of 8,640 quanta per series, whichever comes first (tests
// and benchmarks; a node runs a pass every Rollups.PullInterval anyway).
func (n *Node) RollupNow(ctx context.Context) error {
	if n.rollup == nil {
		return nil
	}
	return n.rollup.pass(ctx)
}

// homes returns the rollup homes of a series: its registry replicas.
func (c *Coordinator) homes(ctx context.Context, key string) ([]dht.Peer, error) {
	peers, err := c.place.Locate(ctx, quanta.KeyID(key), c.cfg.RF)
	if err != nil {
		return nil, rpc.Errorf(CodeUnavailable, "series %q: no rollup home: %v", key, err)
	}
	return peers, nil
}

// callHomes sends req to every home at once and returns each answer (nil: none).
func callHomes[Resp any](ctx context.Context, c *Coordinator, homes []dht.Peer, method string, req any) []*Resp {
	out := make([]*Resp, len(homes))
	done := make(chan struct{}, len(homes))
	for i, h := range homes {
		go func() {
			defer func() { done <- struct{}{} }()
			ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
			defer cancel()
			var resp Resp
			if err := rpc.Invoke(ctx, c.rollup.cli, h.RPCAddr, method, req, &resp); err != nil {
				c.log.Debug("rollup home did not answer", "method", method, "rpc", h.RPCAddr, "err", err)
				return
			}
			out[i] = &resp
		}()
	}
	for range homes {
		<-done
	}
	return out
}

// markLate marks at the series' homes the finest windows of pts (sorted) older than
// now − Horizon/2, once the points reached their replicas: see rollup.go. It fails
// when fewer than a write quorum of homes acknowledged; the points are stored then,
// and a retry of the write marks them again.
func (c *Coordinator) markLate(ctx context.Context, key string, pts *series.Points) error {
	r := c.rollup
	if r == nil || pts.Len() == 0 {
		return nil
	}
	cutoff := time.Now().Add(-r.cfg.Horizon / 2).UnixNano()
	n := sort.Search(pts.Len(), func(i int) bool { return pts.T[i] >= cutoff })
	if n == 0 {
		return nil
	}
	w0 := r.widths[0]
	req := &wire.RollupMarkReq{Key: key}
	for _, t := range pts.T[:n] {
		w := agg.WindowStart(t, w0)
		if k := len(req.Starts); k == 0 || req.Starts[k-1] != w {
			req.Starts = append(req.Starts, w)
		}
		if len(req.Starts) > wire.MaxRollupMarks {
			req.Starts, req.From, req.To = nil, pts.T[0], pts.T[n-1]+1
			break
		}
	}
	return c.markHomes(ctx, key, req)
}

// markStored runs markLate for a write that stored points (res.Stored > 0); its
// failure becomes the write's error when it had none.
func (c *Coordinator) markStored(ctx context.Context, key string, pts series.Points, res *PutResult, err *error) {
	if res.Stored == 0 {
		return
	}
	if merr := c.markLate(ctx, key, &pts); merr != nil && *err == nil {
		*err = merr
	}
}

// markDeleted marks a deleted range (or, whole, the series) at the series' homes.
func (c *Coordinator) markDeleted(ctx context.Context, key string, from, to int64, whole bool) error {
	if c.rollup == nil {
		return nil
	}
	if whole {
		from, to = math.MinInt64, math.MaxInt64
	}
	return c.markHomes(ctx, key, &wire.RollupMarkReq{Key: key, From: from, To: to, Reset: whole})
}

func (c *Coordinator) markHomes(ctx context.Context, key string, req *wire.RollupMarkReq) error {
	homes, err := c.homes(ctx, key)
	if err != nil {
		return err
	}
	acked := 0
	for _, a := range callHomes[wire.RollupMarkResp](ctx, c, homes, wire.MethodRollupMark, req) {
		if a != nil {
			acked++
		}
	}
	if w := min(c.cfg.WriteQuorum, len(homes)); acked < w {
		return rpc.Errorf(CodeUnavailable, "series %q: the points are stored but only %d of %d rollup homes learnt of them (need %d): retry the request",
			key, acked, len(homes), w)
	}
	return nil
}

// rollupAggregate answers an aggregate from the rollup homes where they agree, and
// from the raw shards (aggregate) elsewhere. handled is false when rollups cannot help
// (off, no level divides every, or no whole window of a level older than the horizon):
// the caller aggregates the raw shards then.
//
// The range is covered coarsest level first (rollupPlan): the whole windows of the
// coarsest level that divides every, then at its edges the whole windows of the next
// finer one, and so on down to the raw shards. A range ending now reads at most the
// horizon (and the part of a finest window before it) from the raw shards, not the
// whole last window of every; a window the homes cannot vouch for is covered by the
// finer levels the same way.
func (c *Coordinator) rollupAggregate(ctx context.Context, key string, from, to, every int64, opt GetOptions) (res wire.AggResult, handled bool, err error) {
	r := c.rollup
	if r == nil || every <= 0 || from >= to || from < math.MinInt64+every || to > math.MaxInt64-every {
		return res, false, nil
	}
	var levels []int64 // dividing every, coarsest first
	for i := len(r.widths) - 1; i >= 0; i-- {
		if every%r.widths[i] == 0 {
			levels = append(levels, r.widths[i])
		}
	}
	horizon := time.Now().Add(-r.cfg.Horizon).UnixNano()
	if len(levels) == 0 || !rollupUseful(from, to, horizon, levels) {
		return res, false, nil
	}
	rq, err := c.checkGet(key, from, to, opt)
	if err != nil {
		return res, true, err
	}
	if err := agg.CheckWidth(every); err != nil {
		return res, true, rpc.Errorf(CodeBadInput, "%v", err)
	}
	if res.Type, err = c.types.lookup(ctx, key); err != nil {
		return res, true, err
	}
	homes, err := c.homes(ctx, key)
	if err != nil {
		return res, true, err
	}
	var lists [][]agg.Window
	var raw [][2]int64 // ranges aggregated from the raw shards
	down := false      // too few homes answered a chunk: the rest comes from the raw shards
	var cover func(lo, hi int64, levels []int64)
	cover = func(lo, hi int64, levels []int64) {
		if lo >= hi {
			return
		}
		if len(levels) == 0 || down {
			raw = appendRange(raw, lo, hi)
			return
		}
		width := levels[0]
		a, b := wholeWindows(lo, hi, horizon, width)
		if a >= b {
			cover(lo, hi, levels[1:])
			return
		}
		cover(lo, a, levels[1:])
		chunk := int64(wire.MaxRollupReadWindows) * width
		for x := a; x < b; {
			y := b
			if b-x > chunk {
				y = x + chunk
			}
			if down {
				raw = appendRange(raw, x, y)
				x = y
				continue
			}
			ws, bad, reached := c.rollupChunk(ctx, key, homes, width, x, y, rq)
			if !reached {
				// Too few homes answered: the finer levels would fare no better.
				down = true
				r.misses.Add((y - x) / width)
				raw = appendRange(raw, x, y)
				x = y
				continue
			}
			if len(ws) > 0 {
				lists = append(lists, rewindow(ws, every))
			}
			for _, g := range bad {
				if len(levels) == 1 {
					r.misses.Add((g[1] - g[0]) / width)
				}
				cover(g[0], g[1], levels[1:])
			}
			x = y
		}
		cover(b, hi, levels[1:])
	}
	cover(from, to, levels)
	for _, g := range raw {
		part, err := c.aggregate(ctx, key, g[0], g[1], every, opt, false)
		if err != nil {
			return res, true, err
		}
		lists = append(lists, part.Windows)
		res.Missing += part.Missing
		res.Partial = res.Partial || part.Partial
	}
	res.Windows = agg.Combine(lists...)
	if len(res.Windows) > MaxAggWindows {
		return wire.AggResult{}, true, rpc.Errorf(wire.CodeTooLarge, "aggregate of %q: %d windows, at most %d per request: ask for a shorter range or wider windows",
			key, len(res.Windows), MaxAggWindows)
	}
	return res, true, nil
}

// wholeWindows returns [a, b): the whole windows of width inside [lo, hi) that end by
// horizon. a >= b when there are none.
func wholeWindows(lo, hi, horizon, width int64) (a, b int64) {
	if lo < math.MinInt64+width || hi > math.MaxInt64-width {
		return 0, 0
	}
	a = agg.WindowStart(lo, width)
	if a < lo {
		a += width
	}
	return a, min(agg.WindowStart(hi, width), agg.WindowStart(horizon, width))
}

// rollupUseful reports whether some level has a whole window in [from, to) older than
// the horizon.
func rollupUseful(from, to, horizon int64, levels []int64) bool {
	for _, w := range levels {
		if a, b := wholeWindows(from, to, horizon, w); a < b {
			return true
		}
	}
	return false
}

// appendRange appends [lo, hi) to ascending ranges, joining it to the last when they meet.
func appendRange(rs [][2]int64, lo, hi int64) [][2]int64 {
	if n := len(rs); n > 0 && rs[n-1][1] == lo {
		rs[n-1][1] = hi
		return rs
	}
	return append(rs, [2]int64{lo, hi})
}

// rollupChunk asks every home for the windows of width over [lo, hi) and returns those
// a read quorum of homes agrees on — every home that answered holds the window settled
// with the same digest — and the ranges of the windows they could not vouch for.
// reached is false when fewer than a read quorum of homes answered.
func (c *Coordinator) rollupChunk(ctx context.Context, key string, homes []dht.Peer, width, lo, hi int64, rq int) (ws []agg.Window, bad [][2]int64, reached bool) {
	req := &wire.RollupReadReq{Key: key, Width: width, From: lo, To: hi}
	type view struct {
		known []int64
		ws    []agg.Window
		k, i  int // cursors
	}
	var views []*view
	for _, a := range callHomes[wire.RollupReadResp](ctx, c, homes, wire.MethodRollupRead, req) {
		if a == nil {
			continue
		}
		v := &view{known: a.Known}
		if len(a.Packed) > 0 {
			_, dec, err := agg.DecodeWindowsWire(a.Packed)
			if err != nil {
				c.log.Warn("rollup home sent undecodable windows", "series", key, "err", err)
				continue
			}
			v.ws = dec
		}
		if len(v.known)%2 != 0 {
			continue
		}
		views = append(views, v)
	}
	r := c.rollup
	addBad := func(t int64) {
		if n := len(bad); n > 0 && bad[n-1][1] == t {
			bad[n-1][1] = t + width
		} else {
			bad = append(bad, [2]int64{t, t + width})
		}
	}
	if len(views) < min(rq, len(homes)) {
		return nil, nil, false
	}
	var hits int64
	for t := lo; t < hi; t += width {
		ok := true
		var got *agg.Window
		for j, v := range views {
			for v.k < len(v.known) && v.known[v.k+1] <= t {
				v.k += 2
			}
			for v.i < len(v.ws) && v.ws[v.i].Start < t {
				v.i++
			}
			known := v.k < len(v.known) && v.known[v.k] <= t
			var w *agg.Window
			if v.i < len(v.ws) && v.ws[v.i].Start == t {
				w = &v.ws[v.i]
			}
			switch {
			case !known:
				ok = false
			case j == 0:
				got = w
			case (w == nil) != (got == nil) || w != nil && (w.Hash != got.Hash || w.Count != got.Count):
				ok = false
			}
		}
		if !ok {
			addBad(t)
			continue
		}
		hits++
		if got != nil {
			out := *got
			out.Hash = 0
			ws = append(ws, out)
		}
	}
	r.hits.Add(hits)
	return ws, bad, true
}

// rewindow merges ascending windows into windows of width every, a multiple of theirs.
func rewindow(ws []agg.Window, every int64) []agg.Window {
	out := ws[:0]
	for _, w := range ws {
		s := agg.WindowStart(w.Start, every)
		if n := len(out); n > 0 && out[n-1].Start == s {
			out[n-1].Partial = agg.Merge(out[n-1].Partial, w.Partial)
			continue
		}
		w.Start = s
		out = append(out, w)
	}
	return out
}
