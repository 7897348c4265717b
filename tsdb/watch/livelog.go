package watch

import (
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// The shared live log. Every series watched at this node has one: each notification
// of the series is appended to it once, whatever the number of its subscriptions. A
// subscription of one series whose history is delivered, whose subscriber has
// acknowledged every run it holds and which has seen every run of the log so far
// follows the log: its runs are then the log's runs from its position on, read by
// position when its session polls (a batch is a slice of the log: no copy, no work
// per subscription at a notification but waking its session). It leaves the log,
// taking what it has not been acknowledged as runs of its own, at the first run that
// is not newer than every point before it in the log (a late point or a duplicate:
// each subscription tells those apart with what it delivered, sub.deliver), and
// rejoins once it is caught up again. Followers of one session at one position are
// stepped and answered together, as a group (group.go). Every other subscription of
// the series (not ready yet, of many series, or off the log) takes each run itself
// (sub.live), as the log hands them out.

// logEntry is what the log knows of one run beside it.
type logEntry struct {
	inOrder bool   // every point newer than every point of the log before it, in order
	cum     uint64 // points appended up to and including this run
}

// liveLog is one series' live log; positions count the runs appended since it was
// made. Its fields, its groups and the follow state of its subscriptions' keyStates
// (following, cut, from, genFrom, grp, off, joinRn, exit) are guarded by mu, taken
// after the subscription's mu.
type liveLog struct {
	mu      sync.Mutex
	first   uint64          // position of runs[0]
	runs    []wire.WatchRun // never written in place: batches share them
	meta    []logEntry      // beside runs
	base    uint64          // points appended before runs[0]
	total   uint64          // points appended
	last    int64           // newest time appended (math.MinInt64 before any)
	trimAt  int             // len(runs) at which runs no follower needs are dropped
	generic map[*sub]*keyState
	follow  map[*sub]*keyState // followers not in a group
	groups  map[*followGroup]struct{}
	// sessions counts the subscriptions of each session watching the series: a
	// notification wakes each session once.
	sessions map[*session]int
	// gen counts the changes of its groups' members (a join, a leave, a merge): a
	// session's poll plan holds while it is the same (plan.go).
	gen uint64
}

// logRuns is the fewest runs a log's array grows to hold: trimmed from the front, it
// has no room at the back. A log that nobody follows keeps no run.
const logRuns = 16

func newLiveLog() *liveLog {
	return &liveLog{last: math.MinInt64, trimAt: logRuns, generic: map[*sub]*keyState{}, follow: map[*sub]*keyState{},
		groups: map[*followGroup]struct{}{}, sessions: map[*session]int{}}
}

// end is the position the next run appended takes; lg.mu held.
func (lg *liveLog) end() uint64 { return lg.first + uint64(len(lg.runs)) }

// add registers ks of s as taking runs itself from the log's end on; lg.mu held.
func (lg *liveLog) add(s *sub, ks *keyState) {
	lg.generic[s] = ks
	lg.sessions[s.ses]++
	ks.log, ks.genFrom, ks.liveN = lg, lg.end(), 0
}

// remove forgets s and reports whether the log has no subscription left; lg.mu held.
func (lg *liveLog) remove(s *sub) bool {
	_, g := lg.generic[s]
	_, f := lg.follow[s]
	var member *keyState
	if ks := s.one; ks != nil && ks.log == lg && ks.grp != nil {
		member = ks
	}
	if g || f || member != nil { // a follower cut off is none
		delete(lg.generic, s)
		delete(lg.follow, s)
		if member != nil {
			lg.dropMember(member.grp, s, member)
		}
		lg.forgetSession(s.ses)
	}
	return len(lg.generic)+len(lg.follow)+len(lg.groups) == 0
}

// forgetSession counts one subscription of ses less; lg.mu held.
func (lg *liveLog) forgetSession(ses *session) {
	if lg.sessions[ses]--; lg.sessions[ses] <= 0 {
		delete(lg.sessions, ses)
	}
}

// append appends a run of pts (not empty) of key; lg.mu held. It returns the
// subscriptions that take runs themselves (appended to generic) and the followers
// cut off for falling more than buffer points behind (appended to cut), for the
// caller to hand the run to and to end once it let go of lg.mu.
func (lg *liveLog) append(key string, pts series.Points, buffer int, generic, cut []*sub) ([]*sub, []*sub) {
	inOrder := pts.T[0] > lg.last
	for i := 1; inOrder && i < pts.Len(); i++ {
		inOrder = pts.T[i] > pts.T[i-1]
	}
	for _, t := range pts.T {
		lg.last = max(lg.last, t)
	}
	if len(lg.follow)+len(lg.groups) == 0 && len(lg.runs) == 0 {
		// Nobody reads it by position: the log keeps its count, not the run.
		lg.first++
		lg.total += uint64(pts.Len())
		lg.base = lg.total
	} else {
		lg.keep(key, pts, inOrder)
		if len(lg.runs) >= lg.trimAt || lg.total-lg.base > uint64(buffer) {
			cut = lg.trim(buffer, cut)
		}
	}
	for s := range lg.generic {
		generic = append(generic, s)
	}
	return generic, cut
}

// keep appends the run; lg.mu held.
func (lg *liveLog) keep(key string, pts series.Points, inOrder bool) {
	if len(lg.runs) == cap(lg.runs) {
		runs := make([]wire.WatchRun, len(lg.runs), max(logRuns, 2*len(lg.runs)))
		copy(runs, lg.runs)
		lg.runs = runs
		lg.meta = append(make([]logEntry, 0, cap(runs)), lg.meta...)
	}
	lg.total += uint64(pts.Len())
	lg.runs = append(lg.runs, wire.WatchRun{Key: key, Points: pts})
	lg.meta = append(lg.meta, logEntry{inOrder: inOrder, cum: lg.total})
}

// trim drops the runs every follower has acknowledged and cuts the followers more
// than buffer points behind; lg.mu held.
func (lg *liveLog) trim(buffer int, cut []*sub) []*sub {
	cutOff := func(s *sub, ks *keyState, n uint64) {
		ks.following, ks.cut, ks.behind = false, true, n
		lg.forgetSession(s.ses)
		cut = append(cut, s)
	}
	for s, ks := range lg.follow {
		if n := lg.total - lg.cumBefore(ks.from) + ks.ownPts; n > uint64(buffer) {
			delete(lg.follow, s)
			cutOff(s, ks, n)
		}
	}
	for g := range lg.groups {
		if n := lg.total - lg.cumBefore(g.from); n > uint64(buffer) {
			for s, ks := range g.members {
				lg.dropMember(g, s, ks)
				cutOff(s, ks, n)
			}
		}
	}
	keep := lg.end()
	for _, ks := range lg.follow {
		keep = min(keep, ks.from)
	}
	for g := range lg.groups {
		keep = min(keep, g.from)
	}
	if n := int(keep - lg.first); n > 0 {
		lg.base = lg.cumBefore(keep)
		// Re-slicing, never copying over: a batch answered may still hold the runs.
		lg.runs, lg.meta, lg.first = lg.runs[n:], lg.meta[n:], keep
	}
	if len(lg.runs) == 0 {
		lg.runs, lg.meta = nil, nil // let the array go
	}
	lg.trimAt = 2*len(lg.runs) + logRuns
	return cut
}

// fellBehind is why a subscription ends whose subscriber is n points behind.
func fellBehind(n uint64, buffer int) error {
	return fmt.Errorf("the subscriber fell %d points behind, past this node's buffer of %d", n, buffer)
}

// cumBefore is the points appended before position p (first ≤ p ≤ end); lg.mu held.
func (lg *liveLog) cumBefore(p uint64) uint64 {
	if p == lg.first {
		return lg.base
	}
	return lg.meta[p-lg.first-1].cum
}

// inOrderFrom counts the runs from position p on that are in order, up to the first
// that is not; lg.mu held.
func (lg *liveLog) inOrderFrom(p uint64) int {
	n := 0
	for i := int(p - lg.first); i < len(lg.meta) && lg.meta[i].inOrder; i++ {
		n++
	}
	return n
}

// follow lets s (of the single series ks) follow the log if it can, and reports
// whether it follows: its history delivered, every run of the log taken and nothing
// delivered newer than the log's newest; s.mu held. The runs it holds stay its own,
// before the log's.
func (s *sub) follow(ks *keyState) bool {
	lg := ks.log
	if lg == nil || s.selects || len(s.keys) != 1 || !ks.ready || len(ks.pending) > 0 || s.err != nil {
		return false
	}
	lg.mu.Lock()
	defer lg.mu.Unlock()
	if !ks.following && !ks.cut && ks.genFrom+ks.liveN == lg.end() && ks.last <= lg.last {
		delete(lg.generic, s)
		lg.follow[s] = ks
		ks.following, ks.from, ks.ownPts = true, lg.end(), uint64(s.buffered)
	}
	return ks.following
}

// takeFollowed answers a poll of a follower (s.mu held): it acknowledges the runs
// before seen and returns the next, its own and then the log's, as many as budget
// allows but at least one. handled is false when s does not follow the log (any
// more): at a run out of order it leaves the log (unfollow), and a follower cut off is
// ended; the caller answers from the subscription's own runs, or says why it ended.
func (s *sub) takeFollowed(ks *keyState, seen uint64, budget *int) (b wire.WatchBatch, ok, handled bool) {
	lg := ks.log
	lg.mu.Lock()
	defer lg.mu.Unlock()
	if ks.grp != nil { // polled on its own: a follower of its own
		lg.leave(s, ks)
	}
	s.settle(ks)
	if ks.cut {
		s.endLocked(fellBehind(ks.behind, s.h.cfg.Buffer))
		return wire.WatchBatch{}, false, false
	}
	if !ks.following {
		return wire.WatchBatch{}, false, false
	}
	avail := lg.inOrderFrom(ks.from)
	if seen < s.base || seen > s.base+uint64(len(s.runs)+avail) {
		return s.badSeen(seen, len(s.runs)+avail), true, true
	}
	n := int(seen - s.base)
	own := min(n, len(s.runs))
	s.ack(own)
	ks.ownPts = uint64(s.buffered)
	if n -= own; n > 0 {
		i := int(ks.from - lg.first)
		for _, r := range lg.runs[i : i+n] {
			ks.delivered(&r.Points)
		}
		ks.from += uint64(n)
		s.base = seen
		avail -= n
	}
	if avail == 0 && ks.from < lg.end() {
		s.unfollow(ks)
		return wire.WatchBatch{}, false, false
	}
	if len(s.runs) == 0 {
		lg.join(s, ks) // its next polls are its group's
	}
	i := int(ks.from - lg.first)
	mine := fit(s.runs, budget, true)
	theirs := fit(lg.runs[i:i+avail], budget, mine == 0)
	var runs []wire.WatchRun
	switch {
	case mine+theirs == 0:
		return wire.WatchBatch{}, false, true
	case theirs == 0:
		runs = s.runs[:mine:mine]
	case mine == 0:
		runs = lg.runs[i : i+theirs : i+theirs]
	default: // once, as the subscription joins the log
		runs = append(slices.Clip(s.runs[:mine]), lg.runs[i:i+theirs]...)
	}
	return wire.WatchBatch{ID: s.id, Runs: runs, Seen: s.base + uint64(mine+theirs)}, true, true
}

// unfollow takes s off the log: the log's runs it has not been acknowledged become
// its own, after those it holds (the runs in order the same runs under the same
// numbers), and it takes every later run itself; s.mu and lg.mu held.
func (s *sub) unfollow(ks *keyState) {
	lg := ks.log
	delete(lg.follow, s)
	lg.generic[s] = ks
	ks.following = false
	key := ""
	for k := range s.keys {
		key = k
	}
	for i := int(ks.from - lg.first); i < len(lg.runs); i++ {
		s.deliver(key, ks, lg.runs[i].Points)
	}
	ks.genFrom, ks.liveN = lg.end(), 0
}

// delivered notes pts, in order and newer than every point delivered before, as
// delivered.
func (d *delivery) delivered(pts *series.Points) {
	for _, t := range pts.T[max(0, pts.Len()-recentN):] {
		d.remember(t)
	}
	d.last = pts.T[pts.Len()-1]
}
