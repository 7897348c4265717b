package tsdb

import (
	"context"
	"math"
	"sort"
	"time"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// registerRollups serves the home side of rollups.
func (n *Node) registerRollups(r *rollups) {
	handle(n.srv, wire.MethodRollupMark, func(_ context.Context, req *wire.RollupMarkReq) (*wire.RollupMarkResp, error) {
		if err := r.mark(req); err != nil {
			return nil, err
		}
		return &wire.RollupMarkResp{}, nil
	})
	handle(n.srv, wire.MethodRollupRead, func(_ context.Context, req *wire.RollupReadReq) (*wire.RollupReadResp, error) {
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
// (off, no level divides every, or no whole window older than the horizon): the
// caller aggregates the raw shards then.
func (c *Coordinator) rollupAggregate(ctx context.Context, key string, from, to, every int64, opt GetOptions) (res wire.AggResult, handled bool, err error) {
	r := c.rollup
	if r == nil || every <= 0 {
		return res, false, nil
	}
	width := int64(0)
	for _, w := range r.widths {
		if every%w == 0 {
			width = w
		}
	}
	if width == 0 || from >= to || from < math.MinInt64+every || to > math.MaxInt64-every {
		return res, false, nil
	}
	// [a, b): whole windows of every, older than the horizon.
	a := agg.WindowStart(from, every)
	if a < from {
		a += every
	}
	b := min(agg.WindowStart(to, every), agg.WindowStart(time.Now().Add(-r.cfg.Horizon).UnixNano(), every))
	if a >= b {
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
	if from < a {
		raw = append(raw, [2]int64{from, a})
	}
	chunk := max(every, (wire.MaxRollupReadWindows*width)/every*every)
	for lo := a; lo < b; {
		hi := b
		if b-lo > chunk {
			hi = lo + chunk
		}
		ws, bad := c.rollupChunk(ctx, key, homes, width, lo, hi, rq)
		if len(ws) > 0 {
			lists = append(lists, rewindow(ws, every))
		}
		for _, g := range bad {
			if n := len(raw); n > 0 && raw[n-1][1] == g[0] {
				raw[n-1][1] = g[1]
			} else {
				raw = append(raw, g)
			}
		}
		lo = hi
	}
	if b < to {
		if n := len(raw); n > 0 && raw[n-1][1] == b {
			raw[n-1][1] = to
		} else {
			raw = append(raw, [2]int64{b, to})
		}
	}
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

// rollupChunk asks every home for the windows of width over [lo, hi) and returns those
// a read quorum of homes agrees on — every home that answered holds the window settled
// with the same digest — and the ranges the raw shards must answer.
func (c *Coordinator) rollupChunk(ctx context.Context, key string, homes []dht.Peer, width, lo, hi int64, rq int) (ws []agg.Window, bad [][2]int64) {
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
		r.misses.Add((hi - lo) / width)
		return nil, [][2]int64{{lo, hi}}
	}
	var hits, misses int64
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
			misses++
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
	r.misses.Add(misses)
	return ws, bad
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
