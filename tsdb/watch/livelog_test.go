package watch

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/wire"
)

// TestSharedLog: subscriptions of one series at different positions in its live log
// (keeping up, a few runs behind, opened later from the past, and one that stops
// polling) each get every point once, in order, a late point flagged and a duplicate
// dropped; the one that stopped is ended at its buffer, the others untouched.
func TestSharedLog(t *testing.T) {
	const buffer, writes = 64, 300
	h, src := newTestHub(t, buffer)
	var eager, lagging []*poller
	for range 10 {
		eager = append(eager, open(t, h, wire.WatchOpenReq{Series: "k", From: 1}))
		lagging = append(lagging, open(t, h, wire.WatchOpenReq{Series: "k", From: 1}))
	}
	slow := open(t, h, wire.WatchOpenReq{Series: "k", From: 1})
	for _, p := range append(append(slices.Clone(eager), lagging...), slow) {
		waitReady(t, h, p.id)
	}
	got := map[*poller][]string{}
	take := func(p *poller, want int) {
		t.Helper()
		ts, late := p.until(t, want)
		for i, x := range ts {
			got[p] = append(got[p], map[bool]string{true: "late ", false: ""}[late[i]]+fmt.Sprint(x))
		}
	}
	var later *poller
	var want []string
	for i := int64(1); i <= writes; i++ {
		src.write(h, "k", 10*i)
		want = append(want, fmt.Sprint(10*i))
		if i == 1 {
			take(slow, 1) // and then it polls no more
		}
		if i == 150 {
			src.write(h, "k", 755)  // late
			src.write(h, "k", 1000) // delivered already
			want = append(want, "late 755")
		}
		for _, p := range eager {
			take(p, 1+map[bool]int{true: 1}[i == 150])
		}
		if i%10 == 0 {
			for _, p := range lagging {
				take(p, 10+map[bool]int{true: 1}[i == 150])
			}
			if n := followers(h, "k"); i != 150 && n < len(eager) {
				t.Fatalf("after write %d, %d subscriptions follow the log; want at least the %d that keep up", i, n, len(eager))
			}
		}
		switch {
		case i == 200:
			later = open(t, h, wire.WatchOpenReq{Series: "k", From: 10 * 170}) // history within the buffer
			take(later, int(i)-170+1)
		case i > 200 && i%10 == 0:
			take(later, 10)
		}
	}
	for _, p := range append(slices.Clone(eager), lagging...) {
		if g := strings.Join(got[p], ","); g != strings.Join(want, ",") {
			t.Fatalf("subscription %d got\n%s\nwant\n%s", p.id, g, strings.Join(want, ","))
		}
	}
	var wantLater []string
	for i := int64(170); i <= writes; i++ {
		wantLater = append(wantLater, fmt.Sprint(10*i))
	}
	if g := strings.Join(got[later], ","); g != strings.Join(wantLater, ",") {
		t.Fatalf("the subscription opened later got\n%s\nwant\n%s", g, strings.Join(wantLater, ","))
	}
	if _, ended := slow.poll(t); !strings.Contains(ended, fmt.Sprintf("buffer of %d", buffer)) {
		t.Fatalf("the subscription that stopped polling: got %q, want it ended naming the buffer", ended)
	}
	if n := h.Subscriptions(); n != 2*len(eager)+1 {
		t.Fatalf("%d subscriptions open, want %d", n, 2*len(eager)+1)
	}
}

// TestPollGroups: the subscriptions of a session that follow one series' log get its
// runs as one group in a poll that asks for groups; each counts them in its Seen.
func TestPollGroups(t *testing.T) {
	h, src := newTestHub(t, 0)
	const session = 7
	var cursors []wire.WatchCursor
	for range 3 {
		id, err := h.Open(context.Background(), &wire.WatchOpenReq{Series: "k", From: 1, Session: session})
		if err != nil {
			t.Fatal(err)
		}
		waitReady(t, h, id)
		cursors = append(cursors, wire.WatchCursor{ID: id})
	}
	var grouped []uint64 // the subscriptions the third write reached in a group
	for i := int64(1); i <= 3; i++ {
		src.write(h, "k", i)
		got := 0
		deadline := time.Now().Add(10 * time.Second)
		for got < len(cursors) {
			if time.Now().After(deadline) {
				t.Fatalf("write %d reached %d of %d subscriptions in 10s", i, got, len(cursors))
			}
			resp, err := h.Next(context.Background(), &wire.WatchNextReq{Session: session, Cursors: cursors, WaitMillis: 200, Groups: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range resp.Subs {
				if b.Ended != "" {
					t.Fatal(b.Ended)
				}
				got++
				cursors[slices.IndexFunc(cursors, func(c wire.WatchCursor) bool { return c.ID == b.ID })].Seen = b.Seen
			}
			for _, g := range resp.Groups {
				for _, id := range g.IDs {
					got++
					cursors[slices.IndexFunc(cursors, func(c wire.WatchCursor) bool { return c.ID == id })].Seen += uint64(len(g.Runs))
					if i == 3 && g.Runs[0].Points.T[0] == 3 {
						grouped = append(grouped, id)
					}
				}
			}
		}
	}
	// The first write reached them before they followed the log, the second as they
	// joined it (their own runs); the third is the log's.
	if len(grouped) != len(cursors) {
		t.Fatalf("the third write reached subscriptions %v in groups; want all %d", grouped, len(cursors))
	}
	for _, c := range cursors {
		if c.Seen != 3 {
			t.Fatalf("cursors %+v; want 3 runs seen by each", cursors)
		}
	}
}

// followers counts the subscriptions that follow key's live log, in groups or not.
func followers(h *Hub, key string) int {
	h.mu.Lock() // before lg.mu, as Hub.forget takes them
	defer h.mu.Unlock()
	lg := h.logs[key]
	lg.mu.Lock()
	defer lg.mu.Unlock()
	n := len(lg.follow)
	for g := range lg.groups {
		n += len(g.members)
	}
	return n
}

// groupClient is a client of one session's subscriptions to one series, as
// tsdb/client polls them: every cursor in one poll, groups taken.
type groupClient struct {
	t       *testing.T
	h       *Hub
	session uint64
	ids     []uint64
	seen    map[uint64]uint64
	got     map[uint64][]string // "t", or "late t"
	groups  []int               // the sizes of the groups of the last answer not empty
	answers int                 // answers to a subscription
	inGroup int                 // answers to a subscription in a group of several
	// With tokens, a poll names the last answer's token instead of its cursors when
	// that answer had one, was taken whole and the subscriptions are those it named.
	tokens     bool
	token      uint64
	tokenIDs   []uint64
	tokenPolls int // polls that named a token
}

// open opens n subscriptions of "k" from 1 into the session, each past its history.
func (c *groupClient) open(n int) {
	c.t.Helper()
	for range n {
		id, err := c.h.Open(context.Background(), &wire.WatchOpenReq{Series: "k", From: 1, Session: c.session})
		if err != nil {
			c.t.Fatal(err)
		}
		waitReady(c.t, c.h, id)
		c.ids = append(c.ids, id)
	}
}

// poll polls once, waiting up to wait; the answers of the subscriptions in lose are
// lost on the way (their cursors stay where they were).
func (c *groupClient) poll(wait time.Duration, lose ...uint64) {
	c.t.Helper()
	req := &wire.WatchNextReq{Session: c.session, WaitMillis: wait.Milliseconds(), Groups: true}
	if c.token != 0 && slices.Equal(c.ids, c.tokenIDs) {
		req.Token = c.token
		c.tokenPolls++
	} else {
		for _, id := range c.ids {
			req.Cursors = append(req.Cursors, wire.WatchCursor{ID: id, Seen: c.seen[id]})
		}
	}
	resp, err := c.h.Next(context.Background(), req)
	if err != nil {
		c.t.Fatal(err)
	}
	c.token = 0
	if c.tokens && resp.Token != 0 && len(lose) == 0 && len(resp.Subs) == 0 {
		c.token, c.tokenIDs = resp.Token, slices.Clone(c.ids)
	}
	take := func(id uint64, runs []wire.WatchRun, seen uint64) {
		if slices.Contains(lose, id) {
			return
		}
		c.seen[id] = seen
		c.answers++
		for _, r := range runs {
			for _, x := range r.Points.T {
				c.got[id] = append(c.got[id], map[bool]string{true: "late ", false: ""}[r.Late]+fmt.Sprint(x))
			}
		}
	}
	for _, b := range resp.Subs {
		if b.Ended != "" {
			c.t.Fatalf("subscription %d: %s", b.ID, b.Ended)
		}
		take(b.ID, b.Runs, b.Seen)
	}
	if len(resp.Subs)+len(resp.Groups) > 0 {
		c.groups = c.groups[:0]
	}
	for _, g := range resp.Groups {
		c.groups = append(c.groups, len(g.IDs))
		if len(g.IDs) > 1 {
			c.inGroup += len(g.IDs)
		}
		for _, id := range g.IDs {
			take(id, g.Runs, c.seen[id]+uint64(len(g.Runs)))
		}
	}
}

// caughtUp polls until every subscription got n points, and then once more, which
// acknowledges them.
func (c *groupClient) caughtUp(n int, lose ...uint64) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for slices.ContainsFunc(c.ids, func(id uint64) bool { return !slices.Contains(lose, id) && len(c.got[id]) < n }) {
		if time.Now().After(deadline) {
			c.t.Fatalf("not every subscription got %d points in 10s", n)
		}
		c.poll(200*time.Millisecond, lose...)
	}
	c.poll(0, lose...)
}

// groupSizes returns the sizes of the groups following key's log, largest first.
func groupSizes(h *Hub, key string) []int {
	h.mu.Lock() // before lg.mu, as Hub.forget takes them
	defer h.mu.Unlock()
	lg := h.logs[key]
	lg.mu.Lock()
	defer lg.mu.Unlock()
	var n []int
	for g := range lg.groups {
		n = append(n, len(g.members))
	}
	slices.Sort(n)
	slices.Reverse(n)
	return n
}

// TestGroups: the subscriptions of one series in one session follow its log as one
// group, answered once per poll. One whose answer was lost leaves the group and
// rejoins it once caught up; a late point takes every one out of it (each flags
// it) and they rejoin; one cancelled leaves it; each gets every point once, in
// order. A group whose subscriber stops polling is ended at the buffer, each member.
func TestGroups(t *testing.T) {
	const n, buffer = 12, 64
	h, src := newTestHub(t, buffer)
	c := &groupClient{t: t, h: h, session: 5, seen: map[uint64]uint64{}, got: map[uint64][]string{}}
	c.open(n)
	var want []string
	write := func(ts ...int64) {
		src.write(h, "k", ts...)
		for _, x := range ts {
			want = append(want, fmt.Sprint(x))
		}
	}
	inOneGroup := func(when string, n int) {
		t.Helper()
		if g := groupSizes(h, "k"); !slices.Equal(g, []int{n}) {
			t.Fatalf("%s: groups of %v subscriptions; want one of %d", when, g, n)
		}
	}

	for i := int64(1); i <= 4; i++ {
		write(10 * i)
		c.caughtUp(len(want))
	}
	inOneGroup("caught up", n)
	write(50)
	c.caughtUp(len(want))
	if !slices.Equal(c.groups, []int{n}) {
		t.Fatalf("the last point was answered in groups of %v; want one of %d", c.groups, n)
	}

	// Two answers lost: those two ask again for what they had, get it on their own,
	// and rejoin.
	lost := c.ids[:2]
	write(60)
	c.caughtUp(len(want), lost...)
	if g := groupSizes(h, "k"); len(g) == 0 || g[0] < n-2 {
		t.Fatalf("after the two that lost an answer polled: groups %v; want the %d others still one", g, n-2)
	}
	write(70)
	c.caughtUp(len(want))
	inOneGroup("the two that lost an answer caught up", n)

	// A late point and a duplicate: every one leaves the log, flags the late point,
	// drops the duplicate, and rejoins.
	write(90)
	src.write(h, "k", 85)
	want = append(want, "late 85")
	src.write(h, "k", 90)
	write(100)
	c.caughtUp(len(want))
	write(110)
	c.caughtUp(len(want))
	write(120)
	c.caughtUp(len(want))
	inOneGroup("after the late point", n)

	// One cancelled leaves the group.
	gone := c.ids[n-1]
	if _, err := h.Next(context.Background(), &wire.WatchNextReq{Session: c.session, Cursors: []wire.WatchCursor{{ID: gone, Seen: c.seen[gone]}}, Close: true}); err != nil {
		t.Fatal(err)
	}
	c.ids = c.ids[:n-1]
	wantGone := slices.Clone(want)
	write(130)
	c.caughtUp(len(want))
	inOneGroup("one cancelled", n-1)

	for _, id := range c.ids {
		if g := strings.Join(c.got[id], ","); g != strings.Join(want, ",") {
			t.Fatalf("subscription %d got\n%s\nwant\n%s", id, g, strings.Join(want, ","))
		}
	}
	if g := strings.Join(c.got[gone], ","); g != strings.Join(wantGone, ",") {
		t.Fatalf("the subscription cancelled got\n%s\nwant\n%s", g, strings.Join(wantGone, ","))
	}

	// The subscriber stops polling: past the buffer, every member is ended.
	for i := range int64(buffer + 1) {
		src.write(h, "k", 1000+i)
	}
	deadline := time.Now().Add(10 * time.Second)
	for h.Subscriptions() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d subscriptions open 10s after their subscriber fell %d points behind", h.Subscriptions(), buffer+1)
		}
		var cs []wire.WatchCursor
		for _, id := range c.ids {
			cs = append(cs, wire.WatchCursor{ID: id, Seen: c.seen[id]}) // acknowledging nothing more
		}
		resp, err := h.Next(context.Background(), &wire.WatchNextReq{Session: c.session, Cursors: cs, WaitMillis: 200, Groups: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range resp.Subs {
			if b.Ended != "" && !strings.Contains(b.Ended, fmt.Sprintf("buffer of %d", buffer)) {
				t.Fatalf("subscription %d ended with %q; want the buffer named", b.ID, b.Ended)
			}
		}
	}
}

// TestGroupsConcurrent: sessions of one series' subscriptions polled while the series
// is written (in rounds, each after the subscribers caught up, as a paced writer's),
// late points among the writes, answers lost at random: each subscription gets
// every point once, in order, the late ones flagged, and most answers went to groups.
// The second session polls with tokens where it can (wire.WatchNextReq.Token).
func TestGroupsConcurrent(t *testing.T) {
	const sessions, perSession, writes, round = 3, 20, 300, 5
	h, src := newTestHub(t, 0)
	clients := make([]*groupClient, sessions)
	for i := range clients {
		c := &groupClient{t: t, h: h, session: uint64(100 + i), seen: map[uint64]uint64{}, got: map[uint64][]string{}, tokens: i == 1}
		c.open(perSession) // history read: every point is live, a late one flagged
		clients[i] = c
	}
	var want []string
	for i := int64(1); i <= writes; i++ {
		want = append(want, fmt.Sprint(10*i))
		if i%25 == 0 {
			want = append(want, fmt.Sprintf("late %d", 10*i-5))
		}
	}
	caught := make([]atomic.Int64, sessions) // the fewest points a subscription of each session got
	done := make(chan struct{})
	for i, c := range clients {
		go func() {
			defer func() { done <- struct{}{} }()
			rnd := rand.New(rand.NewPCG(c.session, 1))
			deadline := time.Now().Add(20 * time.Second)
			for caught[i].Load() < int64(len(want)) && time.Now().Before(deadline) {
				var lose []uint64
				for _, id := range c.ids {
					if rnd.IntN(20) == 0 {
						lose = append(lose, id)
					}
				}
				c.poll(50*time.Millisecond, lose...)
				least := len(want)
				for _, id := range c.ids {
					least = min(least, len(c.got[id]))
				}
				caught[i].Store(int64(least))
			}
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	written := 0
	for i := int64(1); i <= writes; i++ {
		src.write(h, "k", 10*i)
		written++
		if i%25 == 0 {
			src.write(h, "k", 10*i-5)
			written++
		}
		for i%round == 0 && slices.ContainsFunc(clients, func(c *groupClient) bool { return caught[c.session-100].Load() < int64(written) }) {
			if time.Now().After(deadline) {
				t.Fatalf("the subscribers did not catch up with %d points in 20s", written)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for range clients {
		<-done
	}
	for _, c := range clients {
		t.Logf("session %d: %d of %d answers in groups, %d polls by token", c.session, c.inGroup, c.answers, c.tokenPolls)
		if c.tokens && c.tokenPolls == 0 {
			t.Errorf("session %d polled with no token", c.session)
		}
		if c.inGroup < c.answers/2 {
			t.Errorf("session %d: %d of %d answers to subscriptions in groups of several; want most", c.session, c.inGroup, c.answers)
		}
		for _, id := range c.ids {
			if g := strings.Join(c.got[id], ","); g != strings.Join(want, ",") {
				t.Fatalf("subscription %d got\n%s\nwant\n%s", id, g, strings.Join(want, ","))
			}
		}
	}
}
