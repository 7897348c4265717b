package watch

import (
	"context"
	"fmt"
	"slices"
	"strings"
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
