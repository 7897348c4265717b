package watch

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tsdht/tsdht/tsdb/wire"
)

// planOf returns session ses's poll plan.
func planOf(h *Hub, ses uint64) *pollPlan {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.sessions[ses]; s != nil {
		return s.plan.Load()
	}
	return nil
}

// TestPollPlan: a session whose subscriptions of one series caught up is polled from
// its plan, the same plan write after write; an answer lost to one subscription, a
// late point, a subscription ended, one opened into the session and one polled ahead
// of what it was sent each make the poll a looked-up one (the plan no longer holds)
// and the next plan; each subscription gets every point once, in order, the late one
// flagged. With tokens, the client polls with the token of the answer before while
// it can (wire.WatchNextReq.Token): a token whose plan no longer holds is stepped
// from the cursors it stands for, and the outcome is the same.
func TestPollPlan(t *testing.T) {
	for _, tokens := range []bool{false, true} {
		t.Run(fmt.Sprintf("tokens=%v", tokens), func(t *testing.T) { testPollPlan(t, tokens) })
	}
}

func testPollPlan(t *testing.T, tokens bool) {
	const n = 8
	h, src := newTestHub(t, 0)
	c := &groupClient{t: t, h: h, session: 9, seen: map[uint64]uint64{}, got: map[uint64][]string{}, tokens: tokens}
	openOne := func() uint64 {
		id, err := h.Open(context.Background(), &wire.WatchOpenReq{Series: "k", From: 1, Session: c.session})
		if err != nil {
			t.Fatal(err)
		}
		waitReady(t, h, id)
		c.ids = append(c.ids, id)
		return id
	}
	for range n {
		openOne()
	}
	var want []string
	write := func(ts ...int64) {
		src.write(h, "k", ts...)
		for _, x := range ts {
			want = append(want, fmt.Sprint(x))
		}
	}
	next := int64(10)
	steady := func(when string) *pollPlan {
		t.Helper()
		// A subscription that caught up joins its group at its next poll, and groups
		// at one position merge at theirs: a few writes make one group.
		var pl *pollPlan
		for range 5 {
			write(next)
			next += 10
			c.caughtUp(len(want))
			if pl = planOf(h, c.session); pl != nil && len(pl.ids) == len(c.ids) && len(pl.groups) == 1 {
				break
			}
		}
		if pl == nil || len(pl.ids) != len(c.ids) || len(pl.groups) != 1 {
			t.Fatalf("%s: plan %+v; want one of %d subscriptions in one group", when, pl, len(c.ids))
		}
		for range 3 {
			polls := c.tokenPolls
			write(next)
			next += 10
			c.caughtUp(len(want))
			if tokens && c.tokenPolls == polls {
				t.Fatalf("%s: a caught-up session's polls named no token", when)
			}
			if planOf(h, c.session) != pl {
				t.Fatalf("%s: a poll of the caught-up session made a plan anew; want the plan kept", when)
			}
			if !slices.Equal(c.groups, []int{len(c.ids)}) {
				t.Fatalf("%s: answered in groups of %v; want one of %d", when, c.groups, len(c.ids))
			}
		}
		return pl
	}
	for range 2 {
		write(next)
		next += 10
		c.caughtUp(len(want))
	}
	pl := steady("caught up")

	// An answer lost to one subscription: its cursor lags the others'.
	write(next)
	next += 10
	c.caughtUp(len(want), c.ids[0])
	c.caughtUp(len(want))
	if planOf(h, c.session) == pl {
		t.Fatal("a poll with one cursor behind its group was answered from the plan")
	}
	pl = steady("after a lost answer")

	// A late point: every subscription leaves the log, flags it, and rejoins.
	write(next + 5)
	src.write(h, "k", next-5)
	want = append(want, fmt.Sprintf("late %d", next-5))
	next += 10
	c.caughtUp(len(want))
	if planOf(h, c.session) == pl {
		t.Fatal("a late point was answered from the plan")
	}
	pl = steady("after a late point")

	// A subscription ended by its subscriber.
	gone := c.ids[n-1]
	if _, err := h.Next(context.Background(), &wire.WatchNextReq{Session: c.session, Cursors: []wire.WatchCursor{{ID: gone, Seen: c.seen[gone]}}, Close: true}); err != nil {
		t.Fatal(err)
	}
	c.ids = c.ids[:n-1]
	if planOf(h, c.session) != pl {
		t.Fatal("closing a subscription replaced the plan before a poll")
	}
	pl = steady("after one closed")

	// One opened into the session: polled from its first run, it joins once caught up.
	added := openOne()
	pl = steady("after one opened")
	if !slices.Contains(pl.ids, added) {
		t.Fatalf("the plan names %v, not the subscription opened (%d)", pl.ids, added)
	}
	for _, id := range c.ids[:n-1] {
		if g := strings.Join(c.got[id], ","); g != strings.Join(want, ",") {
			t.Fatalf("subscription %d got\n%s\nwant\n%s", id, g, strings.Join(want, ","))
		}
	}
	// The one opened last read the late point as history, in its place.
	var ts []int
	for _, w := range want {
		x, _ := strconv.Atoi(strings.TrimPrefix(w, "late "))
		ts = append(ts, x)
	}
	slices.Sort(ts)
	var inOrder []string
	for _, x := range ts {
		inOrder = append(inOrder, strconv.Itoa(x))
	}
	if g := strings.Join(c.got[added], ","); g != strings.Join(inOrder, ",") {
		t.Fatalf("the subscription opened last got\n%s\nwant\n%s", g, strings.Join(inOrder, ","))
	}

	// A cursor ahead of what its subscription was sent ends it, from the plan or not.
	cs := make([]wire.WatchCursor, len(c.ids))
	for i, id := range c.ids {
		cs[i] = wire.WatchCursor{ID: id, Seen: c.seen[id]}
	}
	cs[1].Seen += 5
	resp, err := h.Next(context.Background(), &wire.WatchNextReq{Session: c.session, Cursors: cs, Groups: true})
	if err != nil {
		t.Fatal(err)
	}
	ended := false
	for _, b := range resp.Subs {
		ended = ended || (b.ID == cs[1].ID && b.Ended != "")
	}
	if !ended {
		t.Fatalf("a cursor 5 runs ahead: answer %+v; want its subscription ended", resp)
	}
}

// TestPollTokenRefused: a poll naming a token other than its session's last answer's
// (an older one, one of another session, one of a session the node does not hold) is
// refused, saying to poll with the cursors; the token of the answer before is taken.
func TestPollTokenRefused(t *testing.T) {
	h, src := newTestHub(t, 0)
	c := &groupClient{t: t, h: h, session: 9, seen: map[uint64]uint64{}, got: map[uint64][]string{}, tokens: true}
	c.open(3)
	var tokens []uint64
	for i := range int64(8) {
		src.write(h, "k", 10*(i+1))
		c.caughtUp(int(i + 1))
		if c.token != 0 && !slices.Contains(tokens, c.token) {
			tokens = append(tokens, c.token)
		}
	}
	if len(tokens) < 2 || c.tokenPolls == 0 {
		t.Fatalf("tokens %v, %d polls by token; want several of each", tokens, c.tokenPolls)
	}
	for _, req := range []*wire.WatchNextReq{
		{Session: c.session, Token: tokens[0], Groups: true},
		{Session: c.session + 1, Token: c.token, Groups: true},
		{Session: c.session, Token: c.token}, // a client that takes no groups
	} {
		_, err := h.Next(context.Background(), req)
		if err == nil || !strings.Contains(err.Error(), "poll with the cursors") {
			t.Fatalf("poll %+v: err %v; want it refused, saying to poll with the cursors", req, err)
		}
	}
	src.write(h, "k", 100)
	resp, err := h.Next(context.Background(), &wire.WatchNextReq{Session: c.session, Token: c.token, Groups: true, WaitMillis: 1000})
	if err != nil || len(resp.Groups) != 1 || len(resp.Groups[0].IDs) != len(c.ids) || resp.Token == 0 {
		t.Fatalf("a poll by the last token: %+v, %v; want one group of %d and a token", resp, err, len(c.ids))
	}
}
