package uplink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/coord"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Cluster is what an uplink reads and writes of the cluster: a node's coordinator.
type Cluster interface {
	Series(ctx context.Context, q catalog.Query) ([]catalog.Entry, error)
	Get(ctx context.Context, key string, from, to int64, opt wire.GetOptions) (wire.Result, error)
	GetMany(ctx context.Context, items []coord.SeriesRange, opt wire.GetOptions) ([]coord.ManyResult, error)
	Aggregate(ctx context.Context, key string, from, to, every int64, opt wire.GetOptions) (wire.AggResult, error)
	Latest(ctx context.Context, key string, since, before int64) (series.Points, error)
	PutMany(ctx context.Context, puts []coord.SeriesPut, opt wire.PutOptions) []coord.SeriesResult
	// Homes returns a series' registry replicas, closest to KeyID(key) first.
	Homes(ctx context.Context, key string) ([]dht.Peer, error)
}

// Own reads a series from this node's own replica, asking no other node: a node's
// coordinator (coord.Coordinator.GetOwn). ok false says this node does not hold every
// shard of the range; the uplink then reads through Cluster. What it answers may lack
// points written at their quorum without this replica: the late check, which counts
// through Cluster, finds them (docs/uplink.md).
type Own interface {
	GetOwn(ctx context.Context, key string, from, to int64) (wire.Result, bool, error)
}

// Membership says who this node is and who is alive: a node's DHT.
type Membership interface {
	Self() dht.Peer
	Live() []dht.Peer
}

const (
	listEvery    = 10 * time.Second        // how often the selection is listed again
	lagEvery     = 5 * time.Second         // how often the points behind are counted
	lateWidthRaw = int64(90 * time.Second) // no rollup level divides it: the late check does not make the homes keep the series
	maxNamed     = 8                       // series named in UplinkStats.Forwarding
	// MaxSettle bounds how far behind now a forwarder stays once late points raised its
	// settle time (Config.Settle is where it starts).
	MaxSettle = 30 * time.Second
	// tapVerifyEvery is how often a series forwarded from its tap is read from the store
	// and compared with the tap; tapPause how long a series whose tap differed from the
	// store is read from the store before it is tapped again (docs/uplink.md).
	tapVerifyEvery = time.Minute
	tapPause       = 10 * time.Minute
	// tapLateEvery: a series forwarded from its tap has its late check every
	// tapLateEvery LateEvery only, or at the next LateEvery when its tap saw a late point.
	tapLateEvery = 4
)

// Uplink forwards one selection of series to one target.
type Uplink struct {
	cfg    Config
	target Target
	id     string
	cl     Cluster
	own    Own // nil: every read through cl
	mem    Membership
	log    *slog.Logger
	sink   sink
	taps   *taps // raw uplinks: the points handed over on the write path (Stored)

	entries []catalog.Entry
	homes   map[string][]string // registry replicas (node IDs) per series, found when listed
	listed  time.Time
	settle  time.Duration // how far behind now the forwarder stays: Config.Settle, raised by late points
	states  map[string]*state
	backoff time.Duration
	nextTry time.Time
	lagAt   time.Time

	mu    sync.Mutex // guards stats
	stats wire.UplinkStats

	stop chan struct{}
	done chan struct{}
}

// state is what the forwarder holds of one series it forwards.
type state struct {
	e       catalog.Entry
	cursor  int64 // forwarded and acknowledged up to here (exclusive), ns
	saved   int64 // the cursor the DHT holds
	savedAt time.Time
	dirty   bool            // cursor or fwd changed since the last save
	span    int64           // raw: the span of the next read
	lastN   int             // raw: the points the last read found (sent or not)
	fwd     map[int64]int64 // window start → points forwarded (late check)
	lateAt  time.Time
	// raw: when a read of the store last agreed with the series' tap (zero: the next
	// read comes from the store), and when the series may be tapped again.
	verified, tapAfter time.Time
}

// New returns an uplink over the cluster; Run forwards. own, when not nil, reads the
// raw points of the series whose shards this node holds (a node's coordinator).
func New(cfg Config, cl Cluster, own Own, mem Membership, log *slog.Logger) (*Uplink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	t, _ := ParseURL(cfg.URL)
	s, err := newSink(t, cfg)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	u := &Uplink{cfg: cfg, target: t, id: cfg.ID(), cl: cl, own: own, mem: mem, sink: s, states: map[string]*state{},
		settle: cfg.Settle, stop: make(chan struct{}), done: make(chan struct{})}
	if cfg.Every == 0 {
		u.taps = newTaps(MaxTapBytes)
	}
	u.log = log.With("uplink", t.Name)
	u.stats = wire.UplinkStats{ID: u.id, URL: t.Name, Every: int64(cfg.Every)}
	return u, nil
}

// Stats returns the uplink's state and counters.
func (u *Uplink) Stats() wire.UplinkStats {
	u.mu.Lock()
	defer u.mu.Unlock()
	s := u.stats
	s.Forwarding = slices.Clone(s.Forwarding)
	return s
}

func (u *Uplink) update(f func(s *wire.UplinkStats)) {
	u.mu.Lock()
	f(&u.stats)
	u.mu.Unlock()
}

// Run forwards until Close: a pass every Interval, at once again while a backlog
// remains.
func (u *Uplink) Run() {
	defer close(u.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-u.stop:
			cancel()
		case <-u.done:
		}
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-u.stop:
			u.saveAll(context.Background())
			return
		case <-t.C:
		}
		wait := u.nextLook(time.Now())
		if u.pass(ctx) {
			wait = 0
		}
		if d := time.Until(u.nextTry); d > wait {
			wait = d
		}
		t.Reset(wait)
	}
}

// lookPast is how far past a multiple of Interval the horizon is at a regular look.
const lookPast = 500 * time.Millisecond

// nextLook is how long until the next regular look: when the horizon (now less the
// settle time) has just passed a multiple of Interval. A quantum that divides the
// interval (the cluster's 10 s by default) has then just ended behind the horizon,
// and each read takes whole quanta but for the first lookPast of the open one: a
// read decodes its open quantum's blocks whole, so a look at any other moment would
// decode most of that quantum twice.
func (u *Uplink) nextLook(now time.Time) time.Duration {
	iv, off := int64(u.cfg.Interval), int64(u.settle+lookPast)
	t := now.UnixNano() - off
	next := t - t%iv + iv + off
	return time.Duration(next - now.UnixNano())
}

// Stored is the node's write hook (tsdb.Node.SetStoredTap, coord.Coordinator.OnStored):
// what one write through this node's coordinator stored. A raw uplink keeps a copy of
// the points of the series it has tapped; it must not block.
func (u *Uplink) Stored(puts []coord.SeriesPut, res []coord.SeriesResult) {
	if u.taps != nil {
		u.taps.stored(puts, res)
	}
}

// Close stops the uplink, saving the cursors it advanced since their last save.
func (u *Uplink) Close() error {
	close(u.stop)
	<-u.done
	if u.taps != nil {
		u.taps.dropAll() // the write hook holds nothing more
	}
	return u.sink.close()
}

// forwarder reports whether this node forwards the series: it is the first live
// registry replica. The replicas are looked up when the selection is listed (every
// listEvery), liveness at every pass: a death hands a series over at the next pass.
func (u *Uplink) forwarder(ctx context.Context, key string, live map[string]bool) bool {
	homes, ok := u.homes[key]
	if !ok {
		peers, err := u.cl.Homes(ctx, key)
		if err != nil {
			return false
		}
		homes = make([]string, len(peers))
		for i, h := range peers {
			homes[i] = h.ID
		}
		u.homes[key] = homes
	}
	for _, id := range homes {
		if live[id] {
			return id == u.mem.Self().ID
		}
	}
	return false
}

// owned lists the selection (again, every listEvery) and returns the series this node
// forwards, dropping (after saving) the state of those it no longer does.
func (u *Uplink) owned(ctx context.Context, now time.Time) []*state {
	if now.Sub(u.listed) >= listEvery || u.entries == nil {
		es, err := u.cl.Series(ctx, u.cfg.Select)
		if err != nil {
			u.fail(fmt.Errorf("listing the series: %w", err))
		} else {
			u.entries, u.listed, u.homes = es[:0], now, map[string][]string{}
			for _, e := range es {
				if e.Live() && !isCursorKey(e.Key) {
					u.entries = append(u.entries, e)
				}
			}
		}
	}
	live := map[string]bool{}
	for _, p := range u.mem.Live() {
		live[p.ID] = true
	}
	var out []*state
	keep := map[string]bool{}
	for _, e := range u.entries {
		if !u.forwarder(ctx, e.Key, live) {
			continue
		}
		keep[e.Key] = true
		st := u.states[e.Key]
		if st == nil {
			st = &state{cursor: math.MinInt64}
			u.states[e.Key] = st
		}
		st.e = e
		out = append(out, st)
	}
	var gone []*state
	for k, st := range u.states {
		if !keep[k] {
			gone = append(gone, st)
			delete(u.states, k)
			u.dropTap(st)
		}
	}
	u.save(ctx, gone, true)
	names := make([]string, 0, maxNamed)
	for _, st := range out[:min(len(out), maxNamed)] {
		names = append(names, st.e.Key)
	}
	u.update(func(s *wire.UplinkStats) { s.Series, s.Forwarding = len(out), names })
	return out
}

func isCursorKey(k string) bool {
	return len(k) >= len(CursorPrefix) && k[:len(CursorPrefix)] == CursorPrefix
}

// every is the uplink's window width in ns (0: raw); lateWidth the width of the
// windows the late check counts.
func (u *Uplink) every() int64 { return int64(u.cfg.Every) }
func (u *Uplink) lateWidth() int64 {
	if u.every() > 0 {
		return u.every()
	}
	return lateWidthRaw
}

// edge is how far a series can be forwarded now: horizon for raw points, the start
// of the window holding it otherwise.
func (u *Uplink) edge(horizon int64) int64 {
	if d := u.every(); d > 0 {
		return agg.WindowStart(horizon, d)
	}
	return horizon
}

// load reads a series' cursor record from the DHT and seeds the late check; without a
// record the series is forwarded from its first point. It fails when the record cannot
// be read: the series then waits, since starting over would send it all again.
func (u *Uplink) load(ctx context.Context, st *state, now time.Time) error {
	if st.cursor != math.MinInt64 {
		return nil
	}
	pts, err := u.cl.Latest(ctx, CursorKey(u.id, st.e.Key), 0, now.Add(time.Minute).UnixNano())
	var re *rpc.RemoteError
	rec := cursorRecord{Counts: map[int64]int64{}}
	switch {
	case err == nil && pts.Len() > 0 && pts.Type == series.String:
		if rec, err = decodeCursor(pts.S[len(pts.S)-1]); err != nil {
			return fmt.Errorf("the cursor of %q: %w", st.e.Key, err)
		}
	case err == nil || errors.As(err, &re) && re.Code == wire.CodeUnknownSeries:
		if !st.e.HasBounds {
			return nil // nothing written yet: looked for again next pass
		}
		rec.Cursor = st.e.First
		if d := u.every(); d > 0 {
			rec.Cursor = agg.WindowStart(rec.Cursor, d)
		}
		// The late check's windows of [From, Cursor) start at none forwarded: a point
		// written into the time firstWritten skipped is sent as a late one.
		rec.From = rec.Cursor
		if u.every() == 0 {
			rec.Cursor = u.firstWritten(ctx, st.e.Key, rec.Cursor, now.Add(-u.settle).UnixNano())
		}
	default:
		return fmt.Errorf("reading the cursor of %q: %w", st.e.Key, err)
	}
	// Windows older than the record's are taken as forwarded: only later changes to
	// them count as late.
	w := u.lateWidth()
	lo := agg.WindowStart(rec.Cursor-int64(u.cfg.LateWindow), w)
	if hi := min(agg.WindowStart(rec.From, w), agg.WindowStart(rec.Cursor, w)); lo < hi {
		res, err := u.cl.Aggregate(ctx, st.e.Key, lo, hi, w, wire.GetOptions{})
		if err != nil {
			return fmt.Errorf("counting the recent points of %q: %w", st.e.Key, err)
		}
		for _, win := range res.Windows {
			rec.Counts[win.Start] = win.Count
		}
	}
	st.cursor, st.saved, st.fwd = rec.Cursor, rec.Cursor, rec.Counts
	st.savedAt, st.lateAt = now, now
	st.span = int64(u.cfg.Interval) * 4
	u.log.Info("forwarding a series", "series", st.e.Key, "from", st.cursor)
	return nil
}

// save writes, in one request, the cursor records of the series of sts whose cursor
// changed and SaveEvery passed (or force): the series' saves fall due together, and
// each request costs the cluster a write (a sync on a --sync always node) whatever
// it carries.
func (u *Uplink) save(ctx context.Context, sts []*state, force bool) {
	now := time.Now()
	var puts []coord.SeriesPut
	var due []*state
	w := u.lateWidth()
	for _, st := range sts {
		if !st.dirty || st.cursor == math.MinInt64 || !force && now.Sub(st.savedAt) < u.cfg.SaveEvery {
			continue
		}
		rec := cursorRecord{Cursor: st.cursor, From: agg.WindowStart(st.cursor-int64(u.cfg.LateWindow), w), Counts: st.fwd}
		var p series.Points
		p.AppendString(now.UnixNano(), rec.encode(w))
		puts = append(puts, coord.SeriesPut{Key: CursorKey(u.id, st.e.Key), Points: p})
		due = append(due, st)
	}
	if len(puts) == 0 {
		return
	}
	for i, r := range u.cl.PutMany(ctx, puts, wire.PutOptions{}) {
		if st := due[i]; r.Err != nil {
			u.log.Warn("saving a cursor failed; a takeover would send more again", "series", st.e.Key, "err", r.Err)
		} else {
			st.dirty, st.saved, st.savedAt = false, st.cursor, now
		}
	}
}

func (u *Uplink) saveAll(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	all := make([]*state, 0, len(u.states))
	for _, st := range u.states {
		all = append(all, st)
	}
	u.save(ctx, all, true)
}

// pending is what a batch will advance once the target acknowledges it.
type pending struct {
	st     *state
	to     int64           // the new cursor
	add    map[int64]int64 // late-check windows: points added
	set    map[int64]int64 // late-check windows: points now (forwarded again)
	points int
	// behind says collect stopped short of what it could forward now (the batch was
	// full, or a read's span ended first): the next pass follows at once. Stopping at
	// the multiple of the interval the horizon has just passed is not behind: the rest
	// waits for the next regular look.
	behind bool
}

// pass forwards one batch and reports whether more is waiting. Windows forwarded
// again for late points go in a batch of their own, so that a target that refuses
// them (Prometheus keeps the first value of a timestamp) refuses nothing else.
func (u *Uplink) pass(ctx context.Context) (more bool) {
	now := time.Now()
	if now.Before(u.nextTry) {
		return false
	}
	horizon := now.Add(-u.settle).UnixNano()
	edge := u.edge(horizon)
	var sts []*state
	for _, st := range u.owned(ctx, now) {
		if err := u.load(ctx, st, now); err != nil {
			u.fail(err)
			continue
		}
		if st.cursor != math.MinInt64 {
			u.expire(ctx, st, now)
			sts = append(sts, st)
		}
	}
	u.sink.reset()
	var pends []pending
	room := MaxBatchPoints
	for _, st := range sts {
		if room <= 0 || !u.lateDue(st, now) {
			continue
		}
		p, err := u.late(ctx, st, room)
		if err != nil {
			u.fail(err)
			continue
		}
		st.lateAt = now
		if p != nil {
			pends = append(pends, *p)
			room -= p.points
		}
	}
	if len(pends) > 0 {
		return u.flush(ctx, pends, sts, edge, now)
	}
	var reads map[*state]rawRead
	readTo := 0 // sts[:readTo] are read
	for i, st := range sts {
		if room <= 0 || u.sink.size() >= MaxBatchBytes {
			more = true
			break
		}
		if u.every() == 0 && i >= readTo {
			readTo = readGroupEnd(sts, i, room)
			reads = u.readRaw(ctx, sts[i:readTo], edge)
		}
		p, err := u.collect(ctx, st, edge, room, reads[st])
		if err != nil {
			u.fail(err)
			continue
		}
		pends = append(pends, p)
		room -= p.points
		if p.behind {
			more = true
		}
	}
	return u.flush(ctx, pends, sts, edge, now) && more
}

// flush sends the batch, and once the target acknowledged (or refused it for good)
// advances what pends say; false after a failure that is retried.
func (u *Uplink) flush(ctx context.Context, pends []pending, sts []*state, edge int64, now time.Time) bool {
	n := 0
	for _, p := range pends {
		n += p.points
	}
	if n > 0 {
		sctx, cancel := context.WithTimeout(ctx, u.cfg.Timeout)
		sent, err := u.sink.send(sctx)
		cancel()
		var rej *rejectedError
		switch {
		case errors.As(err, &rej):
			u.log.Warn("the target refused a batch for good; its points are skipped", "points", n, "err", err)
			u.update(func(s *wire.UplinkStats) { s.Rejected += int64(n); s.LastError = err.Error() })
		case err != nil:
			u.retry(err)
			u.countLag(ctx, sts, edge, now, true)
			return false
		default:
			u.update(func(s *wire.UplinkStats) {
				s.SentPoints += int64(n)
				s.SentBytes += int64(sent)
				s.Batches++
				s.LastError = ""
			})
		}
	}
	u.backoff = 0
	for _, p := range pends {
		p.st.cursor = max(p.st.cursor, p.to)
		// A cursor that only passed empty time is not worth a write: a successor would
		// read that empty time again, and an idle node stays idle.
		p.st.dirty = p.st.dirty || p.points > 0 || len(p.set) > 0
		for w, c := range p.add {
			p.st.fwd[w] += c
		}
		for w, c := range p.set {
			p.st.fwd[w] = c
		}
	}
	u.save(ctx, sts, false)
	u.countLag(ctx, sts, edge, now, false)
	return true
}

// readGroup is how many series' raw reads one GetMany asks for: one request per node
// for the group instead of one per series, and at most that many reads held at once.
const readGroup = 16

// readGroupEnd returns where the group of raw reads that begins at sts[i] ends: at
// most readGroup series, and no more than the batch's room takes by what their last
// reads found. A series read but not sent is read again at the next pass, so a full
// batch should not read the series after it.
func readGroupEnd(sts []*state, i, room int) int {
	j, want := i, 0
	for j < len(sts) && j-i < readGroup && want < room {
		want += sts[j].lastN
		j++
	}
	return j
}

// rawRead is a series' next raw read: [from, to), and how far it could read now.
type rawRead struct {
	ok        bool // there is something to read
	to, limit int64
	res       wire.Result
	err       error
}

// rawRange is the range of a series' next raw read: up to the multiple of the interval
// the horizon has just passed (nextLook), whole quanta of a quantum that divides the
// interval, and not the first moments of the next one, which a read would decode with
// all its blocks (and again at the next look). A cursor at that multiple waits for the
// next look (ok false).
func (u *Uplink) rawRange(st *state, edge int64) (to, limit int64, ok bool) {
	limit = edge - edge%int64(u.cfg.Interval)
	if st.cursor >= limit {
		return 0, limit, false
	}
	return min(limit, st.cursor+max(st.span, int64(u.cfg.Interval))), limit, true
}

// readRaw reads the next raw range of each series of sts: from this node's own
// replica where it holds the range (Own), the others in one GetMany.
func (u *Uplink) readRaw(ctx context.Context, sts []*state, edge int64) map[*state]rawRead {
	out := make(map[*state]rawRead, len(sts))
	var items []coord.SeriesRange
	var who []*state
	for _, st := range sts {
		to, limit, ok := u.rawRange(st, edge)
		if !ok {
			continue
		}
		r := rawRead{ok: true, to: to, limit: limit}
		if pts, ok := u.fromTap(st, to); ok {
			r.res.Points = pts
			out[st] = r
			st.lastN = pts.Len()
			continue
		}
		if u.own != nil {
			// An error here is the cluster read's to report: it asks the other replicas.
			if res, held, err := u.own.GetOwn(ctx, st.e.Key, st.cursor, to); err == nil && held {
				r.res = res
				out[st] = r
				st.lastN = res.Points.Len()
				u.checkTap(st, &res.Points, to)
				continue
			}
		}
		items = append(items, coord.SeriesRange{Key: st.e.Key, From: st.cursor, To: to})
		who = append(who, st)
		out[st] = r
	}
	if len(items) == 0 {
		return out
	}
	res, err := u.cl.GetMany(ctx, items, wire.GetOptions{})
	for i, st := range who {
		r := out[st]
		if err != nil {
			r.err = err
		} else {
			r.res, r.err = res[i].Result, res[i].Err
			st.lastN = r.res.Points.Len()
			if r.err == nil {
				u.checkTap(st, &r.res.Points, r.to)
			}
		}
		out[st] = r
	}
	return out
}

// collect adds to the batch what follows a series' cursor, at most room points (or
// windows), and returns what the batch advances. A raw uplink's read is rd, from
// readRaw (the zero value: nothing to read).
func (u *Uplink) collect(ctx context.Context, st *state, edge int64, room int, rd rawRead) (pending, error) {
	p := pending{st: st, to: st.cursor, add: map[int64]int64{}}
	if st.cursor >= edge || room <= 0 {
		return p, nil
	}
	if d := u.every(); d > 0 {
		to := min(edge, st.cursor+MaxReadWindows*d)
		res, err := u.cl.Aggregate(ctx, st.e.Key, st.cursor, to, d, wire.GetOptions{})
		if err != nil {
			return p, fmt.Errorf("aggregating %q: %w", st.e.Key, err)
		}
		ws := res.Windows
		if len(ws) > room {
			ws, to = ws[:room], ws[room].Start
		}
		if len(ws) > 0 {
			u.sink.windows(&st.e, ws)
		}
		for _, w := range ws {
			p.add[w.Start] = w.Count
		}
		p.to, p.points, p.behind = to, len(ws), to < edge
		return p, nil
	}
	if !rd.ok {
		return p, nil
	}
	to, limit := rd.to, rd.limit
	if rd.err != nil {
		st.span = max(st.span/2, int64(u.cfg.Interval))
		return p, fmt.Errorf("reading %q: %w", st.e.Key, rd.err)
	}
	pts := rd.res.Points
	// The next read's span: longer after a read that found few points (a sparse or
	// idle series), shorter after one that filled the batch.
	switch n := pts.Len(); {
	case n > MaxBatchPoints/4:
		st.span = max(st.span/2, int64(u.cfg.Interval))
	case n < MaxBatchPoints/16:
		st.span = min(st.span*2, int64(MaxReadSpan))
	}
	if pts.Len() > room {
		to = pts.T[room]
		pts = slicePoints(pts, room)
	}
	if pts.Len() > 0 {
		u.sink.points(&st.e, &pts)
	}
	countWindows(p.add, pts.T, u.lateWidth())
	p.to, p.points, p.behind = to, pts.Len(), to < limit
	if !p.behind {
		u.armTap(st)
	}
	return p, nil
}

// countWindows adds to counts the points of ts (ascending) per window of width w:
// one map update per window, not per point.
func countWindows(counts map[int64]int64, ts []int64, w int64) {
	for i := 0; i < len(ts); {
		start := agg.WindowStart(ts[i], w)
		j := i + sort.Search(len(ts)-i, func(k int) bool { return ts[i+k] >= start+w })
		counts[start] += int64(j - i)
		i = j
	}
}

// slicePoints returns the first n points.
func slicePoints(p series.Points, n int) series.Points {
	p.T = p.T[:n]
	switch p.Type {
	case series.Float:
		p.F = p.F[:n]
	case series.Int:
		p.I = p.I[:n]
	case series.String:
		p.S = p.S[:n]
	}
	return p
}

// late compares the points per window of the last LateWindow before a series' cursor
// with what was forwarded, and adds to the batch the windows that changed (late
// points); nil when none did.
func (u *Uplink) late(ctx context.Context, st *state, room int) (*pending, error) {
	w := u.lateWidth()
	lo, hi := agg.WindowStart(st.cursor-int64(u.cfg.LateWindow), w), agg.WindowStart(st.cursor, w)
	for k := range st.fwd {
		if k < lo {
			delete(st.fwd, k)
		}
	}
	if lo >= hi {
		return nil, nil
	}
	res, err := u.cl.Aggregate(ctx, st.e.Key, lo, hi, w, wire.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("counting the recent points of %q: %w", st.e.Key, err)
	}
	var p *pending
	for _, win := range res.Windows {
		if st.fwd[win.Start] == win.Count {
			continue
		}
		if p == nil {
			p = &pending{st: st, to: st.cursor, set: map[int64]int64{}}
		}
		if p.points >= room {
			break // the rest at the next check
		}
		if u.every() > 0 {
			u.sink.windows(&st.e, []agg.Window{win})
			p.points++
		} else {
			r, err := u.cl.Get(ctx, st.e.Key, win.Start, win.Start+w, wire.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("reading %q: %w", st.e.Key, err)
			}
			u.sink.points(&st.e, &r.Points)
			p.points += r.Points.Len()
		}
		p.set[win.Start] = win.Count
		st.verified = time.Time{} // a tap, if any, is compared with the store again
		u.update(func(s *wire.UplinkStats) { s.Late++ })
		if win.Start >= hi-2*w {
			u.raiseSettle(st.e.Key)
		}
	}
	return p, nil
}

// raiseSettle doubles how far behind now the forwarder stays (at most MaxSettle)
// after points arrived late just behind a cursor: a writer that sends its points in
// batches (a PMU gateway's second) delivers its oldest point later than Config.Settle,
// and each such point would cost its whole late-check window sent again.
func (u *Uplink) raiseSettle(key string) {
	if u.settle >= MaxSettle {
		return
	}
	u.settle = min(max(u.settle*2, time.Second), MaxSettle)
	u.log.Info("points arrived later than the forwarder waited; it waits longer now", "series", key, "settle", u.settle.String())
}

// countWidth is the width of the windows that count the points of a span in one
// aggregate: whole seconds, at most MaxReadWindows of them.
func countWidth(span int64) int64 {
	return span/MaxReadWindows/int64(time.Second)*int64(time.Second) + int64(time.Second)
}

// firstWritten returns where a raw series without a cursor begins to be forwarded:
// the start of the first window of [from, to) holding a point, as one aggregate counts
// them, instead of from, the series' first bound, which the catalog rounds out to the
// hour (an hour of reads of nothing). from when nothing is found or the count fails.
// A point written into the skipped time later is a late point.
func (u *Uplink) firstWritten(ctx context.Context, key string, from, to int64) int64 {
	if to-from <= MaxReadSpan.Nanoseconds() {
		return from // one read or two: not worth the count
	}
	res, err := u.cl.Aggregate(ctx, key, from, to, countWidth(to-from), wire.GetOptions{})
	if err != nil {
		return from
	}
	for _, w := range res.Windows {
		if w.Count > 0 {
			return max(from, w.Start)
		}
	}
	return from
}

// expire moves a cursor that retention overtook to the oldest time still kept, and
// counts what it skips as never forwarded.
func (u *Uplink) expire(ctx context.Context, st *state, now time.Time) {
	if u.cfg.Retention <= 0 {
		return
	}
	cut := now.Add(-u.cfg.Retention).Add(time.Minute).UnixNano()
	if d := u.every(); d > 0 {
		cut = agg.WindowStart(cut, d)
	}
	if st.cursor >= cut {
		return
	}
	width := max(int64(time.Hour), countWidth(cut-st.cursor))
	var n int64
	if res, err := u.cl.Aggregate(ctx, st.e.Key, st.cursor, cut, width, wire.GetOptions{AllowPartial: true}); err == nil {
		for _, w := range res.Windows {
			n += w.Count
		}
	}
	u.log.Warn("retention dropped points before they were forwarded", "series", st.e.Key, "from", st.cursor, "to", cut, "points", n)
	st.cursor = cut
	u.update(func(s *wire.UplinkStats) { s.NeverForwarded += n })
}

// countLag sets the lag: seconds always, points every lagEvery (or at once after a
// failure).
func (u *Uplink) countLag(ctx context.Context, sts []*state, edge int64, now time.Time, failed bool) {
	var lag int64
	for _, st := range sts {
		if st.cursor != math.MinInt64 {
			lag = max(lag, edge-st.cursor)
		}
	}
	if !failed && now.Sub(u.lagAt) < lagEvery {
		u.update(func(s *wire.UplinkStats) {
			s.LagSeconds = float64(lag) / 1e9
			if lag <= int64(u.cfg.Interval)*2 {
				s.LagPoints = 0
			}
		})
		return
	}
	u.lagAt = now
	var pts int64
	for _, st := range sts {
		if st.cursor == math.MinInt64 || edge-st.cursor <= int64(u.cfg.Interval)*2 {
			continue // caught up: what the next pass sends is not lag
		}
		width := countWidth(edge - st.cursor)
		if d := u.every(); d > 0 {
			width = d
		}
		res, err := u.cl.Aggregate(ctx, st.e.Key, st.cursor, edge, width, wire.GetOptions{AllowPartial: true})
		if err != nil {
			continue
		}
		for _, w := range res.Windows {
			if u.every() > 0 {
				pts++
			} else {
				pts += w.Count
			}
		}
	}
	u.update(func(s *wire.UplinkStats) { s.LagSeconds, s.LagPoints = float64(lag)/1e9, pts })
}

// retry backs off after a failed request: exponentially from MinBackoff to
// MaxBackoff, with jitter so that the nodes of a cluster do not retry in step.
func (u *Uplink) retry(err error) {
	u.backoff = min(max(u.backoff*2, u.cfg.MinBackoff), u.cfg.MaxBackoff)
	d := u.backoff/2 + rand.N(u.backoff/2+1)
	u.nextTry = time.Now().Add(d)
	u.log.Warn("uplink request failed; retrying", "in", d.String(), "err", err)
	u.update(func(s *wire.UplinkStats) { s.Retries++; s.LastError = err.Error() })
}

func (u *Uplink) fail(err error) {
	u.log.Warn("uplink", "err", err)
	u.update(func(s *wire.UplinkStats) { s.LastError = err.Error() })
}
