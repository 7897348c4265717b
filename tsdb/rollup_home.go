package tsdb

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Limits of a home's pulls.
const (
	// maxPullQuanta bounds the quanta of one pull round of one series (a day of 10 s
	// quanta): what a round holds in memory is bounded whatever the series' length.
	maxPullQuanta = 8640
	// maxPullShardsPerRequest bounds the shards of one pull request to a replica. A
	// whole-quantum answer is one window (about 100 bytes), so a request stays well
	// inside a frame.
	maxPullShardsPerRequest = 1024
	// maxRoundsPerPass bounds the pull rounds of one series in one pass, so that a
	// series whose bounds start long ago does not hold up the others: it goes on at
	// the next pass.
	maxRoundsPerPass = 64
)

// rollups is a node's rollup machinery: the home side (the series it keeps rollups
// of, pulled in the background) and what its coordinator needs to mark and read.
type rollups struct {
	cfg    RollupConfig
	widths []int64 // levels in ns, finest first
	coord  *Coordinator
	cli    *rpc.Client
	log    *slog.Logger

	mu     sync.Mutex
	seq    uint64 // orders marks and pulls
	series map[string]*homeSeries

	kick chan struct{}
	stop chan struct{}
	done chan struct{}

	// Counters: finest-level... windows answered from rollups and from raw shards.
	hits, misses atomic.Int64
	pulls        atomic.Int64 // pull rounds
	started      atomic.Bool  // run was started

	afterPull atomic.Pointer[func()] // tests: runs between a pull's answers and their use

	// pulling serialises passes: two pulls of one window must not apply out of order.
	pulling sync.Mutex
}

// homeSeries is what a home holds of one series. The finest-level window starting at w
// is known (settled) when from <= w, w + width <= front, and it is neither dirty nor
// unsettled; a known window with no entry in l0 holds no point.
type homeSeries struct {
	started     bool
	from, front int64                   // ns; [from, front) has been pulled
	resetSeq    uint64                  // pulls that started before it are discarded
	l0          map[int64]agg.Partial   // non-empty finest windows; Hash is the digest
	dirty       map[int64]uint64        // finest window → seq of its latest mark
	unsettled   map[int64]struct{}      // pulled, but the replicas disagreed or too few answered
	cache       []map[int64]agg.Partial // per level ≥ 1: known windows
	typ         series.Type
}

func newRollups(cfg RollupConfig, coord *Coordinator, cli *rpc.Client, log *slog.Logger) *rollups {
	return &rollups{cfg: cfg, widths: cfg.widths(), coord: coord, cli: cli, log: log,
		series: make(map[string]*homeSeries), kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

func newHomeSeries(levels int) *homeSeries {
	s := &homeSeries{l0: make(map[int64]agg.Partial), dirty: make(map[int64]uint64), unsettled: make(map[int64]struct{})}
	s.cache = make([]map[int64]agg.Partial, levels)
	for i := 1; i < levels; i++ {
		s.cache[i] = make(map[int64]agg.Partial)
	}
	return s
}

// RollupStats counts a coordinator's use of rollups.
type RollupStats struct {
	Hits   int64 // rollup windows answered from the homes
	Misses int64 // rollup windows the homes could not settle, aggregated from raw shards
	Pulls  int64 // pull rounds this node ran as a home
	Series int   // series this node keeps rollups of
}

// RollupStats returns the coordinator's rollup counters (zero when rollups are off).
func (c *Coordinator) RollupStats() RollupStats {
	r := c.rollup
	if r == nil {
		return RollupStats{}
	}
	r.mu.Lock()
	n := len(r.series)
	r.mu.Unlock()
	return RollupStats{Hits: r.hits.Load(), Misses: r.misses.Load(), Pulls: r.pulls.Load(), Series: n}
}

// invalidate drops the cached coarser windows holding finest window w.
func (r *rollups) invalidate(s *homeSeries, w int64) {
	for i := 1; i < len(r.widths); i++ {
		delete(s.cache[i], agg.WindowStart(w, r.widths[i]))
	}
}

// window returns level i's window at start and whether it is known. r.mu held.
func (r *rollups) window(s *homeSeries, i int, start int64) (agg.Partial, bool) {
	if i == 0 {
		w := r.widths[0]
		if !s.started || start < s.from || start+w > s.front || s.dirty[start] != 0 {
			return agg.Partial{}, false
		}
		if _, bad := s.unsettled[start]; bad {
			return agg.Partial{}, false
		}
		return s.l0[start], true
	}
	if p, ok := s.cache[i][start]; ok {
		return p, true
	}
	var out agg.Partial
	for t, end := start, start+r.widths[i]; t < end; t += r.widths[i-1] {
		p, ok := r.window(s, i-1, t)
		if !ok {
			return agg.Partial{}, false
		}
		out = agg.Merge(out, p)
	}
	s.cache[i][start] = out
	return out, true
}

// read answers a coordinator's RollupReadReq.
func (r *rollups) read(req *wire.RollupReadReq) (*wire.RollupReadResp, error) {
	lvl := -1
	for i, w := range r.widths {
		if w == req.Width {
			lvl = i
		}
	}
	switch {
	case lvl < 0:
		return nil, rpc.Errorf(CodeBadInput, "rollup read of %q: width %v is not a level of this node (%v): configure every node's Rollups.Levels alike",
			req.Key, time.Duration(req.Width), r.cfg.Levels)
	case req.From >= req.To || req.From%req.Width != 0 || req.To%req.Width != 0:
		return nil, rpc.Errorf(CodeBadInput, "rollup read of %q: range [%d, %d) must be non-empty and aligned to %v", req.Key, req.From, req.To, time.Duration(req.Width))
	case (req.To-req.From)/req.Width > wire.MaxRollupReadWindows || req.To-req.From < 0:
		return nil, rpc.Errorf(wire.CodeTooLarge, "rollup read of %q: more than %d windows: ask in parts", req.Key, wire.MaxRollupReadWindows)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.series[req.Key]
	if s == nil {
		if len(r.series) < r.cfg.MaxSeries {
			r.series[req.Key] = newHomeSeries(len(r.widths))
			r.seq++
			select {
			case r.kick <- struct{}{}:
			default:
			}
		}
		return &wire.RollupReadResp{}, nil
	}
	resp := &wire.RollupReadResp{}
	var ws []agg.Window
	typ := s.typ
	open := false
	for t := req.From; t < req.To; t += req.Width {
		p, ok := r.window(s, lvl, t)
		if ok != open {
			resp.Known = append(resp.Known, t)
			open = ok
		}
		if ok && p.Count > 0 {
			ws = append(ws, agg.Window{Start: t, Partial: p})
			typ = p.Type
		}
	}
	if open {
		resp.Known = append(resp.Known, req.To)
	}
	if len(ws) > 0 {
		resp.Packed = agg.AppendWindowsWire(nil, typ, ws)
	}
	return resp, nil
}

// mark applies a coordinator's RollupMarkReq.
func (r *rollups) mark(req *wire.RollupMarkReq) error {
	if len(req.Starts) > wire.MaxRollupMarks {
		return rpc.Errorf(CodeBadInput, "rollup mark of %q: %d windows, at most %d: send a range", req.Key, len(req.Starts), wire.MaxRollupMarks)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	s := r.series[req.Key]
	if s == nil {
		return nil // nothing held: every later pull starts after this mark
	}
	if req.Reset {
		delete(r.series, req.Key)
		return nil
	}
	w0 := r.widths[0]
	for _, t := range req.Starts {
		w := agg.WindowStart(t, w0)
		s.dirty[w] = r.seq
		r.invalidate(s, w)
	}
	if req.From < req.To {
		lo := agg.WindowStart(req.From, w0)
		if !s.started || lo <= s.from {
			delete(r.series, req.Key) // start over: the whole series is pulled again
			return nil
		}
		// Pull everything from lo again; pulls under way are discarded.
		s.front = min(s.front, lo)
		for w := range s.l0 {
			if w >= lo {
				delete(s.l0, w)
			}
		}
		for i := 1; i < len(s.cache); i++ {
			clear(s.cache[i])
		}
		s.resetSeq = r.seq
	}
	return nil
}

// run pulls every PullInterval, or when a read started a new series, until close.
func (r *rollups) run() {
	defer close(r.done)
	t := time.NewTicker(r.cfg.PullInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		case <-r.kick:
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-r.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		if err := r.pass(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("rollup pull failed", "err", err)
		}
		cancel()
	}
}

func (r *rollups) close() {
	close(r.stop)
	<-r.done
}

// pass pulls, for every series held, what changed: until each series is caught up to
// the horizon, has had maxRoundsPerPass rounds, or failed.
func (r *rollups) pass(ctx context.Context) error {
	r.pulling.Lock()
	defer r.pulling.Unlock()
	r.mu.Lock()
	keys := make([]string, 0, len(r.series))
	for k := range r.series {
		keys = append(keys, k)
	}
	r.mu.Unlock()
	var errs []error
	for _, k := range keys {
		for range maxRoundsPerPass {
			more, err := r.pullSeries(ctx, k)
			if err != nil {
				errs = append(errs, err)
				break
			}
			if !more {
				break
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// pullSeries runs one pull round of a series: its dirty and unsettled windows, then
// the windows past its front up to the horizon, at most maxPullQuanta quanta. more
// says there is more to pull.
func (r *rollups) pullSeries(ctx context.Context, key string) (more bool, err error) {
	q := r.coord.cfg.DHT.Quantum
	qn := q.Duration().Nanoseconds()
	w0 := r.widths[0]
	top := r.widths[len(r.widths)-1]
	r.mu.Lock()
	s := r.series[key]
	if s == nil {
		r.mu.Unlock()
		return false, nil
	}
	started := s.started
	r.mu.Unlock()
	if !started {
		e, err := r.coord.Entry(ctx, key)
		if err != nil {
			var re *rpc.RemoteError
			if errors.As(err, &re) && re.Code == CodeUnknownSeries {
				return false, nil
			}
			return false, err
		}
		if !e.HasBounds {
			return false, nil
		}
		r.mu.Lock()
		if r.series[key] == s && !s.started {
			s.started, s.typ = true, e.Type
			s.from = agg.WindowStart(e.First, top)
			s.front = s.from
		}
		r.mu.Unlock()
	}
	horizon := agg.WindowStart(time.Now().Add(-r.cfg.Horizon).UnixNano(), w0)
	perWindow := w0 / qn
	budget := int64(maxPullQuanta) / perWindow
	if budget < 1 {
		budget = 1
	}
	// The windows of this round: dirty and unsettled ones first, then the front.
	r.mu.Lock()
	var wins []int64
	for w := range s.dirty {
		if w < s.from {
			delete(s.dirty, w) // never known: nothing to settle
			continue
		}
		if w+w0 <= s.front && int64(len(wins)) < budget {
			wins = append(wins, w)
		}
	}
	for w := range s.unsettled {
		// At most half the round: the front must not starve behind windows whose
		// replicas keep disagreeing (until repair).
		if s.dirty[w] == 0 && int64(len(wins)) < max(1, budget/2) {
			wins = append(wins, w)
		}
	}
	front, hi := s.front, s.front
	for hi+w0 <= horizon && int64(len(wins)) < budget {
		wins = append(wins, hi)
		hi += w0
	}
	r.seq++
	pullSeq := r.seq
	r.mu.Unlock()
	if len(wins) == 0 {
		return false, nil
	}
	r.pulls.Add(1)
	got, err := r.pullWindows(ctx, key, wins)
	if err != nil {
		return false, err
	}
	if f := r.afterPull.Load(); f != nil {
		(*f)()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.series[key] != s || pullSeq < s.resetSeq || s.front != front {
		return true, nil // reset or rewound meanwhile: pull again
	}
	for i, w := range wins {
		if s.dirty[w] > pullSeq {
			continue // marked after this pull started
		}
		delete(s.dirty, w)
		r.invalidate(s, w)
		if !got[i].ok {
			s.unsettled[w] = struct{}{}
			continue
		}
		delete(s.unsettled, w)
		if got[i].p.Count > 0 {
			s.l0[w] = got[i].p
			s.typ = got[i].p.Type
		} else {
			delete(s.l0, w)
		}
	}
	s.front = hi
	return hi+w0 <= horizon || len(s.dirty) > 0 && hasOlder(s.dirty, pullSeq, s.front), nil
}

// hasOlder reports a dirty window below front marked before seq: one the round's
// budget left for the next round.
func hasOlder(dirty map[int64]uint64, seq uint64, front int64) bool {
	for w, m := range dirty {
		if m < seq && w < front {
			return true
		}
	}
	return false
}

// pulled is one finest window's statistics as a pull settled them.
type pulled struct {
	p  agg.Partial // Hash: the window's digest
	ok bool        // settled: every replica that answered agrees and a quorum answered
}

// pullWindows asks every replica of the windows' quanta for its statistics and settles
// each window.
func (r *rollups) pullWindows(ctx context.Context, key string, wins []int64) ([]pulled, error) {
	c := r.coord
	q := c.cfg.DHT.Quantum
	qn := q.Duration().Nanoseconds()
	w0 := r.widths[0]
	var starts []int64
	for _, w := range wins {
		for t := w; t < w+w0; t += qn {
			starts = append(starts, q.Start(t))
		}
	}
	spans, err := c.planRead(ctx, key, starts, math.MinInt64, math.MaxInt64)
	if err != nil {
		return nil, err
	}
	type item struct{ shard, replica int }
	answers := make([][]aggAnswer, len(spans))
	batches := groupByPeer(func(yield func(dht.Peer, item) bool) {
		for i := range spans {
			answers[i] = make([]aggAnswer, len(spans[i].replicas))
			for j, p := range spans[i].replicas {
				if !yield(p, item{i, j}) {
					return
				}
			}
		}
	}, maxPullShardsPerRequest, nil)
	results := fanOut(ctx, batches, c.cfg.ReadConcurrency, c.cfg.CallTimeout,
		func(ctx context.Context, b *peerBatch[item]) (*wire.AggResp, error) {
			req := &wire.AggReq{Every: qn, Shards: make([]wire.ShardAgg, len(b.items))}
			for k, it := range b.items {
				s := &spans[it.shard]
				req.Shards[k] = wire.ShardAgg{ID: s.ref.ID[:], Start: s.ref.Start, Key: key, From: s.from, To: s.to}
			}
			return c.replicas.For(b.peer).Agg(ctx, req)
		})
	for range batches {
		res := <-results
		if res.err != nil {
			continue // that replica did not answer: its quanta may stay unsettled
		}
		for k, it := range res.batch.items {
			answers[it.shard][it.replica] = aggAnswer{ok: true, res: res.resp.Shards[k], isData: true}
		}
	}
	rq := c.cfg.ReadQuorum
	out := make([]pulled, len(wins))
	per := int(w0 / qn)
	for i := range wins {
		o := pulled{ok: true}
		for k := i * per; k < (i+1)*per; k++ {
			p, ok := settleQuantum(answers[k], rq)
			if !ok {
				o.ok = false
				break
			}
			if p.Count > 0 {
				h := o.p.Hash + p.Hash
				o.p = agg.Merge(o.p, p)
				o.p.Hash = h
			}
		}
		out[i] = o
	}
	return out, nil
}

// settleQuantum settles one quantum from every replica's answer: its statistics (Hash
// the digest) when every replica that answered holds the same copy and at least a read
// quorum answered.
func settleQuantum(ans []aggAnswer, rq int) (agg.Partial, bool) {
	answered := 0
	var digest uint64
	var data *aggAnswer
	first := true
	for k := range ans {
		a := &ans[k]
		if !a.ok {
			continue
		}
		answered++
		d := uint64(0)
		held := a.res.Held && a.res.Count > 0
		if held {
			d = a.res.Hash
			if d == 0 {
				d = 1 // never the empty digest
			}
		}
		if first {
			digest, first = d, false
		} else if d != digest {
			return agg.Partial{}, false
		}
		if held && data == nil {
			data = a
		}
	}
	if answered < min(rq, len(ans)) || answered == 0 {
		return agg.Partial{}, false
	}
	if data == nil {
		return agg.Partial{}, true
	}
	if len(data.res.Windows) != 1 || data.res.Windows[0].Count != data.res.Count {
		return agg.Partial{}, false
	}
	p := data.res.Windows[0].Partial
	p.Hash = digest
	return p, true
}
