package watch

import (
	"time"

	"github.com/tsdht/tsdht/tsdb/wire"
)

// Groups of followers. The followers of one series' live log in one session whose
// subscribers acknowledged the same position form a group (a thousand subscriptions
// of one series in ten clients: ten groups). A poll of the session steps a group
// once: it checks each member's cursor (one subtraction and compare), moves the
// group's position and its memory of what it delivered once, and answers the group's
// next runs once, for all its members (wire.WatchGroup). A member leaves the group,
// a follower of its own again at the group's position, when its cursor says
// something else than the others' (an answer it did not get), when it ended, and
// when the group's next run is out of order (every member then leaves, and each
// leaves the log at its next poll: late flags are each subscription's own); it
// rejoins, or makes a group, once it acknowledged every run it holds
// (sub.takeFollowed). What a member would have kept for itself while in the group —
// the runs acknowledged (sub.base), the timestamps delivered (keyState.delivery) — it
// takes from the group when it leaves (groupExit), so that a subscription out of its
// group is exactly what it would have been had it never joined.

// followGroup is the followers of one live log in one session at one position.
// Guarded by the log's mu.
type followGroup struct {
	ses     *session
	from    uint64 // the log position of the members' next run
	members map[*sub]*keyState
	// delivery counts the timestamps the group delivered since it was made (rn) and
	// keeps the last recentN and the newest, for a member that leaves.
	delivery
	// The poll stepping it (Hub.stepGroups): its id, the runs in order from the
	// group's position then, the position most members acknowledged (votes: a
	// majority vote's count), the cursors of the members that agree.
	poll    uint64
	avail   int
	pos     uint64
	votes   int
	cursors []cursor
}

// groupExit is what a subscription that left its group takes as its own at its next
// poll (sub.settle): its runs acknowledged, and the timestamps the group delivered
// since it joined, with the newest.
type groupExit struct {
	base  uint64
	carry []int64
	last  int64
}

// join puts follower ks of s, whose subscriber acknowledged every run it held, in
// its session's group at its position, made if there is none; s.mu and lg.mu held.
func (lg *liveLog) join(s *sub, ks *keyState) {
	var g *followGroup
	for c := range lg.groups {
		if c.ses == s.ses && c.from == ks.from {
			g = c
			break
		}
	}
	if g == nil {
		g = &followGroup{ses: s.ses, from: ks.from, members: map[*sub]*keyState{}}
		lg.groups[g] = struct{}{}
	}
	delete(lg.follow, s)
	g.members[s] = ks
	ks.grp, ks.off, ks.joinRn = g, s.base-ks.from, g.rn // off wraps: Seen = off + position
	lg.gen++
}

// leave takes member ks of s out of its group: a follower of its own at the group's
// position, which takes what it is owed at its next poll (sub.settle); lg.mu held.
func (lg *liveLog) leave(s *sub, ks *keyState) {
	g := ks.grp
	lg.dropMember(g, s, ks)
	lg.follow[s] = ks
	ks.from = g.from
	e := &groupExit{base: g.from + ks.off, last: g.last}
	if k := g.rn - ks.joinRn; k > 0 {
		for i := g.rn - min(k, recentN); i < g.rn; i++ {
			e.carry = append(e.carry, g.recent[i%recentN])
		}
	}
	ks.exit = e
}

// dropMember takes ks of s out of group g, and g out of the log once it has no
// member; lg.mu held.
func (lg *liveLog) dropMember(g *followGroup, s *sub, ks *keyState) {
	delete(g.members, s)
	if len(g.members) == 0 {
		delete(lg.groups, g)
	}
	ks.grp = nil
	lg.gen++
}

// settle takes what ks was owed by the group it left, if it did; s.mu and lg.mu held.
func (s *sub) settle(ks *keyState) {
	e := ks.exit
	if e == nil {
		return
	}
	ks.exit = nil
	for _, t := range e.carry {
		ks.remember(t)
	}
	if len(e.carry) > 0 {
		ks.last = e.last
	}
	s.base = e.base
}

// stepGroups answers, in resp, the cursors of poll (grouped when the client takes
// wire.WatchGroup) whose subscriptions follow a log in a group, within budget
// (points), and returns the others, for their own answers (sub.take). When every
// cursor's subscription follows one log in a group and stays in it (answered grouped),
// it also returns the session's plan of such polls (plan.go), made at sesGen.
func (h *Hub) stepGroups(poll uint64, polled []cursor, resp *wire.WatchNextResp, budget *int, grouped bool, sesGen uint64) ([]cursor, *pollPlan) {
	// Split into followers of a log (as most of a session's subscriptions of one
	// series are, one log for them all) and the rest, in polled's array.
	var follow []cursor
	var one *liveLog // the log of every follower, or nil when there are several
	rest := polled[:0]
	for _, p := range polled {
		ks := p.s.one
		if ks == nil || ks.log == nil {
			rest = append(rest, p)
			continue
		}
		if follow == nil {
			follow, one = make([]cursor, 0, len(polled)), ks.log
		} else if ks.log != one {
			one = nil
		}
		follow = append(follow, p)
	}
	if one != nil {
		one.mu.Lock()
		defer one.mu.Unlock()
		rest = one.step(poll, follow, resp, budget, grouped, rest)
		var pl *pollPlan
		if len(rest) == 0 && grouped {
			pl = one.plan(follow, sesGen)
		}
		return rest, pl
	}
	byLog := map[*liveLog][]cursor{}
	for _, p := range follow {
		byLog[p.s.one.log] = append(byLog[p.s.one.log], p)
	}
	for lg, cs := range byLog {
		lg.mu.Lock()
		rest = lg.step(poll, cs, resp, budget, grouped, rest)
		lg.mu.Unlock()
	}
	return rest, nil
}

// step is stepGroups for the cursors cs of one log; lg.mu held.
func (lg *liveLog) step(poll uint64, cs []cursor, resp *wire.WatchNextResp, budget *int, grouped bool, rest []cursor) []cursor {
	// The position most members of a group acknowledged (of those the group can take:
	// a majority vote) is the group's; the others leave it.
	var stepped []*followGroup
	for _, p := range cs {
		ks := p.s.one
		g := ks.grp
		if g == nil {
			continue
		}
		if g.poll != poll {
			g.poll, g.avail, g.cursors, g.votes = poll, lg.inOrderFrom(g.from), g.cursors[:0], 0
			stepped = append(stepped, g)
		}
		if pos := p.seen - ks.off; g.takes(pos) {
			switch {
			case g.votes == 0:
				g.pos, g.votes = pos, 1
			case pos == g.pos:
				g.votes++
			default:
				g.votes--
			}
		}
	}
	for _, p := range cs {
		s, ks := p.s, p.s.one
		g := ks.grp
		if g == nil {
			rest = append(rest, p)
			continue
		}
		if s.over.Load() || p.seen-ks.off != g.pos || !g.takes(g.pos) {
			lg.leave(s, ks)
			rest = append(rest, p)
			continue
		}
		g.cursors = append(g.cursors, p)
	}
	now := time.Now().UnixNano()
	for _, g := range stepped {
		if len(g.cursors) == 0 {
			continue
		}
		for _, c := range g.cursors {
			c.s.polledAt.Store(now)
		}
		lg.moveTo(g, g.pos)
		if g.blockedAt(lg, g.from) {
			// The next run is out of order: each member leaves the log on its own.
			for s, ks := range g.members {
				lg.leave(s, ks)
			}
			rest = append(rest, g.cursors...)
			continue
		}
		runs := lg.next(g, budget)
		cursors := g.cursors // reused by the next poll: not kept in resp
		if len(runs) == 0 {
			continue
		}
		n := len(runs)
		if !grouped {
			for _, c := range cursors {
				resp.Subs = append(resp.Subs, wire.WatchBatch{ID: c.s.id, Runs: runs, Seen: c.seen + uint64(n)})
			}
			continue
		}
		ids := make([]uint64, len(cursors))
		for j, c := range cursors {
			ids[j] = c.s.id
		}
		resp.Groups = append(resp.Groups, wire.WatchGroup{IDs: ids, Runs: runs})
	}
	for _, g := range stepped {
		lg.mergeInto(g)
	}
	return rest
}

// blockedAt reports whether group g, moved to pos, finds its next run out of order
// (g.avail counts its runs in order from g.from); lg.mu held.
func (g *followGroup) blockedAt(lg *liveLog, pos uint64) bool {
	return g.avail == int(pos-g.from) && pos < lg.end()
}

// moveTo moves group g to pos, which its members acknowledged (g.avail counts its runs
// in order from g.from, and then from pos), the runs before it delivered; lg.mu held.
func (lg *liveLog) moveTo(g *followGroup, pos uint64) {
	for p := g.from; p < pos; p++ {
		g.delivered(&lg.runs[p-lg.first].Points)
	}
	g.avail -= int(pos - g.from)
	g.from = pos
}

// next returns group g's next runs, in order, within budget (points); lg.mu held.
func (lg *liveLog) next(g *followGroup, budget *int) []wire.WatchRun {
	i := int(g.from - lg.first)
	n := fit(lg.runs[i:i+g.avail], budget, true)
	return lg.runs[i : i+n : i+n]
}

// takes reports whether pos is a position group g can be acknowledged at in a poll
// stepping it: its own, or up to its runs in order after it.
func (g *followGroup) takes(pos uint64) bool {
	return pos >= g.from && pos <= g.from+uint64(g.avail)
}

// mergeInto merges g with another group of its session at its position, if there is
// one (their answers diverged once, by a run appended between them); lg.mu held. The
// group that delivered more keeps its memory: the other's is the end of it (both
// delivered the same runs of the log up to their position, each since it was made).
func (lg *liveLog) mergeInto(g *followGroup) {
	if len(g.members) == 0 {
		return
	}
	for o := range lg.groups {
		if o == g || o.ses != g.ses || o.from != g.from {
			continue
		}
		keep, gone := g, o
		if o.rn > g.rn {
			keep, gone = o, g
		}
		for s, ks := range gone.members {
			ks.grp, ks.joinRn = keep, keep.rn-(gone.rn-ks.joinRn)
			keep.members[s] = ks
		}
		clear(gone.members)
		delete(lg.groups, gone)
		lg.gen++
		return
	}
}
