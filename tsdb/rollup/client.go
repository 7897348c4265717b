package rollup

import (
	"context"
	"log/slog"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Client is a coordinator's side of rollups: it marks late writes and deletes at a
// series' homes, and answers aggregates from the windows the homes agree on. The
// coordinator finds the homes (Source.Homes) and reads the raw shards; the Client
// holds no series state.
type Client struct {
	widths  []int64 // levels in ns, finest first
	horizon time.Duration
	cli     *rpc.Client
	timeout time.Duration // per call to a home
	log     *slog.Logger

	hits, misses atomic.Int64 // see Stats

	// self and local: this node's peer ID and homes (ServeLocally), which a mark or
	// a read for a home that is this node calls directly; nil: every home by RPC.
	self  string
	local *Homes

	// quiet holds, per series, until when which homes promised not to pull it
	// (RollupMarkResp.Quiet): at most maxQuietSeries series.
	qmu   sync.Mutex
	quiet map[string]map[string]time.Time // key → home ID → until
}

// maxQuietSeries bounds the series a coordinator remembers homes' quiet periods of.
const maxQuietSeries = 4096

// ServeLocally has the client call h directly for the home that is this node (peer ID
// self) instead of over RPC. Call it before the client is used.
func (c *Client) ServeLocally(self string, h *Homes) {
	c.self, c.local = self, h
}

// NewClient returns a coordinator's client of the homes configured by cfg (with its
// defaults set: Config.WithDefaults), calling them over cli with callTimeout per call.
func NewClient(cfg Config, cli *rpc.Client, callTimeout time.Duration, log *slog.Logger) *Client {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Client{widths: cfg.widths(), horizon: cfg.Horizon, cli: cli, timeout: callTimeout, log: log}
}

// Stats returns the coordinator side's counters (Hits, Misses).
func (c *Client) Stats() Stats {
	return Stats{Hits: c.hits.Load(), Misses: c.misses.Load()}
}

// callHomes sends req to every home at once and returns each answer (nil: none). The
// home that is this node, when the client serves it locally, is asked through local,
// on the caller's goroutine, once the others' requests are on their way.
func callHomes[Req, Resp any](ctx context.Context, c *Client, homes []dht.Peer, method string, req *Req, local func(*Homes, *Req) (*Resp, error)) []*Resp {
	return callHomesEach(ctx, c, homes, method, func(int) *Req { return req }, local)
}

// callHomesEach is callHomes with a request of its own for each home: reqOf(i) for homes[i].
func callHomesEach[Req, Resp any](ctx context.Context, c *Client, homes []dht.Peer, method string, reqOf func(int) *Req, local func(*Homes, *Req) (*Resp, error)) []*Resp {
	out := make([]*Resp, len(homes))
	done := make(chan struct{}, len(homes))
	mine := -1
	for i, h := range homes {
		if c.local != nil && h.ID == c.self {
			mine = i
			done <- struct{}{}
			continue
		}
		go func() {
			defer func() { done <- struct{}{} }()
			ctx, cancel := context.WithTimeout(ctx, c.timeout)
			defer cancel()
			var resp Resp
			if err := rpc.Invoke(ctx, c.cli, h.RPCAddr, method, reqOf(i), &resp); err != nil {
				c.log.Debug("rollup home did not answer", "method", method, "rpc", h.RPCAddr, "err", err)
				return
			}
			out[i] = &resp
		}()
	}
	if mine >= 0 {
		resp, err := local(c.local, reqOf(mine))
		if err != nil {
			c.log.Debug("rollup home (this node) refused", "method", method, "err", err)
		} else {
			out[mine] = resp
		}
	}
	for range homes {
		<-done
	}
	return out
}

// LateMarks returns the mark of the finest windows of pts (sorted) older than
// now − Horizon/2, the points a home may already have pulled; nil when there are none.
// Past wire.MaxRollupMarks windows it marks their range instead.
func (c *Client) LateMarks(key string, pts *series.Points, now time.Time) *wire.RollupMarkReq {
	cutoff := now.Add(-c.horizon / 2).UnixNano()
	n := sort.Search(pts.Len(), func(i int) bool { return pts.T[i] >= cutoff })
	if n == 0 {
		return nil
	}
	w0 := c.widths[0]
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
	return req
}

// Mark sends req to every home of its series at once. It fails when fewer than quorum
// homes (at most all of them) acknowledged: the caller's data is stored then, and a
// retry marks it again.
//
// A late mark (not a delete) is not sent while at least quorum of the homes are inside
// a quiet period they promised for the series (RollupMarkResp.Quiet): none of them
// pulls the series before the period ends, so each pull that could vouch for the
// window starts after the caller's points reached their replicas, as after a mark.
func (c *Client) Mark(ctx context.Context, homes []dht.Peer, req *wire.RollupMarkReq, quorum int) error {
	w := min(quorum, len(homes))
	late := !req.Reset && req.From >= req.To
	if late && c.quietAt(req.Key, homes, time.Now()) >= w {
		return nil
	}
	sent := time.Now()
	answers := callHomes(ctx, c, homes, wire.MethodRollupMark, req, (*Homes).Mark)
	acked := 0
	for i, a := range answers {
		if a == nil {
			continue
		}
		acked++
		if late && a.Quiet > 0 {
			// A margin for the two clocks' rates: the period counts from when the home
			// answered, this from before the request left.
			c.keepQuiet(req.Key, homes[i].ID, sent.Add(time.Duration(a.Quiet)*7/8))
		}
	}
	if acked < w {
		return rpc.Errorf(wire.CodeUnavailable, "series %q: the points are stored but only %d of %d rollup homes learnt of them (need %d): retry the request",
			req.Key, acked, len(homes), w)
	}
	return nil
}

// quietAt counts the homes inside a quiet period for key at now.
func (c *Client) quietAt(key string, homes []dht.Peer, now time.Time) int {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	n := 0
	for _, h := range homes {
		if until, ok := c.quiet[key][h.ID]; ok && now.Before(until) {
			n++
		}
	}
	return n
}

// keepQuiet remembers that home promised not to pull key until until. Past
// maxQuietSeries series it first forgets the periods that ended, then, if still
// full, remembers nothing new (the next late point is marked).
func (c *Client) keepQuiet(key, home string, until time.Time) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	m := c.quiet[key]
	if m == nil {
		if c.quiet == nil {
			c.quiet = make(map[string]map[string]time.Time)
		}
		if len(c.quiet) >= maxQuietSeries {
			now := time.Now()
			for k, hs := range c.quiet {
				for id, u := range hs {
					if !now.Before(u) {
						delete(hs, id)
					}
				}
				if len(hs) == 0 {
					delete(c.quiet, k)
				}
			}
			if len(c.quiet) >= maxQuietSeries {
				return
			}
		}
		m = make(map[string]time.Time)
		c.quiet[key] = m
	}
	m[home] = until
}

// Plan is how an aggregate is covered by the levels: made by Client.Plan, used by
// Client.Aggregate.
type Plan struct {
	from, to, every int64
	horizon         int64   // ns; windows ending later come from the raw shards
	levels          []int64 // dividing every, coarsest first
}

// Plan returns how rollups would cover an aggregate of [from, to) in windows of width
// every at time now; false when they cannot help (no level fits every, or no whole
// window of a level ends before the horizon): the caller aggregates the raw shards.
//
// A level fits when each of its windows lies inside one window of every: when its
// width divides every, or when the whole range lies inside one window of every (an
// aggregate of the whole range, as InfluxQL's without GROUP BY time() asks with every
// math.MaxInt64), where every level does.
func (c *Client) Plan(from, to, every int64, now time.Time) (Plan, bool) {
	p := Plan{from: from, to: to, every: every, horizon: now.Add(-c.horizon).UnixNano()}
	if every <= 0 || from >= to {
		return p, false
	}
	single := agg.WindowStart(from, every) == agg.WindowStart(to-1, every)
	for i := len(c.widths) - 1; i >= 0; i-- {
		if single || every%c.widths[i] == 0 {
			p.levels = append(p.levels, c.widths[i])
		}
	}
	for _, w := range p.levels {
		if a, b := wholeWindows(from, to, p.horizon, w); a < b {
			return p, true
		}
	}
	return p, false
}

// Aggregate answers the aggregate p plans from the homes where a read quorum rq of
// them agree, and from raw (the raw shards, over [lo, hi)) elsewhere. The answer's
// windows are combined; its Type is left to the caller.
//
// The range is covered coarsest level first: the whole windows of the coarsest level
// that divides every, then at its edges the whole windows of the next finer one, and
// so on down to the raw shards. A range ending now reads at most the horizon (and the
// part of a finest window before it) from the raw shards, not the whole last window of
// every; a window the homes cannot vouch for is covered by the finer levels the same
// way.
func (c *Client) Aggregate(ctx context.Context, key string, homes []dht.Peer, p Plan, rq int,
	raw func(lo, hi int64) (wire.AggResult, error)) (wire.AggResult, error) {
	var res wire.AggResult
	var lists [][]agg.Window
	var rawRanges [][2]int64 // ranges aggregated from the raw shards
	down := false            // too few homes answered a chunk: the rest comes from the raw shards
	var cover func(lo, hi int64, levels []int64)
	cover = func(lo, hi int64, levels []int64) {
		if lo >= hi {
			return
		}
		if len(levels) == 0 || down {
			rawRanges = appendRange(rawRanges, lo, hi)
			return
		}
		width := levels[0]
		a, b := wholeWindows(lo, hi, p.horizon, width)
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
				rawRanges = appendRange(rawRanges, x, y)
				x = y
				continue
			}
			ws, bad, reached := c.chunk(ctx, key, homes, width, x, y, rq)
			if !reached {
				// Too few homes answered: the finer levels would fare no better.
				down = true
				c.misses.Add((y - x) / width)
				rawRanges = appendRange(rawRanges, x, y)
				x = y
				continue
			}
			if len(ws) > 0 {
				lists = append(lists, rewindow(ws, p.every))
			}
			for _, g := range bad {
				if len(levels) == 1 {
					c.misses.Add((g[1] - g[0]) / width)
				}
				cover(g[0], g[1], levels[1:])
			}
			x = y
		}
		cover(b, hi, levels[1:])
	}
	cover(p.from, p.to, p.levels)
	for _, g := range rawRanges {
		part, err := raw(g[0], g[1])
		if err != nil {
			return wire.AggResult{}, err
		}
		lists = append(lists, part.Windows)
		res.Missing += part.Missing
		res.Partial = res.Partial || part.Partial
	}
	res.Windows = agg.Combine(lists...)
	return res, nil
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

// appendRange appends [lo, hi) to ascending ranges, joining it to the last when they meet.
func appendRange(rs [][2]int64, lo, hi int64) [][2]int64 {
	if n := len(rs); n > 0 && rs[n-1][1] == lo {
		rs[n-1][1] = hi
		return rs
	}
	return append(rs, [2]int64{lo, hi})
}

// chunk asks the homes for the windows of width over [lo, hi) and returns those
// a read quorum of homes agrees on — every home that answered holds the window settled
// with the same digest — and the ranges of the windows they could not vouch for.
// reached is false when fewer than a read quorum of homes answered.
//
// One home (this node when it is one, else the first) sends its windows in full; the
// others send only their digests, which is all the agreement needs. When that home
// does not answer, the first of the others that did is asked for its windows.
func (c *Client) chunk(ctx context.Context, key string, homes []dht.Peer, width, lo, hi int64, rq int) (ws []agg.Window, bad [][2]int64, reached bool) {
	full := &wire.RollupReadReq{Key: key, Width: width, From: lo, To: hi}
	digests := *full
	digests.Digests = true
	data := 0
	for i, h := range homes {
		if c.local != nil && h.ID == c.self {
			data = i
		}
	}
	type view struct {
		known []int64
		ws    []agg.Window
		k, i  int // cursors
	}
	decode := func(a *wire.RollupReadResp, wantFull bool) *view {
		if a == nil || len(a.Known)%2 != 0 {
			return nil
		}
		v := &view{known: a.Known}
		var err error
		switch {
		case wantFull && len(a.Packed) > 0:
			_, v.ws, err = agg.DecodeWindowsWire(a.Packed)
		case wantFull && len(a.Digests) > 0:
			return nil // digests where windows were asked for: no data from this home
		case len(a.Digests) > 0:
			v.ws, err = agg.DecodeDigestsWire(a.Digests)
		case len(a.Packed) > 0:
			// A home that does not know Digests sends its windows in full.
			_, v.ws, err = agg.DecodeWindowsWire(a.Packed)
		}
		if err != nil {
			c.log.Warn("rollup home sent undecodable windows", "series", key, "err", err)
			return nil
		}
		return v
	}
	answers := callHomesEach(ctx, c, homes, wire.MethodRollupRead, func(i int) *wire.RollupReadReq {
		if i == data {
			return full
		}
		return &digests
	}, (*Homes).Read)
	first := decode(answers[data], true)
	if first == nil {
		// The home asked for windows did not answer: ask one that sent digests.
		for i, a := range answers {
			if i == data || a == nil {
				continue
			}
			data = i
			first = decode(callHomes(ctx, c, homes[i:i+1], wire.MethodRollupRead, full, (*Homes).Read)[0], true)
			break
		}
	}
	var views []*view
	if first != nil {
		views = append(views, first) // the windows answered come from views[0]
	}
	for i, a := range answers {
		if i == data {
			continue
		}
		if v := decode(a, false); v != nil {
			views = append(views, v)
		}
	}
	if first == nil {
		// No home sent its windows: none can be answered from the homes.
		views = nil
	}
	addBad := func(t, end int64) {
		if n := len(bad); n > 0 && bad[n-1][1] == t {
			bad[n-1][1] = end
		} else {
			bad = append(bad, [2]int64{t, end})
		}
	}
	if len(views) < min(rq, len(homes)) {
		return nil, nil, false
	}
	var hits int64
	pace := newWindowPacer()
	for t := lo; t < hi; t += width {
		pace.Spend(1)
		// Where a home vouches for nothing until next, every window up to there is
		// bad: one step, not one a window (a home that has pulled nothing yet knows
		// nothing of the whole range).
		next := t
		for _, v := range views {
			for v.k < len(v.known) && v.known[v.k+1] <= t {
				v.k += 2
			}
			if v.k == len(v.known) {
				next = hi
			} else if v.known[v.k] > t {
				next = max(next, min(hi, lo+(v.known[v.k]-lo)/width*width))
			}
		}
		if next > t {
			addBad(t, next)
			t = next - width
			continue
		}
		ok := true
		var got *agg.Window
		for j, v := range views {
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
			addBad(t, t+width)
			continue
		}
		hits++
		if got != nil {
			out := *got
			out.Hash = 0
			ws = append(ws, out)
		}
	}
	c.hits.Add(hits)
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
