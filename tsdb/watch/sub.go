package watch

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// The seam between history and live. A subscription's series is registered with
// every live node first (Hub.Open); live points that arrive while its history is read
// wait in the series' pending list. History is read in windows, from the start to
// the furthest a write may be stamped; after each window the pending points it holds
// are dropped (they were delivered with it). Once history is done, what is pending is
// delivered as live points are: a point newer than the newest delivered goes out in
// order; an older one is a duplicate if it was among the last recentN delivered and is
// dropped, else it is late and goes out flagged.
//
// A notification can reach the hub after the history window that already held its
// points was read (it waited in a node's sender queue or on the wire while the window
// was read), and after more than recentN newer points: the ring alone would call it
// late and deliver it twice. So each series also keeps the timestamps its history
// windows delivered (its seam, the newest seamN, and at most seamTotal over a
// subscription's series) until seamHold after its history is done; a point found there
// is a duplicate.

// recentN is how many timestamps of each series a subscription remembers, to tell a
// duplicate from a late point.
const recentN = 256

// seamN bounds the history timestamps one series of a subscription keeps for the
// seam, seamTotal those of all its series; seamHold is how long they are kept after
// the series' history is done: longer than a notification may wait in a sender's
// queue and on the wire.
const (
	seamN     = 8192
	seamTotal = 1 << 17
	seamHold  = time.Minute
)

// historyReaders bounds the series of one subscription whose history is read at
// once: a selection of many series reaches live delivery for each sooner.
const historyReaders = 4

// A subscription to many series reads their histories in batches (Source.HistoryMany)
// of at most historyBatch series, urgent ones first, while at least two wait: its
// series reach live delivery after a few batched reads, not after a Bounds and a
// History of each, historyReaders at a time. A series the batch could not read (the
// source reads only short ranges together), or whose answer holds more than half the
// buffer, is read alone, in windows, as are all of a subscription's series once a
// batched read failed. historyBatch bounds what one reader holds: at most historyBatch × Buffer/2
// points.
const historyBatch = 64

// historySpan is the first window of a history read; windows double while their
// answers are small and halve while they are large.
const historySpan = int64(10 * time.Minute)

// sub is one subscription.
type sub struct {
	// What a poll reads of each subscription, together (one cache line).
	id        uint64
	ses       *session
	poll      uint64       // the last poll that took it (Hub.polled); guarded by h.mu
	one       *keyState    // the series of a subscription of one series (it may follow its log); set at Open
	over      atomic.Bool  // err is set (read without mu by a poll of its group)
	forgotten bool         // no longer in h.subs (Hub.forget); guarded by h.mu
	polledAt  atomic.Int64 // when it was last polled (ns)

	h       *Hub
	from    int64
	after   map[string]int64
	query   catalog.Query
	selects bool // re-selected by prefix or tags
	ctx     context.Context
	cancel  context.CancelFunc

	mu       sync.Mutex
	keys     map[string]*keyState
	runs     []wire.WatchRun // not yet acknowledged by the subscriber
	base     uint64          // runs acknowledged before runs[0]
	buffered int             // points in runs and pending lists
	seamHeld int             // timestamps held in the keys' seams
	err      error           // why it ended
	space    chan struct{}   // the subscriber acknowledged runs
	// The series whose history is still to read: urgent ones (live points wait for
	// them) before the rest, by at most historyReaders goroutines (readers).
	todo, urgent []string
	readers      int
	alone        bool // a batched read failed: every series is read alone
	opened       time.Time
	saidLive     bool // the log said the subscription is live (once)
}

// keyState is one series of a subscription.
type keyState struct {
	reading  bool            // its history is being read, or was
	ready    bool            // its history is delivered
	pending  []series.Points // live points that came while its history was read
	start    int64           // the first time delivered
	delivery                 // the newest time delivered (start-1 before any) and the last recentN
	// seam holds the timestamps the history windows delivered, ascending (the newest
	// seamN), until seamUntil; nil once dropped.
	seam      []int64
	seamUntil time.Time
	// The series' live log (livelog.go). A follower in a group (group.go): grp, its
	// Seen less the group's position (off; the three read by each poll, together), the
	// group's ring count when it joined (joinRn); exit, what it takes as its own once
	// it left. genFrom is where the subscription began to take the log's runs itself,
	// liveN how many it took since (sub.live); from is the next run of a follower;
	// behind, the points of the log a cut follower had not acknowledged; ownPts, the
	// points of the subscription's own runs while it follows. following, cut, from,
	// genFrom, behind, ownPts, grp, off, joinRn and exit are guarded by log.mu.
	log            *liveLog
	grp            *followGroup
	off            uint64
	joinRn         int
	exit           *groupExit
	following, cut bool
	from, genFrom  uint64
	liveN          uint64
	behind, ownPts uint64
}

func newSub(h *Hub, id uint64, req *wire.WatchOpenReq, q catalog.Query, selects bool, ses *session) *sub {
	ctx, cancel := context.WithCancel(context.Background())
	s := &sub{h: h, id: id, from: req.From, after: req.After, query: q, selects: selects, ctx: ctx, cancel: cancel, ses: ses,
		keys: map[string]*keyState{}, space: make(chan struct{}, 1), opened: time.Now()}
	s.polledAt.Store(time.Now().UnixNano())
	return s
}

// watches says whether the subscription watches key.
func (s *sub) watches(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.keys[key]
	return ok
}

// addKeys adds the keys not watched yet (up to wire.MaxWatchSeries) and returns them;
// h.mu held.
func (s *sub) addKeys(keys []string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var added []string
	for _, k := range keys {
		if _, ok := s.keys[k]; ok || len(s.keys) >= wire.MaxWatchSeries {
			continue
		}
		start := s.from
		if a, ok := s.after[k]; ok && a < math.MaxInt64 {
			start = max(start, a+1)
		}
		ks := &keyState{start: start}
		ks.last = start - 1
		s.keys[k] = ks
		if !s.selects {
			s.one = ks
		}
		lg := s.h.logs[k]
		if lg == nil {
			lg = newLiveLog()
			s.h.logs[k] = lg
		}
		lg.mu.Lock()
		lg.add(s, ks)
		lg.mu.Unlock()
		added = append(added, k)
	}
	if len(added) > 0 {
		s.h.push.changed()
	}
	return added
}

// readHistory reads, in the background, the history of keys and then lets their live
// points through. A series whose live points wait (sub.live) is read next; the rest
// in the order given.
func (s *sub) readHistory(keys []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.todo = append(s.todo, keys...)
	s.startReaders()
	s.sayLive() // a selection of no series: live at once
}

// startReaders starts readers of the histories to read, up to historyReaders; s.mu
// held.
func (s *sub) startReaders() {
	for s.readers < min(historyReaders, len(s.todo)+len(s.urgent)) {
		s.readers++
		go s.readHistories()
	}
}

// readHistories reads histories until none is left to read.
func (s *sub) readHistories() {
	for {
		if keys, kss := s.nextBatch(); len(keys) > 0 {
			if err := s.historyMany(keys, kss); err != nil {
				s.mu.Lock()
				s.readers--
				s.endLocked(fmt.Errorf("reading the history of %d series: %w", len(keys), err))
				s.mu.Unlock()
				return
			}
			continue
		}
		key, ks := s.nextHistory()
		if ks == nil {
			return
		}
		if err := s.history(key, ks); err != nil {
			s.mu.Lock()
			s.readers--
			s.endLocked(fmt.Errorf("reading the history of %q: %w", key, err))
			s.mu.Unlock()
			return
		}
	}
}

// nextHistory takes the next series whose history is to read: an urgent one first;
// nil when none is left, and the reader leaves.
func (s *sub) nextHistory() (string, *keyState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.err == nil && len(s.urgent)+len(s.todo) > 0 {
		q := &s.todo
		if len(s.urgent) > 0 {
			q = &s.urgent
		}
		k := (*q)[0]
		*q = (*q)[1:]
		if ks := s.keys[k]; ks != nil && !ks.reading {
			ks.reading = true
			return k, ks
		}
	}
	s.readers--
	s.sayLive()
	return "", nil
}

// sayLive logs, once, that the subscription is live — the history of every series it
// watched when it opened delivered, each point from then on sent as it is stored —
// when the last reader leaves with none left to read; s.mu held. Where a subscription
// opening slowly, or a benchmark (BenchmarkWatch), tells its opening from the rest.
func (s *sub) sayLive() {
	if s.readers > 0 || s.err != nil || s.saidLive {
		return
	}
	s.saidLive = true
	s.h.cfg.Log.Info("watch: subscription live", "id", s.id, "series", len(s.keys), "took", time.Since(s.opened))
}

// nextBatch takes up to historyBatch series whose history is to read, urgent ones
// first, when at least two are and batched reads work; none otherwise.
func (s *sub) nextBatch() (keys []string, kss []*keyState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.alone || s.err != nil || len(s.urgent)+len(s.todo) < 2 {
		return nil, nil
	}
	for _, q := range []*[]string{&s.urgent, &s.todo} {
		for len(*q) > 0 && len(keys) < historyBatch {
			k := (*q)[0]
			*q = (*q)[1:]
			if ks := s.keys[k]; ks != nil && !ks.reading {
				ks.reading = true
				keys, kss = append(keys, k), append(kss, ks)
			}
		}
	}
	return keys, kss
}

// historyMany delivers the history of keys, read together (Source.HistoryMany), and
// then the pending live points of each, as history does for one; a series the batch
// could not read whole is read alone. Should the batched read fail, keys go back to
// be read alone, and so does every series of the subscription from then on.
func (s *sub) historyMany(keys []string, kss []*keyState) error {
	// As history's: the furthest a write may be stamped, read after the series were
	// registered.
	end := time.Now().Add(s.h.cfg.MaxFuture).UnixNano() + 1
	most := s.h.cfg.Buffer / 2
	rs := make([]Range, len(keys))
	for i, k := range keys {
		rs[i] = Range{Key: k, From: kss[i].start, To: end}
	}
	res, err := s.h.cfg.Source.HistoryMany(s.ctx, rs, most)
	if err == nil && len(res) != len(rs) {
		err = fmt.Errorf("%d results for %d series", len(res), len(rs))
	}
	if err != nil {
		if s.ctx.Err() != nil {
			return s.ctx.Err()
		}
		s.h.cfg.Log.Warn("watch: a batched history read failed; reading each series alone", "series", len(rs), "err", err)
		s.requeue(keys, kss)
		return nil
	}
	var alone []int // indexes of keys read alone
	for i, r := range res {
		if r.Err != nil || r.Points.Len() > most {
			alone = append(alone, i)
			continue
		}
		if err := s.waitSpace(); err != nil {
			return err
		}
		s.mu.Lock()
		s.historyWindow(keys[i], kss[i], r.Points, rs[i].From, rs[i].To)
		s.historyDone(keys[i], kss[i])
		s.mu.Unlock()
		s.ses.signal()
		res[i] = RangeResult{} // delivered: not held while the others wait for space
	}
	for _, i := range alone {
		if err := s.history(keys[i], kss[i]); err != nil {
			return err
		}
	}
	return nil
}

// requeue puts keys, taken for a batched read that failed, back to be read alone
// (those whose live points wait first), and reads alone from then on.
func (s *sub) requeue(keys []string, kss []*keyState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.alone = true
	var urgent, todo []string
	for i, k := range keys {
		kss[i].reading = false
		if len(kss[i].pending) > 0 {
			urgent = append(urgent, k)
		} else {
			todo = append(todo, k)
		}
	}
	s.urgent = append(urgent, s.urgent...)
	s.todo = append(todo, s.todo...)
	s.startReaders()
}

// history delivers key's history and then its pending live points.
func (s *sub) history(key string, ks *keyState) error {
	// History ends where a write may be stamped, narrowed to the series' bounds: those
	// are read after the series was registered, so that any point past them is
	// delivered live.
	a, end := ks.start, time.Now().Add(s.h.cfg.MaxFuture).UnixNano()+1
	first, last, found, err := s.h.cfg.Source.Bounds(s.ctx, key, a, end)
	switch {
	case err != nil:
		return err
	case !found:
		end = a
	default:
		a, end = max(a, first), min(end, last+1)
	}
	span := historySpan
	for a < end {
		b := end
		if a < end-span {
			b = a + span
		}
		pts, err := s.h.cfg.Source.History(s.ctx, key, a, b)
		if err != nil {
			return err
		}
		if err := s.waitSpace(); err != nil {
			return err
		}
		s.mu.Lock()
		s.historyWindow(key, ks, pts, a, b)
		s.mu.Unlock()
		s.ses.signal()
		switch n := pts.Len(); {
		case n < s.h.cfg.Buffer/8 && span < int64(24*time.Hour):
			span *= 2
		case n > s.h.cfg.Buffer/2 && span > int64(time.Second):
			span /= 2
		}
		a = b
	}
	s.mu.Lock()
	s.historyDone(key, ks)
	s.mu.Unlock()
	s.ses.signal()
	return nil
}

// historyDone marks key's history delivered and delivers its pending live points;
// s.mu held.
func (s *sub) historyDone(key string, ks *keyState) {
	ks.ready = true
	ks.seamUntil = time.Now().Add(seamHold)
	pending := ks.pending
	ks.pending = nil
	for _, p := range pending {
		s.buffered -= p.Len()
		s.deliver(key, ks, p)
	}
}

// waitSpace waits while the subscriber has more than half the buffer to read.
func (s *sub) waitSpace() error {
	for {
		s.mu.Lock()
		full, err := s.buffered > s.h.cfg.Buffer/2, s.err
		s.mu.Unlock()
		if err != nil {
			return err
		}
		if !full {
			return nil
		}
		t := time.NewTimer(time.Second)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return s.ctx.Err()
		case <-s.space:
		case <-t.C:
		}
		t.Stop()
	}
}

// historyWindow delivers a window [a, b) of key's history and drops the pending
// points it holds; s.mu held.
func (s *sub) historyWindow(key string, ks *keyState, pts series.Points, a, b int64) {
	s.deliver(key, ks, pts)
	s.keepSeam(ks, pts.T)
	for i := range ks.pending {
		p := &ks.pending[i]
		var keep series.Points
		dropped := 0
		for j := 0; j < p.Len(); j++ {
			t := p.T[j]
			if t >= a && t < b {
				k := sort.Search(pts.Len(), func(k int) bool { return pts.T[k] >= t })
				if k < pts.Len() && pts.T[k] == t {
					dropped++
					continue
				}
			}
			keep.AppendFrom(p, j)
		}
		if dropped > 0 {
			s.buffered -= dropped
			keep.Type = p.Type
			*p = keep
		}
	}
}

// live takes a run of key's live log (Hub.deliver wakes the session).
func (s *sub) live(key string, pts series.Points) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ks := s.keys[key]
	if ks == nil {
		return
	}
	ks.liveN++
	if s.err != nil {
		return
	}
	if !ks.ready {
		if len(ks.pending) == 0 && !ks.reading {
			s.urgent = append(s.urgent, key)
		}
		ks.pending = append(ks.pending, pts)
		s.buffered += pts.Len()
		s.checkFull()
		return
	}
	s.deliver(key, ks, pts)
}

// deliver appends points of key to the runs: in order, duplicates dropped, late ones
// flagged; s.mu held. The caller wakes the session's poll (session.signal) once it
// has delivered what it has, so that one poll answers it all.
func (s *sub) deliver(key string, ks *keyState, pts series.Points) {
	if s.fresh(ks, &pts) {
		// Every point is newer than the last delivered, in order: the run shares the
		// points, which nobody changes once stored.
		ks.delivered(&pts)
		s.addRun(wire.WatchRun{Key: key, Points: pts})
		s.buffered += pts.Len()
		s.checkFull()
		return
	}
	var run series.Points
	late := false
	flush := func() {
		if run.Len() > 0 {
			run.Type = pts.Type
			s.addRun(wire.WatchRun{Key: key, Points: run, Late: late})
			s.buffered += run.Len()
			run = series.Points{}
		}
	}
	for i := 0; i < pts.Len(); i++ {
		t := pts.T[i]
		var isLate bool
		switch {
		case t < ks.start:
			continue
		case t > ks.last:
			ks.last = t
		case ks.seen(t), s.inSeam(ks, t):
			continue
		default:
			isLate = true
		}
		ks.remember(t)
		if isLate != late {
			flush()
			late = isLate
		}
		run.AppendFrom(&pts, i)
	}
	flush()
	s.checkFull()
}

// minRuns is the fewest runs a subscription's buffer grows to hold.
const minRuns = 16

// addRun appends r to the runs; s.mu held. The runs are trimmed from the front as the
// subscriber acknowledges them, which leaves no room at the back: growing to at least
// minRuns keeps a subscription that takes each run as it comes from allocating for
// every one.
func (s *sub) addRun(r wire.WatchRun) {
	if len(s.runs) == cap(s.runs) {
		grown := make([]wire.WatchRun, len(s.runs), max(minRuns, 2*len(s.runs)))
		copy(grown, s.runs)
		s.runs = grown
	}
	s.runs = append(s.runs, r)
}

// fresh reports whether every point of pts is newer than the last delivered, and
// they are in strictly ascending order.
func (s *sub) fresh(ks *keyState, pts *series.Points) bool {
	if pts.Len() == 0 || pts.T[0] <= ks.last || pts.T[0] < ks.start {
		return false
	}
	for i := 1; i < pts.Len(); i++ {
		if pts.T[i] <= pts.T[i-1] {
			return false
		}
	}
	return true
}

// keepSeam adds the timestamps of a history window, ascending and after every one
// the seam holds, to ks's seam; s.mu held.
func (s *sub) keepSeam(ks *keyState, ts []int64) {
	if len(ts) > seamN {
		ts = ts[len(ts)-seamN:]
	}
	if over := len(ks.seam) + len(ts) - seamN; over > 0 {
		// Drop the oldest: a copy, so that the array does not grow without end.
		ks.seam = append(make([]int64, 0, seamN), ks.seam[over:]...)
		s.seamHeld -= over
	}
	if s.seamHeld+len(ts) > seamTotal {
		return // the subscription's seams are full: its ring alone tells duplicates
	}
	ks.seam = append(ks.seam, ts...)
	s.seamHeld += len(ts)
}

// inSeam reports whether t was delivered by ks's history, while its seam is kept;
// s.mu held. It drops a seam past its time.
func (s *sub) inSeam(ks *keyState, t int64) bool {
	if ks.seam == nil {
		return false
	}
	if ks.ready && time.Now().After(ks.seamUntil) {
		s.seamHeld -= len(ks.seam)
		ks.seam = nil
		return false
	}
	_, found := slices.BinarySearch(ks.seam, t)
	return found
}

// delivery is what is remembered of the points of one series delivered: the newest,
// and the last recentN, to tell a duplicate from a late point.
type delivery struct {
	last   int64
	recent [recentN]int64 // ring of the last timestamps delivered
	rn     int            // timestamps in the ring so far
}

func (d *delivery) remember(t int64) {
	d.recent[d.rn%recentN] = t
	d.rn++
}

func (d *delivery) seen(t int64) bool {
	for i := 0; i < min(d.rn, recentN); i++ {
		if d.recent[i] == t {
			return true
		}
	}
	return false
}

// checkFull ends the subscription when its subscriber is too slow; s.mu held.
func (s *sub) checkFull() {
	if s.buffered > s.h.cfg.Buffer && s.err == nil {
		s.endLocked(fellBehind(uint64(s.buffered), s.h.cfg.Buffer))
	}
}

// end ends the subscription with err.
func (s *sub) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endLocked(err)
}

func (s *sub) endLocked(err error) {
	if s.err != nil {
		return
	}
	s.err = err
	s.over.Store(true)
	s.ses.gen.Add(1) // its session's poll plan no longer holds
	s.runs = nil
	s.cancel()
	s.ses.signal()
}

func (s *sub) idle(now time.Time) time.Duration {
	return now.Sub(time.Unix(0, s.polledAt.Load()))
}

// take answers a poll of the subscription at now: its runs after the first seen, as many as
// budget (points) allows but at least one; ok is false when it has none. ended says
// that the subscription is gone (the batch says why).
func (s *sub) take(now time.Time, seen uint64, budget *int) (b wire.WatchBatch, ok, ended bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.polledAt.Store(now.UnixNano())
	if s.one != nil && s.err == nil {
		if b, ok, handled := s.takeFollowed(s.one, seen, budget); handled {
			return b, ok, b.Ended != ""
		}
	}
	if s.err != nil {
		return s.endedBatch(), true, true
	}
	if seen < s.base || seen > s.base+uint64(len(s.runs)) {
		return s.badSeen(seen, len(s.runs)), true, true
	}
	s.ack(int(seen - s.base))
	if s.one != nil && s.follow(s.one) {
		if b, ok, handled := s.takeFollowed(s.one, seen, budget); handled {
			return b, ok, b.Ended != ""
		}
		if s.err != nil {
			return s.endedBatch(), true, true
		}
	}
	n := fit(s.runs, budget, true)
	if n == 0 {
		return wire.WatchBatch{}, false, false
	}
	// The batch shares the runs: appends write only past them, and a trim drops them
	// only once the subscriber has them.
	return wire.WatchBatch{ID: s.id, Runs: s.runs[:n:n], Seen: s.base + uint64(n)}, true, false
}

// ack drops the first n runs, which the subscriber has; s.mu held.
func (s *sub) ack(n int) {
	if n == 0 {
		return
	}
	for _, r := range s.runs[:n] {
		s.buffered -= r.Points.Len()
	}
	s.runs = s.runs[n:] // a batch answered before may still share them
	s.base += uint64(n)
	select {
	case s.space <- struct{}{}:
	default:
	}
}

// fit counts the first runs that budget (points) allows, taking them from it; the
// first always fits when none is taken yet.
func fit(runs []wire.WatchRun, budget *int, none bool) int {
	n := 0
	for n < len(runs) && ((none && n == 0) || *budget >= runs[n].Points.Len()) && *budget > 0 {
		*budget -= runs[n].Points.Len()
		n++
	}
	return n
}

// endedBatch says why the subscription ended; s.mu held.
func (s *sub) endedBatch() wire.WatchBatch {
	return wire.WatchBatch{ID: s.id, Ended: fmt.Sprintf("subscription %d ended: %v", s.id, s.err)}
}

// badSeen is the batch that ends a subscription polled for runs up to seen when it
// holds held after s.base; s.mu held.
func (s *sub) badSeen(seen uint64, held int) wire.WatchBatch {
	return wire.WatchBatch{ID: s.id, Ended: fmt.Sprintf("subscription %d: runs up to %d asked for, the node holds %d to %d",
		s.id, seen, s.base, s.base+uint64(held))}
}
