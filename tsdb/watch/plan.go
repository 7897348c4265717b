package watch

import (
	"time"

	"github.com/tsdht/tsdht/tsdb/wire"
)

// A session's poll plan. A client names the same subscriptions in the same order poll
// after poll, and once its subscriptions of a series caught up they stay in their
// groups (group.go) poll after poll: a thousand subscriptions of one series in ten
// sessions are ten polls a written point, each the same as the last but for its
// cursors' Seen. A poll that finds every subscription of its session following one
// log in a group, and leaves each in it, leaves the session a plan: its cursors' IDs
// in order, each one's group and Seen less the group's position (keyState.off). The
// session's next polls are stepped from the plan — a subtraction and a compare per
// cursor, no subscription looked up or touched, the answer's IDs the plan's own —
// while it holds: the same cursors, every member of a group at its group's position,
// neither the log's groups (liveLog.gen) nor the session's subscriptions
// (session.gen) changed since, and no group's next run out of order. Any other poll is
// stepped as before (Hub.step), and makes the next plan.

// pollPlan is what one poll of a session found, for its next polls.
type pollPlan struct {
	lg      *liveLog
	gen     uint64   // lg.gen when it was made
	sesGen  uint64   // the session's gen when the poll that made it began
	ids     []uint64 // the poll's cursors' subscriptions, in its order
	offs    []uint64 // each one's Seen less its group's position
	at      []int32  // each one's group, in groups
	groups  []planGroup
	subs    []*sub // the members, whose polledAt it stamps
	stamped int64  // when it last stamped them (ns); guarded by lg.mu
}

// planGroup is a group of a plan. ids are its members' IDs in the poll's order, the
// IDs of each answer to it: shared by the answers, never changed. pos (the position
// its members acknowledged) and set are a poll's, under lg.mu.
type planGroup struct {
	g       *followGroup
	ids     []uint64
	idsWire []byte // ids encoded, for every answer (wire.WatchGroup.IDsWire)
	pos     uint64
	set     bool
}

// stampEvery is how often a plan stamps its members polled: their lease is counted
// from the last stamp.
func (h *Hub) stampEvery() int64 { return int64(h.cfg.Lease / 16) }

// plan makes the plan of a poll whose cursors cs (in the poll's order) each follow lg
// in a group, made at sesGen; nil when one does not; lg.mu held.
func (lg *liveLog) plan(cs []cursor, sesGen uint64) *pollPlan {
	if len(cs) == 0 {
		return nil
	}
	pl := &pollPlan{lg: lg, gen: lg.gen, sesGen: sesGen, ids: make([]uint64, len(cs)), offs: make([]uint64, len(cs)),
		at: make([]int32, len(cs)), subs: make([]*sub, len(cs)), stamped: time.Now().UnixNano()}
	count := make([]int, 0, 4)
	for i, p := range cs {
		ks := p.s.one
		if ks.grp == nil {
			return nil
		}
		j := 0
		for j < len(pl.groups) && pl.groups[j].g != ks.grp {
			j++
		}
		if j == len(pl.groups) {
			pl.groups = append(pl.groups, planGroup{g: ks.grp})
			count = append(count, 0)
		}
		count[j]++
		pl.ids[i], pl.offs[i], pl.at[i], pl.subs[i] = p.s.id, ks.off, int32(j), p.s
	}
	for j := range pl.groups {
		pl.groups[j].ids = make([]uint64, 0, count[j])
	}
	for i, id := range pl.ids {
		g := &pl.groups[pl.at[i]]
		g.ids = append(g.ids, id)
	}
	for j := range pl.groups {
		pl.groups[j].idsWire = wire.AppendWatchIDs(nil, pl.groups[j].ids)
	}
	return pl
}

// A poll token. An answer stepped from a plan is groups alone, and the subscriber's
// next cursors follow from it: each member's Seen is its offset plus its group's
// position once the answer is handed. The answer carries a token for them
// (wire.WatchNextResp.Token), and a client that handed all of it polls next with the
// token instead of its cursors (wire.WatchNextReq.Token): a session of a hundred
// subscriptions that keeps up sends and has decoded none of its cursors a point, and
// its poll is stepped a compare per group, not per cursor.

// pollToken is what a token stands for: the plan an answer was stepped from and
// each of its groups' positions once the subscriber has the answer. Never changed
// once made.
type pollToken struct {
	n   uint64
	pl  *pollPlan
	pos []uint64 // by plan group
}

// cursors returns the cursors tok stands for, in the plan's order, in cs's array.
func (tok *pollToken) cursors(cs []wire.WatchCursor) []wire.WatchCursor {
	cs = cs[:0]
	for i, id := range tok.pl.ids {
		cs = append(cs, wire.WatchCursor{ID: id, Seen: tok.pl.offs[i] + tok.pos[tok.pl.at[i]]})
	}
	return cs
}

// token returns the session's token n, or nil when it holds another (or none).
func (ses *session) token(n uint64) *pollToken {
	if tok := ses.tok.Load(); tok != nil && tok.n == n {
		return tok
	}
	return nil
}

// stepPlanned answers a poll of ses with cursors, or with the token tok (cursors
// then unused), from its plan, in resp, within budget (points), and reports whether
// it did; when not, it changed nothing, and the poll is stepped as any other
// (Hub.step). An answer it makes carries a token of the cursors that follow from it.
func (ses *session) stepPlanned(cursors []wire.WatchCursor, tok *pollToken, resp *wire.WatchNextResp, budget *int) bool {
	pl := ses.plan.Load()
	if pl == nil || ses.gen.Load() != pl.sesGen {
		return false
	}
	if tok != nil {
		if tok.pl != pl {
			return false
		}
	} else {
		if len(cursors) != len(pl.ids) {
			return false
		}
		for i := range cursors {
			if cursors[i].ID != pl.ids[i] {
				return false
			}
		}
	}
	lg := pl.lg
	lg.mu.Lock()
	defer lg.mu.Unlock()
	if lg.gen != pl.gen {
		return false
	}
	if tok != nil {
		for i := range pl.groups {
			pl.groups[i].pos, pl.groups[i].set = tok.pos[i], true
		}
	} else {
		for i := range pl.groups {
			pl.groups[i].set = false
		}
		for i := range cursors {
			g := &pl.groups[pl.at[i]]
			switch pos := cursors[i].Seen - pl.offs[i]; {
			case !g.set:
				g.pos, g.set = pos, true
			case pos != g.pos:
				return false // members apart: a vote (liveLog.step)
			}
		}
	}
	for i := range pl.groups {
		pg := &pl.groups[i]
		g := pg.g
		g.avail = lg.inOrderFrom(g.from)
		if !g.takes(pg.pos) || g.blockedAt(lg, pg.pos) {
			return false
		}
	}
	if now := time.Now().UnixNano(); now-pl.stamped >= pl.subs[0].h.stampEvery() {
		for _, s := range pl.subs {
			s.polledAt.Store(now)
		}
		pl.stamped = now
	}
	next := &pollToken{n: ses.tokens.Add(1), pl: pl, pos: make([]uint64, len(pl.groups))}
	for i := range pl.groups {
		pg := &pl.groups[i]
		lg.moveTo(pg.g, pg.pos)
		next.pos[i] = pg.pos
		if runs := lg.next(pg.g, budget); len(runs) > 0 {
			resp.Groups = append(resp.Groups, wire.WatchGroup{IDs: pg.ids, Runs: runs, IDsWire: pg.idsWire})
			next.pos[i] += uint64(len(runs))
		}
	}
	if len(pl.groups) > 1 {
		// While the plan holds, the session's groups of the log are the plan's: one
		// alone has none to merge with, and the log's other sessions' are not looked
		// at.
		for i := range pl.groups {
			lg.mergeInto(pl.groups[i].g)
		}
	}
	if len(resp.Groups) > 0 {
		ses.tok.Store(next)
		resp.Token = next.n
	}
	return true
}
