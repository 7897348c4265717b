package rollup

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/internal/netyield"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Limits of a home's pulls.
const (
	// maxPullQuanta bounds the quanta of one pull round of one series (a day of 10 s
	// quanta): what a round holds in memory is bounded whatever the series' length.
	maxPullQuanta = 8640
	// maxRoundsPerPass bounds the pull rounds of one series in one pass, so that a
	// series whose bounds start long ago does not hold up the others: it goes on at
	// the next pass.
	maxRoundsPerPass = 64
)

// Source is what a home reads of the cluster: where a series' homes are, its catalog
// entry, and what each raw replica holds of its quanta. A node's coordinator is one.
type Source interface {
	// Homes returns the rollup homes of a series: its registry replicas.
	Homes(ctx context.Context, key string) ([]dht.Peer, error)
	// Entry returns a series' catalog entry read at quorum: its type and bounds (a
	// home pulls nothing past them). An error coded wire.wire.CodeUnknownSeries says the
	// series does not exist.
	Entry(ctx context.Context, key string) (catalog.Entry, error)
	// QuantumStats asks every replica of the quanta starting at starts (UNIX seconds,
	// quanta.Quantum.Start) for its statistics of the whole quantum with its digest in
	// Hash (wire.ShardAggResult, one window of the quantum's width) and returns, per
	// quantum in the order of starts, one Answer per replica. A replica that did not
	// answer is an Answer with OK false.
	QuantumStats(ctx context.Context, key string, starts []int64) ([][]Answer, error)
}

// Answer is what one replica said about one quantum.
type Answer struct {
	OK  bool // the replica answered
	Res wire.ShardAggResult
}

// Options is what a home needs besides its Config.
type Options struct {
	Quantum    quanta.Quantum    // the cluster's quantum
	ReadQuorum int               // replicas that must agree for a quantum to settle
	Store      store.RollupStore // where the levels are kept; nil: in memory
	// Self is this node's peer ID: a series whose homes leave it out is dropped. ""
	// (or a nil Source) keeps every series.
	Self string
	Log  *slog.Logger // nil: discarded
}

// Homes is the home side of a node's rollups: the series it keeps rollups of, pulled
// in the background, their levels in the store, and the RPC handlers coordinators
// mark and read them through.
type Homes struct {
	cfg     Config
	widths  []int64 // levels in ns, finest first
	print   uint64  // levelsPrint(widths)
	src     Source
	quantum quanta.Quantum
	rq      int // read quorum
	log     *slog.Logger
	st      store.RollupStore
	self    string

	// mu guards series and seq. Reads of the store that must agree with the marks
	// (read) hold it shared; marks and the application of pulls hold it exclusively.
	mu     sync.RWMutex
	seq    uint64 // orders marks and pulls
	series map[string]*homeSeries

	kick chan struct{}
	stop chan struct{}
	done chan struct{}

	// Counters: see Stats.
	pulls   atomic.Int64 // pull rounds
	pulled  atomic.Int64 // finest windows pulled
	dropped atomic.Int64 // series dropped: no longer a home, or levels changed
	started atomic.Bool  // Start was called

	afterPull atomic.Pointer[func()]           // tests: runs between a pull's answers and their use
	clock     atomic.Pointer[func() time.Time] // tests may move the clock; nil: time.Now

	// pulling serialises passes: two pulls of one window must not apply out of order.
	pulling sync.Mutex

	// quiet holds, per series this home held nothing of when a coordinator marked it,
	// until when it promised that no pull of the series starts (Mark's answer, Quiet):
	// adopt starts the series no earlier. At most MaxSeries entries; guarded by qmu,
	// taken with mu held (shared or exclusive).
	qmu   sync.Mutex
	quiet map[string]time.Time
}

// QuietPeriod is how long a home promises, in its answer to a mark of a series it
// holds nothing of, that no pull of the series starts; coordinators skip marking that
// series' later late points at it meanwhile (Client.Mark). A pull loop's first pass
// waits as long after Start, so that a restarted home keeps what it promised before.
const QuietPeriod = time.Second

// homeSeries is what a home holds of one series in memory: its head and its marks,
// nothing per window (the windows are in the store). The finest-level window starting
// at w is known (settled) when from <= w, w + width <= front, it is inside the level's
// retention, and it is neither dirty nor unsettled; a known window with no record holds
// no point. A coarser window is known when its record exists and is inside its level's
// retention. len(dirty) + len(unsettled) <= Rollups.MaxMarks.
type homeSeries struct {
	started     bool
	from, front int64 // ns; [from, front) has been pulled
	typ         series.Type
	resetSeq    uint64             // pulls that started before it are discarded
	dirty       map[int64]uint64   // finest window → seq of its latest mark
	unsettled   map[int64]struct{} // pulled, but the replicas disagreed or too few answered
	away        int                // consecutive passes at which this node was not a home
	notBefore   time.Time          // no pull starts before: a quiet period promised before it was held
	pullSeq     uint64             // seq of the latest pull started
	swept       time.Time          // last retention sweep
}

// NewHomes returns a node's homes over cfg (with its defaults set: Config.WithDefaults),
// holding what opt.Store kept before a restart. Start starts its pull loop.
func NewHomes(cfg Config, src Source, opt Options) *Homes {
	log, st := opt.Log, opt.Store
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if st == nil {
		st = store.NewMem()
	}
	r := &Homes{cfg: cfg, widths: cfg.widths(), src: src, quantum: opt.Quantum, rq: opt.ReadQuorum, log: log, st: st, self: opt.Self,
		series: make(map[string]*homeSeries), kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		quiet: make(map[string]time.Time)}
	r.print = levelsPrint(r.widths)
	if err := r.load(); err != nil {
		r.log.Warn("rollups: could not load what the store holds; those series are pulled again", "err", err)
	}
	return r
}

func newHomeSeries() *homeSeries {
	return &homeSeries{dirty: make(map[int64]uint64), unsettled: make(map[int64]struct{})}
}

func (s *homeSeries) head(print uint64) []byte {
	return encodeHead(rollupHead{Started: s.started, Type: s.typ, From: s.from, Front: s.front, Levels: print})
}

// load reads the series this home kept before a restart: heads and marks. Series
// over MaxSeries, with unreadable heads, or written under other levels are dropped.
func (r *Homes) load() error {
	var drop []string
	err := r.st.RollupHeads(func(key string, b []byte) bool {
		h, err := decodeHead(b)
		if err != nil || h.Levels != r.print || len(r.series) >= r.cfg.MaxSeries {
			drop = append(drop, key)
			return true
		}
		s := newHomeSeries()
		s.started, s.typ, s.from, s.front = h.Started, h.Type, h.From, h.Front
		r.series[key] = s
		return true
	})
	r.seq = 1
	var errs []error
	for key, s := range r.series {
		errs = append(errs, r.st.RollupRecords(key, markLevel, math.MinInt64, math.MaxInt64, func(w int64, v []byte) bool {
			if len(v) == 1 && v[0] == markUnsettled {
				s.unsettled[w] = struct{}{}
			} else {
				s.dirty[w] = r.seq // settled by any later pull
			}
			return true
		}))
	}
	for _, key := range drop {
		r.dropped.Add(1)
		errs = append(errs, r.st.UpdateRollups(store.RollupUpdate{Key: key, Drop: true}))
	}
	return errors.Join(append(errs, err)...)
}

// Stats returns the home side's counters (Pulls, Pulled, Series, Dropped).
func (r *Homes) Stats() Stats {
	r.mu.RLock()
	n := len(r.series)
	r.mu.RUnlock()
	return Stats{Pulls: r.pulls.Load(), Pulled: r.pulled.Load(), Series: n, Dropped: r.dropped.Load()}
}

// now is the home's clock.
func (r *Homes) now() time.Time {
	if f := r.clock.Load(); f != nil {
		return (*f)()
	}
	return time.Now()
}

// SetClock moves the home's clock (tests: a pass an hour later); nil restores time.Now.
func (r *Homes) SetClock(now func() time.Time) {
	if now == nil {
		r.clock.Store(nil)
		return
	}
	r.clock.Store(&now)
}

// AfterPull has f run between a pull's answers and their use (tests: a write landing
// during a pull); nil removes it.
func (r *Homes) AfterPull(f func()) {
	if f == nil {
		r.afterPull.Store(nil)
		return
	}
	r.afterPull.Store(&f)
}

// cutoff returns the start of level i's oldest window inside its retention
// (math.MinInt64 when the level is kept forever).
func (r *Homes) cutoff(i int) int64 {
	if i >= len(r.cfg.Retention) || r.cfg.Retention[i] <= 0 {
		return math.MinInt64
	}
	return agg.WindowStart(r.now().Add(-r.cfg.Retention[i]).UnixNano(), r.widths[i]) + r.widths[i]
}

// known0 reports whether finest window w is known. r.mu held.
func (r *Homes) known0(s *homeSeries, w, cut int64) bool {
	if !s.started || w < s.from || w+r.widths[0] > s.front || w < cut || s.dirty[w] != 0 {
		return false
	}
	_, bad := s.unsettled[w]
	return !bad
}

// coarseSpans appends the spans of the coarser windows holding finest window w.
func (r *Homes) coarseSpans(dst []store.RollupSpan, w int64) []store.RollupSpan {
	for i := 1; i < len(r.widths); i++ {
		dst = append(dst, spanOne(uint8(i), agg.WindowStart(w, r.widths[i])))
	}
	return dst
}

// Read answers a coordinator's RollupReadReq from the store: the windows of the
// level it names that this home vouches for. A series it does not hold yet is
// answered with nothing known, and held from then on (below MaxSeries).
func (r *Homes) Read(req *wire.RollupReadReq) (*wire.RollupReadResp, error) {
	lvl := -1
	for i, w := range r.widths {
		if w == req.Width {
			lvl = i
		}
	}
	switch {
	case lvl < 0:
		return nil, rpc.Errorf(wire.CodeBadInput, "rollup read of %q: width %v is not a level of this node (%v): configure every node's Rollups.Levels alike",
			req.Key, time.Duration(req.Width), r.cfg.Levels)
	case req.From >= req.To || req.From%req.Width != 0 || req.To%req.Width != 0:
		return nil, rpc.Errorf(wire.CodeBadInput, "rollup read of %q: range [%d, %d) must be non-empty and aligned to %v", req.Key, req.From, req.To, time.Duration(req.Width))
	case (req.To-req.From)/req.Width > wire.MaxRollupReadWindows || req.To-req.From < 0:
		return nil, rpc.Errorf(wire.CodeTooLarge, "rollup read of %q: more than %d windows: ask in parts", req.Key, wire.MaxRollupReadWindows)
	}
	if series.ValidateKey(req.Key) != nil {
		return nil, rpc.Errorf(wire.CodeBadInput, "rollup read: %v", series.ValidateKey(req.Key))
	}
	r.mu.RLock()
	s := r.series[req.Key]
	if s == nil {
		r.mu.RUnlock()
		r.adopt(req.Key)
		return &wire.RollupReadResp{}, nil
	}
	defer r.mu.RUnlock()
	// The level's records in the range, ascending.
	type rec struct {
		start int64
		p     agg.Partial
	}
	var recs []rec
	var derr error
	// Only windows inside [from, front) of a started series can be known: the read
	// and the walk skip the rest of the range, which a series adopted a moment ago
	// (the whole range) or a range reaching past the horizon (its end) would
	// otherwise cost one step a window.
	lo, hi := req.From, req.From
	if s.started {
		lo = max(req.From, min(req.To, agg.WindowStart(s.from, req.Width)))
		hi = max(lo, min(req.To, agg.WindowStart(s.front, req.Width)))
	}
	if lo < hi {
		if err := r.st.RollupRecords(req.Key, uint8(lvl), lo, hi, func(start int64, v []byte) bool {
			p, err := decodeWindow(v)
			if err != nil {
				derr = err
				return false
			}
			recs = append(recs, rec{start, p})
			return true
		}); err != nil || derr != nil {
			return nil, rpc.Errorf(wire.CodeUnavailable, "rollup read of %q: the home's store: %v", req.Key, errors.Join(err, derr))
		}
	}
	resp := &wire.RollupReadResp{}
	var ws []agg.Window
	typ := s.typ
	open := false
	cut := r.cutoff(lvl)
	k := 0
	pace := newWindowPacer()
	for t := lo; t < hi; t += req.Width {
		pace.Spend(1)
		for k < len(recs) && recs[k].start < t {
			k++
		}
		var p agg.Partial
		var ok bool
		has := k < len(recs) && recs[k].start == t
		if has {
			p = recs[k].p
		}
		if lvl == 0 {
			ok = r.known0(s, t, cut)
		} else {
			ok = has && t >= cut && t >= s.from && t+req.Width <= s.front
		}
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
		resp.Known = append(resp.Known, hi)
	}
	switch {
	case len(ws) == 0:
	case req.Digests:
		resp.Digests = agg.AppendDigestsWire(nil, ws)
	default:
		resp.Packed = agg.AppendWindowsWire(nil, typ, ws)
	}
	return resp, nil
}

// adopt starts keeping a series a coordinator asked for, below MaxSeries.
func (r *Homes) adopt(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.series[key] != nil || len(r.series) >= r.cfg.MaxSeries {
		return
	}
	s := newHomeSeries()
	r.qmu.Lock()
	s.notBefore = r.quiet[key]
	delete(r.quiet, key)
	r.qmu.Unlock()
	if err := r.st.UpdateRollups(store.RollupUpdate{Key: key, Drop: true, Head: s.head(r.print)}); err != nil {
		r.log.Warn("rollups: cannot store a new series", "series", key, "err", err)
		return
	}
	r.series[key] = s
	r.seq++
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Mark applies a coordinator's RollupMarkReq; the marks are in the store when it
// returns nil. A mark of a series the home holds nothing of costs a shared lock and
// a map entry: every later pull starts after it, and none within the quiet period
// the answer promises (RollupMarkResp.Quiet).
func (r *Homes) Mark(req *wire.RollupMarkReq) (*wire.RollupMarkResp, error) {
	if len(req.Starts) > wire.MaxRollupMarks {
		return nil, rpc.Errorf(wire.CodeBadInput, "rollup mark of %q: %d windows, at most %d: send a range", req.Key, len(req.Starts), wire.MaxRollupMarks)
	}
	r.mu.RLock()
	s := r.series[req.Key]
	if s == nil {
		resp := &wire.RollupMarkResp{Quiet: r.promiseQuiet(req.Key)}
		r.mu.RUnlock()
		return resp, nil
	}
	marked := r.markedSincePull(s, req)
	r.mu.RUnlock()
	if marked {
		return &wire.RollupMarkResp{}, nil
	}
	return &wire.RollupMarkResp{}, r.markHeld(req)
}

// markedSincePull reports whether req (windows, no range) changes nothing: each of its
// windows is dirty by a mark no pull of s has started after, so the next pull that
// could settle it starts after req too. r.mu held shared.
func (r *Homes) markedSincePull(s *homeSeries, req *wire.RollupMarkReq) bool {
	if req.Reset || req.From < req.To || len(req.Starts) == 0 {
		return false
	}
	w0 := r.widths[0]
	for _, t := range req.Starts {
		if s.dirty[agg.WindowStart(t, w0)] <= s.pullSeq {
			return false
		}
	}
	return true
}

// promiseQuiet records that no pull of key, which this home does not hold, starts
// within QuietPeriod, and returns the period promised: 0 when MaxSeries promises are
// running already. r.mu held shared.
func (r *Homes) promiseQuiet(key string) int64 {
	now := time.Now()
	r.qmu.Lock()
	defer r.qmu.Unlock()
	if _, ok := r.quiet[key]; !ok && len(r.quiet) >= r.cfg.MaxSeries {
		for k, until := range r.quiet {
			if !now.Before(until) {
				delete(r.quiet, k)
			}
		}
		if len(r.quiet) >= r.cfg.MaxSeries {
			return 0
		}
	}
	r.quiet[key] = now.Add(QuietPeriod)
	return int64(QuietPeriod)
}

// markHeld applies a mark of a series this home holds (or held a moment ago).
func (r *Homes) markHeld(req *wire.RollupMarkReq) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	s := r.series[req.Key]
	if s == nil {
		// Dropped since Mark looked: every later pull starts after this mark, and
		// no promise was made.
		return nil
	}
	if req.Reset {
		return r.forget(req.Key)
	}
	w0 := r.widths[0]
	u := store.RollupUpdate{Key: req.Key}
	for _, t := range req.Starts {
		w := agg.WindowStart(t, w0)
		if s.dirty[w] == 0 {
			u.Put = append(u.Put, store.RollupRecord{Level: markLevel, Start: w, Value: []byte{markDirty}})
			u.Delete = r.coarseSpans(u.Delete, w)
		}
		s.dirty[w] = r.seq
	}
	if req.From < req.To {
		lo := agg.WindowStart(req.From, w0)
		if !s.started || lo <= s.from {
			return r.forget(req.Key) // start over: the whole series is pulled again
		}
		r.rewind(s, lo, &u)
	}
	if n := len(s.dirty) + len(s.unsettled); n > r.cfg.MaxMarks {
		// Over the limit: pull everything from the oldest mark again instead.
		lo := int64(math.MaxInt64)
		for w := range s.dirty {
			lo = min(lo, w)
		}
		for w := range s.unsettled {
			lo = min(lo, w)
		}
		r.rewind(s, max(lo, s.from), &u)
	}
	if err := r.st.UpdateRollups(u); err != nil {
		return rpc.Errorf(wire.CodeUnavailable, "rollup mark of %q: the home's store: %v", req.Key, err)
	}
	return nil
}

// forget drops everything held of key (a later read starts it again). r.mu held.
func (r *Homes) forget(key string) error {
	if err := r.st.UpdateRollups(store.RollupUpdate{Key: key, Drop: true}); err != nil {
		// Vouch for nothing meanwhile, and keep the series so that a retry drops it.
		r.series[key] = newHomeSeries()
		return rpc.Errorf(wire.CodeUnavailable, "rollups of %q: the home's store: %v", key, err)
	}
	delete(r.series, key)
	return nil
}

// rewind makes the home pull everything from finest window lo on again: the records
// from there are deleted in u, pulls under way are discarded. r.mu held.
func (r *Homes) rewind(s *homeSeries, lo int64, u *store.RollupUpdate) {
	s.front = max(s.from, min(s.front, lo))
	lo = s.front
	for w := range s.dirty {
		if w >= lo {
			delete(s.dirty, w)
		}
	}
	for w := range s.unsettled {
		if w >= lo {
			delete(s.unsettled, w)
		}
	}
	u.Delete = append(u.Delete, store.RollupSpan{Level: markLevel, From: lo, To: math.MaxInt64})
	for i, w := range r.widths {
		u.Delete = append(u.Delete, store.RollupSpan{Level: uint8(i), From: agg.WindowStart(lo, w), To: math.MaxInt64})
	}
	u.Head = s.head(r.print)
	s.resetSeq = r.seq
}

// Start starts the pull loop: a pass every PullInterval, and when a read started a
// new series, until Close.
func (r *Homes) Start() {
	r.started.Store(true)
	go r.run()
}

// run is the pull loop.
func (r *Homes) run() {
	defer close(r.done)
	// What this home promised before a restart (QuietPeriod) ends by then.
	select {
	case <-r.stop:
		return
	case <-time.After(QuietPeriod):
	}
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
		if err := r.Pass(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("rollup pull failed", "err", err)
		}
		cancel()
	}
}

// Close stops the pull loop (a pass under way is cancelled) and returns once it
// stopped. Homes never started return at once.
func (r *Homes) Close() {
	if !r.started.Load() {
		return
	}
	close(r.stop)
	<-r.done
}

// Done is closed once the pull loop stopped.
func (r *Homes) Done() <-chan struct{} { return r.done }

// Pass pulls, for every series held, what changed: until each series is caught up to
// the horizon, has had maxRoundsPerPass rounds, or failed. It drops the series this
// node stopped being a home of (at two passes in a row) and the windows past their
// level's retention. The pull loop runs one every PullInterval; tests and benchmarks
// run their own.
func (r *Homes) Pass(ctx context.Context) error {
	r.pulling.Lock()
	defer r.pulling.Unlock()
	r.mu.RLock()
	keys := make([]string, 0, len(r.series))
	for k := range r.series {
		keys = append(keys, k)
	}
	r.mu.RUnlock()
	var errs []error
	for _, k := range keys {
		if home, err := r.stillHome(ctx, k); err != nil || !home {
			errs = append(errs, err)
			continue
		}
		r.sweep(k)
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
		netyield.Yield() // a node's writers' requests go first (internal/netyield)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return errors.Join(errs...)
}

// QuietUntil returns when the last quiet period this home promised for a series it
// now holds ends: a Pass before then leaves that series for a later pass (tests and
// benchmarks that want every series pulled wait for it: tsdb.Node.RollupNow).
func (r *Homes) QuietUntil() time.Time {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var t time.Time
	for _, s := range r.series {
		if s.notBefore.After(t) {
			t = s.notBefore
		}
	}
	return t
}

// stillHome reports whether this node is one of key's homes; a series it has not been
// a home of at two passes in a row is dropped.
func (r *Homes) stillHome(ctx context.Context, key string) (bool, error) {
	if r.self == "" || r.src == nil {
		return true, nil
	}
	homes, err := r.src.Homes(ctx, key)
	if err != nil {
		return false, err
	}
	home := slices.ContainsFunc(homes, func(p dht.Peer) bool { return p.ID == r.self })
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.series[key]
	if s == nil {
		return false, nil
	}
	if home {
		s.away = 0
		return true, nil
	}
	if s.away++; s.away >= 2 {
		r.dropped.Add(1)
		r.log.Info("rollups: no longer a home of the series; dropping what this node kept of it", "series", key)
		return false, r.forget(key)
	}
	return false, nil
}

// sweepEvery is how often a home deletes, per series, the windows past their level's
// retention (reads stop using them at once; the sweep frees the disk).
const sweepEvery = 10 * time.Minute

func (r *Homes) sweep(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.series[key]
	if s == nil || r.now().Sub(s.swept) < sweepEvery {
		return
	}
	s.swept = r.now()
	u := store.RollupUpdate{Key: key}
	for i := range r.widths {
		if cut := r.cutoff(i); cut != math.MinInt64 {
			u.Delete = append(u.Delete, store.RollupSpan{Level: uint8(i), From: math.MinInt64, To: cut})
		}
	}
	if len(u.Delete) > 0 {
		if err := r.st.UpdateRollups(u); err != nil {
			r.log.Warn("rollups: retention sweep failed", "series", key, "err", err)
		}
	}
}

// maxJumpTop bounds, in windows of the coarsest level, how far one round moves a front
// over windows the series' bounds show empty (a round recomputes the coarser windows
// it passes).
const maxJumpTop = 32

// pullSeries runs one pull round of a series: its dirty and unsettled windows, then
// the windows past its front up to the horizon, at most maxPullQuanta quanta. Windows
// before or past the series' catalog bounds are not pulled: they are empty (a point
// written there later widens the bounds first, and is a late write that marks its
// window, or lies beyond the horizon the round stops at). more says there is more to
// pull.
func (r *Homes) pullSeries(ctx context.Context, key string) (more bool, err error) {
	qn := r.quantum.Duration().Nanoseconds()
	w0 := r.widths[0]
	top := r.widths[len(r.widths)-1]
	horizon := agg.WindowStart(r.now().Add(-r.cfg.Horizon).UnixNano(), w0)
	r.mu.RLock()
	s := r.series[key]
	if s == nil || time.Now().Before(s.notBefore) {
		r.mu.RUnlock()
		return false, nil // not held, or inside a quiet period it promised
	}
	started := s.started
	needFront := !started || s.front+w0 <= horizon
	r.mu.RUnlock()
	// The series' bounds, read at quorum before the round: windows before First and
	// past Last are empty.
	emptyBefore, emptyFrom := int64(math.MinInt64), int64(math.MaxInt64)
	if needFront {
		e, err := r.src.Entry(ctx, key)
		if err != nil {
			var re *rpc.RemoteError
			if errors.As(err, &re) && re.Code == wire.CodeUnknownSeries {
				return false, nil
			}
			return false, err
		}
		if !e.HasBounds {
			return false, nil
		}
		if e.Last < math.MaxInt64-w0 {
			emptyFrom = agg.WindowStart(e.Last, w0) + w0
		}
		emptyBefore = agg.WindowStart(e.First, w0)
		if !started {
			r.mu.Lock()
			if r.series[key] == s && !s.started {
				s.started, s.typ = true, e.Type
				s.from = agg.WindowStart(e.First, top)
				s.front = s.from
			}
			r.mu.Unlock()
		}
	}
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
	var end int64
	if hi < emptyBefore && hi+w0 <= horizon {
		// Before the bounds (the front starts at the coarsest window holding the first
		// point): empty up to the first point, without asking anyone, as past them.
		end = min(emptyBefore, horizon, agg.WindowStart(hi, top)+maxJumpTop*top)
	} else {
		for hi+w0 <= horizon && hi < emptyFrom && int64(len(wins)) < budget {
			wins = append(wins, hi)
			hi += w0
		}
		// Past the bounds: empty up to the horizon, without asking anyone.
		end = hi
		if hi >= emptyFrom && hi+w0 <= horizon {
			end = min(horizon, agg.WindowStart(hi, top)+maxJumpTop*top)
		}
	}
	r.seq++
	pullSeq := r.seq
	s.pullSeq = pullSeq
	r.mu.Unlock()
	if len(wins) == 0 && end == front {
		return false, nil
	}
	var got []pulled
	if len(wins) > 0 {
		r.pulls.Add(1)
		r.pulled.Add(int64(len(wins)))
		if got, err = r.pullWindows(ctx, key, wins); err != nil {
			return false, err
		}
	}
	if f := r.afterPull.Load(); f != nil {
		(*f)()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.series[key] != s || pullSeq < s.resetSeq || s.front != front {
		return true, nil // reset or rewound meanwhile: pull again
	}
	u := store.RollupUpdate{Key: key}
	fresh := make(map[int64]agg.Partial, len(wins)) // finest windows settled now
	var fins []int64                                // finest windows changed now
	for i, w := range wins {
		if s.dirty[w] > pullSeq {
			continue // marked after this pull started
		}
		fins = append(fins, w)
		if _, was := s.unsettled[w]; was || s.dirty[w] != 0 {
			u.Delete = append(u.Delete, spanOne(markLevel, w))
		}
		delete(s.dirty, w)
		if !got[i].ok {
			s.unsettled[w] = struct{}{}
			u.Put = append(u.Put, store.RollupRecord{Level: markLevel, Start: w, Value: []byte{markUnsettled}})
			continue
		}
		delete(s.unsettled, w)
		fresh[w] = got[i].p
		if got[i].p.Count > 0 {
			s.typ = got[i].p.Type
			u.Put = append(u.Put, store.RollupRecord{Level: 0, Start: w, Value: windowValue(got[i].p)})
		} else {
			u.Delete = append(u.Delete, spanOne(0, w))
		}
	}
	s.front = end
	if err := r.recompute(key, s, fins, hi, end, fresh, &u); err != nil {
		return false, err
	}
	if len(u.Put) > 0 || len(u.Delete) > 0 {
		u.Head = s.head(r.print)
		if err := r.st.UpdateRollups(u); err != nil {
			return false, err
		}
	}
	return end+w0 <= horizon || len(s.dirty) > 0 && hasOlder(s.dirty, pullSeq, s.front), nil
}

// recompute puts into u, for every coarser level, the complete windows over the
// finest windows fins and the range [jlo, jhi) (a complete window: every finer window
// under it known), reading the finer windows from fresh (level 0, settled now), what
// the level below computed now, or the store. r.mu held.
func (r *Homes) recompute(key string, s *homeSeries, fins []int64, jlo, jhi int64, fresh map[int64]agg.Partial, u *store.RollupUpdate) error {
	below, prev := fresh, make(map[int64]bool, len(fins))
	for _, w := range fins {
		prev[w] = true
	}
	for i := 1; i < len(r.widths); i++ {
		w, fw := r.widths[i], r.widths[i-1]
		// set: the windows to compute, true where a window under them changed (its
		// record goes, complete or not). A window only passed by the front has no
		// record yet: it is written once complete, and an idle series writes nothing.
		set := make(map[int64]bool)
		for t := range prev {
			set[agg.WindowStart(t, w)] = true
		}
		if jlo < jhi {
			for t := agg.WindowStart(jlo, w); t < jhi; t += w {
				if _, ok := set[t]; !ok {
					set[t] = false
				}
			}
		}
		cutBelow := r.cutoff(0)
		next := make(map[int64]agg.Partial)
		for c, changed := range set {
			if changed {
				u.Delete = append(u.Delete, spanOne(uint8(i), c))
			}
			if c < s.from || c+w > s.front {
				continue // not complete yet
			}
			stored := make(map[int64]agg.Partial, w/fw)
			var derr error
			if err := r.st.RollupRecords(key, uint8(i-1), c, c+w, func(st int64, v []byte) bool {
				p, err := decodeWindow(v)
				if err != nil {
					derr = err
					return false
				}
				stored[st] = p
				return true
			}); err != nil || derr != nil {
				return errors.Join(err, derr)
			}
			var out agg.Partial
			ok := true
			for t := c; t < c+w && ok; t += fw {
				p, has := below[t]
				switch {
				case has:
				case i == 1 && jlo <= t && t < jhi:
					ok = r.known0(s, t, math.MinInt64) // passed now: empty
				case i == 1 && t >= cutBelow:
					ok = r.known0(s, t, cutBelow)
					p = stored[t] // no record: empty
				case i == 1:
					// Past the finest level's retention a missing record may have
					// been swept: only a record still there counts.
					p, has = stored[t]
					ok = has && r.known0(s, t, math.MinInt64)
				case prev[t]:
					ok = false // changed now and not complete: its record goes
				default:
					p, has = stored[t] // every complete window has a record
					ok = has
				}
				if ok && p.Count > 0 {
					h := out.Hash + p.Hash
					out = agg.Merge(out, p)
					out.Hash = h
				}
			}
			if ok {
				next[c] = out
				u.Put = append(u.Put, store.RollupRecord{Level: uint8(i), Start: c, Value: windowValue(out)})
			}
		}
		changedHere := make(map[int64]bool)
		for c, changed := range set {
			if changed {
				changedHere[c] = true
			}
		}
		below, prev = next, changedHere
	}
	return nil
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
func (r *Homes) pullWindows(ctx context.Context, key string, wins []int64) ([]pulled, error) {
	q := r.quantum
	qn := q.Duration().Nanoseconds()
	w0 := r.widths[0]
	var starts []int64
	for _, w := range wins {
		for t := w; t < w+w0; t += qn {
			starts = append(starts, q.Start(t))
		}
	}
	answers, err := r.src.QuantumStats(ctx, key, starts)
	if err != nil {
		return nil, err
	}
	if len(answers) != len(starts) {
		return nil, errors.New("rollup pull: the source answered for other quanta than asked")
	}
	out := make([]pulled, len(wins))
	per := int(w0 / qn)
	for i := range wins {
		o := pulled{ok: true}
		for k := i * per; k < (i+1)*per; k++ {
			p, ok := settleQuantum(answers[k], r.rq)
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
func settleQuantum(ans []Answer, rq int) (agg.Partial, bool) {
	answered := 0
	var digest uint64
	var data *Answer
	first := true
	for k := range ans {
		a := &ans[k]
		if !a.OK {
			continue
		}
		answered++
		d := uint64(0)
		held := a.Res.Held && a.Res.Count > 0
		if held {
			d = a.Res.Hash
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
	if len(data.Res.Windows) != 1 || data.Res.Windows[0].Count != data.Res.Count {
		return agg.Partial{}, false
	}
	p := data.Res.Windows[0].Partial
	p.Hash = digest
	return p, true
}
