package watch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// memSource is a store of points in memory: what the hub reads history from.
type memSource struct {
	mu  sync.Mutex
	pts map[string][]int64
	// HistoryMany fails the series of failMany; bounds and many count the calls of
	// Bounds and HistoryMany.
	failMany     map[string]bool
	bounds, many atomic.Int32
	selected     []string // what the last Select answered
}

func (m *memSource) History(_ context.Context, key string, from, to int64) (series.Points, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var p series.Points
	p.Type = series.Float
	for _, t := range m.pts[key] {
		if t >= from && t < to {
			p.AppendFloat(t, float64(t))
		}
	}
	return p, nil
}

func (m *memSource) Bounds(_ context.Context, key string, from, to int64) (int64, int64, bool, error) {
	m.bounds.Add(1)
	p, _ := m.History(context.Background(), key, from, to)
	if p.Len() == 0 {
		return 0, 0, false, nil
	}
	return p.T[0], p.T[p.Len()-1], true, nil
}

func (m *memSource) HistoryMany(ctx context.Context, rs []Range, _ int) ([]RangeResult, error) {
	m.many.Add(1)
	out := make([]RangeResult, len(rs))
	for i, r := range rs {
		m.mu.Lock()
		fail := m.failMany[r.Key]
		m.mu.Unlock()
		if fail {
			out[i].Err = fmt.Errorf("%q: failed for the test", r.Key)
			continue
		}
		out[i].Points, _ = m.History(ctx, r.Key, r.From, r.To)
	}
	return out, nil
}

func (m *memSource) Select(_ context.Context, q catalog.Query, known func(string) bool) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var keys []string
	for k := range m.pts {
		if strings.HasPrefix(k, q.Prefix) && (known == nil || !known(k)) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	m.selected = keys
	return keys, nil
}

// write stores points and then tells the hub, as the coordinator's hook does.
func (m *memSource) write(h *Hub, key string, ts ...int64) {
	m.mu.Lock()
	var p series.Points
	p.Type = series.Float
	for _, t := range ts {
		i := sort.Search(len(m.pts[key]), func(i int) bool { return m.pts[key][i] >= t })
		if i == len(m.pts[key]) || m.pts[key][i] != t {
			m.pts[key] = append(m.pts[key][:i], append([]int64{t}, m.pts[key][i:]...)...)
		}
		p.AppendFloat(t, float64(t))
	}
	m.mu.Unlock()
	h.Stored(key, p)
}

func newTestHub(t *testing.T, buffer int) (*Hub, *memSource) {
	src := &memSource{pts: map[string][]int64{}}
	h := New(Config{Self: "self", Peers: func() []string { return []string{"self"} }, Source: src,
		Call:      func(context.Context, string, string, any, any) error { return errors.New("no other node") },
		MaxFuture: time.Minute, Buffer: buffer})
	t.Cleanup(h.Close)
	return h, src
}

// poller long-polls one subscription.
type poller struct {
	h       *Hub
	session uint64
	id      uint64
	seen    uint64
}

func (p *poller) next(t *testing.T) []wire.WatchRun {
	t.Helper()
	runs, ended := p.poll(t)
	if ended != "" {
		t.Fatal(ended)
	}
	return runs
}

// poll polls once and returns the runs, or why the subscription ended.
func (p *poller) poll(t *testing.T) ([]wire.WatchRun, string) {
	t.Helper()
	resp, err := p.h.Next(context.Background(), &wire.WatchNextReq{Session: p.session, Cursors: []wire.WatchCursor{{ID: p.id, Seen: p.seen}}, WaitMillis: 200})
	if err != nil {
		t.Fatal(err)
	}
	var runs []wire.WatchRun
	for _, b := range resp.Subs {
		if b.ID != p.id {
			t.Fatalf("a batch of subscription %d in the poll of %d", b.ID, p.id)
		}
		if b.Ended != "" {
			return nil, b.Ended
		}
		p.seen = b.Seen
		runs = append(runs, b.Runs...)
	}
	return runs, ""
}

// open opens a subscription in a session of its own.
func open(t *testing.T, h *Hub, req wire.WatchOpenReq) *poller {
	t.Helper()
	req.Session = rand.Uint64()
	id, err := h.Open(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	return &poller{h: h, session: req.Session, id: id}
}

// until polls until want points (late or not) came, and returns their times and
// which were late.
func (p *poller) until(t *testing.T, want int) (ts []int64, late []bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(ts) < want {
		if time.Now().After(deadline) {
			t.Fatalf("got %d points of %d in 10s", len(ts), want)
		}
		for _, r := range p.next(t) {
			for _, x := range r.Points.T {
				ts = append(ts, x)
				late = append(late, r.Late)
			}
		}
	}
	return ts, late
}

// TestSeam: points written while a subscription opens and reads its history are
// delivered each once, in order, none flagged late.
func TestSeam(t *testing.T) {
	h, src := newTestHub(t, 0)
	const n = 3000
	started := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := int64(1); i <= n; i++ {
			src.write(h, "k", i)
			if i == n/3 {
				close(started)
			}
		}
	}()
	<-started
	p := open(t, h, wire.WatchOpenReq{Series: "k", From: 1})
	ts, late := p.until(t, n)
	<-done
	for i := range ts {
		if ts[i] != int64(i+1) || late[i] {
			t.Fatalf("point %d: t=%d late=%v; want t=%d, not late", i, ts[i], late[i], i+1)
		}
	}
	if extra := p.next(t); len(extra) != 0 {
		t.Fatalf("after every point, %d more runs: %v", len(extra), extra)
	}
}

// TestSeamDelayedNotification: a notification that reaches the hub after the history
// already delivered its points, and a thousand newer ones (it waited in a sender's
// queue), is a duplicate, not a late point; a point stored after the history was read
// still comes, flagged late.
func TestSeamDelayedNotification(t *testing.T) {
	h, src := newTestHub(t, 0)
	var pts series.Points
	pts.Type = series.Float
	src.mu.Lock()
	for i := int64(1); i <= 2000; i++ {
		if i%2 == 0 { // even times stored, their notification held back
			src.pts["k"] = append(src.pts["k"], i)
			pts.AppendFloat(i, float64(i))
		}
	}
	src.mu.Unlock()
	p := open(t, h, wire.WatchOpenReq{Series: "k", From: 1})
	if ts, _ := p.until(t, 1000); ts[0] != 2 || ts[999] != 2000 {
		t.Fatalf("history %d…%d, want 2…2000", ts[0], ts[999])
	}
	h.Stored("k", pts)      // the held-back notification: every point a duplicate
	src.write(h, "k", 501)  // stored after the history was read: late
	src.write(h, "k", 2001) // new
	ts, late := p.until(t, 2)
	if len(ts) != 2 || ts[0] != 501 || !late[0] || ts[1] != 2001 || late[1] {
		t.Fatalf("after the history: %d points (first %v, late %v), want [501 2001] [true false]", len(ts), ts[:min(4, len(ts))], late[:min(4, len(late))])
	}
	if extra := p.next(t); len(extra) != 0 {
		t.Fatalf("%d more runs: %v", len(extra), extra)
	}
}

// TestLateAndDuplicate: a point older than the newest delivered comes flagged late; a
// point delivered already is not delivered again; a point before the start is not
// delivered.
func TestLateAndDuplicate(t *testing.T) {
	h, src := newTestHub(t, 0)
	src.write(h, "k", 10, 20)
	p := open(t, h, wire.WatchOpenReq{Series: "k", From: 5})
	if ts, _ := p.until(t, 2); ts[0] != 10 || ts[1] != 20 {
		t.Fatalf("history %v, want [10 20]", ts)
	}
	src.write(h, "k", 20)     // again: a duplicate
	src.write(h, "k", 1)      // before the start
	src.write(h, "k", 15, 30) // one late, one new
	var got []string
	for _, r := range p.next(t) {
		for _, x := range r.Points.T {
			got = append(got, map[bool]string{true: "late ", false: ""}[r.Late]+strconv.FormatInt(x, 10))
		}
	}
	if strings.Join(got, ",") != "late 15,30" {
		t.Fatalf("got %q, want \"late 15,30\"", strings.Join(got, ","))
	}
}

// TestSlowSubscriber: a subscriber that falls past its buffer is ended with
// CodeWatchResume; writers never wait for it.
func TestSlowSubscriber(t *testing.T) {
	h, src := newTestHub(t, 100)
	p := open(t, h, wire.WatchOpenReq{Series: "k", From: 0})
	waitReady(t, h, p.id)
	for i := int64(1); i <= 200; i++ {
		src.write(h, "k", i)
	}
	// The points reach the subscription after the writes return (the hub's own
	// sender): poll, acknowledging nothing, until it ends.
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := h.Next(context.Background(), &wire.WatchNextReq{Session: p.session, Cursors: []wire.WatchCursor{{ID: p.id}}, WaitMillis: 200})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Subs) > 0 && resp.Subs[0].Ended != "" {
			if !strings.Contains(resp.Subs[0].Ended, "buffer of 100") {
				t.Fatalf("got %q, want the subscription ended naming the buffer", resp.Subs[0].Ended)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the subscription 100 points behind was not ended in 10s")
		}
	}
	if n := h.Subscriptions(); n != 0 {
		t.Fatalf("%d subscriptions left", n)
	}
}

// waitReady waits until subscription id has read its (empty) history.
func waitReady(t testing.TB, h *Hub, id uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if ready(h, id) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("history not read in 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// ready reports whether subscription id has read its history.
func ready(h *Hub, id uint64) bool {
	h.mu.Lock()
	s := h.subs[id]
	h.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ks := range s.keys {
		if !ks.ready {
			return false
		}
	}
	return true
}

// TestLostNotification: a gap in a coordinator's numbering ends the subscriptions,
// so that their subscribers catch up from the store.
func TestLostNotification(t *testing.T) {
	h, _ := newTestHub(t, 0)
	p := open(t, h, wire.WatchOpenReq{Series: "k", From: 0})
	h.Notify(&wire.WatchNotifyReq{From: "c", Epoch: 7, Seq: 1})
	h.Notify(&wire.WatchNotifyReq{From: "c", Epoch: 7, Seq: 3})
	if _, ended := p.poll(t); !strings.Contains(ended, "lost 1 notifications") {
		t.Fatalf("got %q, want the subscription ended naming the lost notification", ended)
	}
	if _, ended := p.poll(t); !strings.Contains(ended, "not open") {
		t.Fatalf("polled again: got %q, want \"not open\"", ended)
	}
}

// TestPrefixAndResume: a prefix subscription delivers every series under it, and
// After resumes each series after the point given.
func TestPrefixAndResume(t *testing.T) {
	h, src := newTestHub(t, 0)
	src.write(h, "a/1", 1, 2, 3)
	src.write(h, "a/2", 1, 2, 3)
	src.write(h, "b/1", 1, 2, 3)
	p := open(t, h, wire.WatchOpenReq{Prefix: "a/", From: 0, After: map[string]int64{"a/1": 2}})
	if ts, _ := p.until(t, 4); len(ts) != 4 {
		t.Fatalf("got %v, want a/1's 3 and a/2's 1 2 3", ts)
	}
	if _, err := h.Open(context.Background(), &wire.WatchOpenReq{Prefix: "a/", Series: "a/1"}); err == nil {
		t.Fatal("a subscription by both a prefix and a key was opened")
	}
}

// TestReselectAsksForWhatIsNew: a prefix subscription looked at again asks its source
// for the series it does not watch yet (the source then reads no entry of the others)
// and delivers a series that came under the prefix, its history first.
func TestReselectAsksForWhatIsNew(t *testing.T) {
	h, src := newTestHub(t, 0)
	src.write(h, "a/1", 1, 2)
	src.write(h, "a/2", 1, 2)
	p := open(t, h, wire.WatchOpenReq{Prefix: "a/", From: 0})
	if ts, _ := p.until(t, 4); len(ts) != 4 {
		t.Fatalf("got %v, want a/1's and a/2's 1 2", ts)
	}
	src.mu.Lock()
	src.pts["a/3"] = []int64{5, 6}
	src.mu.Unlock()
	h.reselect()
	src.mu.Lock()
	asked := slices.Clone(src.selected)
	src.mu.Unlock()
	if !slices.Equal(asked, []string{"a/3"}) {
		t.Fatalf("looked at again, the selection answered %q; want only the new a/3", asked)
	}
	if ts, _ := p.until(t, 2); !slices.Equal(ts, []int64{5, 6}) {
		t.Fatalf("the new series delivered %v, want its history 5 6", ts)
	}
}

// TestSession: one poll serves every subscription of its session, those opened while
// it waits included; Close ends those it lists.
func TestSession(t *testing.T) {
	h, src := newTestHub(t, 0)
	a, err := h.Open(context.Background(), &wire.WatchOpenReq{Series: "a", Session: 9})
	if err != nil {
		t.Fatal(err)
	}
	polled := make(chan *wire.WatchNextResp)
	go func() {
		resp, _ := h.Next(context.Background(), &wire.WatchNextReq{Session: 9, Cursors: []wire.WatchCursor{{ID: a}}, WaitMillis: 5000})
		polled <- resp
	}()
	b, err := h.Open(context.Background(), &wire.WatchOpenReq{Series: "b", Session: 9})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !ready(h, b) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	src.write(h, "b", 1)
	resp := <-polled
	if len(resp.Subs) != 1 || resp.Subs[0].ID != b || len(resp.Subs[0].Runs) != 1 {
		t.Fatalf("the waiting poll answered %+v; want subscription %d's point", resp.Subs, b)
	}
	if _, err := h.Next(context.Background(), &wire.WatchNextReq{Session: 9, Cursors: []wire.WatchCursor{{ID: a}, {ID: b}}, Close: true}); err != nil {
		t.Fatal(err)
	}
	if n := h.Subscriptions(); n != 0 {
		t.Fatalf("%d subscriptions left after Close", n)
	}
}

// TestStoredUnwatched: a write of a series nobody watches, while others are, allocates
// nothing on the write path.
func TestStoredUnwatched(t *testing.T) {
	h, _ := newTestHub(t, 0)
	if _, err := h.Open(context.Background(), &wire.WatchOpenReq{Series: "watched", From: 0}); err != nil {
		t.Fatal(err)
	}
	p := series.Points{Type: series.Float, T: []int64{1}, F: []float64{1}}
	if n := testing.AllocsPerRun(100, func() { h.Stored("unwatched", p) }); n != 0 {
		t.Fatalf("a write of an unwatched series allocated %v times", n)
	}
}

// BenchmarkStoredUnwatched is what a write of a series nobody watches costs the
// write path while other series are watched.
func BenchmarkStoredUnwatched(b *testing.B) {
	src := &memSource{pts: map[string][]int64{}}
	h := New(Config{Self: "self", Peers: func() []string { return []string{"self"} }, Source: src, MaxFuture: time.Minute})
	defer h.Close()
	if _, err := h.Open(context.Background(), &wire.WatchOpenReq{Series: "watched", From: 0}); err != nil {
		b.Fatal(err)
	}
	p := series.Points{Type: series.Float, T: []int64{1}, F: []float64{1}}
	b.ReportAllocs()
	for b.Loop() {
		h.Stored("unwatched", p)
	}
}

// TestStoredDoesNotWait: the write hook returns while this node's own subscribers
// cannot take points (their subscription is held): their delivery is off the write's
// path, and the points arrive once it is free.
func TestStoredDoesNotWait(t *testing.T) {
	h, src := newTestHub(t, 0)
	p := open(t, h, wire.WatchOpenReq{Series: "k", From: 0})
	waitReady(t, h, p.id)
	h.mu.Lock()
	s := h.subs[p.id]
	h.mu.Unlock()
	s.mu.Lock() // a subscriber's work that takes long
	wrote := make(chan struct{})
	go func() {
		src.write(h, "k", 1, 2, 3)
		close(wrote)
	}()
	select {
	case <-wrote:
	case <-time.After(10 * time.Second):
		s.mu.Unlock()
		t.Fatal("the write waited for its subscriber")
	}
	s.mu.Unlock()
	if ts, _ := p.until(t, 3); len(ts) != 3 || ts[0] != 1 || ts[2] != 3 {
		t.Fatalf("got %v, want 1 2 3", ts)
	}
}

// gatedSource is a memSource whose Bounds waits until the test takes its key from
// asks: a store slow to answer, each read let through by the test, which sees the
// order the series are read in. waiting counts the reads waiting for it.
type gatedSource struct {
	*memSource
	asks    chan string
	waiting *atomic.Int32
}

func (g gatedSource) Bounds(ctx context.Context, key string, from, to int64) (int64, int64, bool, error) {
	g.waiting.Add(1) // less one by the test as it takes the key
	select {
	case g.asks <- key:
	case <-ctx.Done():
		g.waiting.Add(-1)
		return 0, 0, false, ctx.Err()
	}
	return g.memSource.Bounds(ctx, key, from, to)
}

// HistoryMany fails: the subscription reads each series alone, through Bounds.
func (g gatedSource) HistoryMany(context.Context, []Range, int) ([]RangeResult, error) {
	return nil, errors.New("no batched reads in this test")
}

// TestHistoryOfLiveSeriesFirst: of a subscription to many series whose history reads
// are slow (and whose batched read failed: each is read alone), a series written
// meanwhile is read next, so that its live point comes
// after a few reads, not after every series' history.
func TestHistoryOfLiveSeriesFirst(t *testing.T) {
	src := &memSource{pts: map[string][]int64{}}
	for i := range 200 {
		src.pts[fmt.Sprintf("a/%03d", i)] = []int64{1}
	}
	g := gatedSource{src, make(chan string), new(atomic.Int32)}
	h := New(Config{Self: "self", Peers: func() []string { return []string{"self"} }, Source: g,
		Call: func(context.Context, string, string, any, any) error { return errors.New("no other node") }, MaxFuture: time.Minute})
	t.Cleanup(h.Close)
	p := open(t, h, wire.WatchOpenReq{Prefix: "a/", From: 10})
	src.write(h, "a/199", 20)
	deadline := time.Now().Add(10 * time.Second)
	for !pending(h, p.id, "a/199") {
		if time.Now().After(deadline) {
			t.Fatal("the live point of a/199 did not reach the subscription in 10s")
		}
		time.Sleep(time.Millisecond)
	}
	// The readers hold the first series. One read is let through at a time, once
	// every reader waits again (so that which series a reader takes next does not
	// depend on which reader runs first): the reader let through first takes a/199.
	var read []string
	for !slices.Contains(read, "a/199") {
		if len(read) > historyReaders {
			t.Fatalf("series read %v: a/199, whose live point waits, not read after the first %d", read, historyReaders)
		}
		for g.waiting.Load() < historyReaders {
			if time.Now().After(deadline) {
				t.Fatalf("series read %v; %d readers wait, want %d", read, g.waiting.Load(), historyReaders)
			}
			time.Sleep(time.Millisecond)
		}
		read = append(read, <-g.asks)
		g.waiting.Add(-1)
	}
	ts, _ := p.until(t, 1)
	if len(ts) != 1 || ts[0] != 20 {
		t.Fatalf("got %v, want a/199's point 20", ts)
	}
}

// pending reports whether live points of key wait for its history in subscription id.
func pending(h *Hub, id uint64, key string) bool {
	h.mu.Lock()
	s := h.subs[id]
	h.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys[key].pending) > 0
}

// BenchmarkFanOut is what one notification of one point costs the node serving 1,000
// subscriptions to its series, in 10 sessions of 100 (as BenchmarkWatch's
// subscribers): the delivery to each, and each session's poll decoded, taking it
// and its answer encoded (grouped, as the client asks). cursors: each poll names its
// 100 cursors; tokens: each names its answer before's token (wire.WatchNextReq.Token)
// once it has one, as the client does. The polls' encoding (the client's) is timed too.
func BenchmarkFanOut(b *testing.B) {
	for _, tokens := range []bool{false, true} {
		b.Run(map[bool]string{false: "cursors", true: "tokens"}[tokens], func(b *testing.B) { benchFanOut(b, tokens) })
	}
}

func benchFanOut(b *testing.B, tokens bool) {
	src := &memSource{pts: map[string][]int64{}}
	h := New(Config{Self: "self", Peers: func() []string { return []string{"self"} }, Source: src, MaxFuture: time.Minute})
	defer h.Close()
	const sessions, perSession = 10, 100
	cursors := make([][]wire.WatchCursor, sessions)
	token := make([]uint64, sessions)
	at := map[uint64]int{} // each subscription's place in its session's cursors
	for s := range sessions {
		for range perSession {
			id, err := h.Open(context.Background(), &wire.WatchOpenReq{Series: "k", From: 1, Session: uint64(s + 1)})
			if err != nil {
				b.Fatal(err)
			}
			at[id] = len(cursors[s])
			cursors[s] = append(cursors[s], wire.WatchCursor{ID: id})
		}
	}
	for s := range sessions {
		for _, c := range cursors[s] {
			waitReady(b, h, c.ID)
		}
	}
	var buf, body []byte
	var req wire.WatchNextReq // decoded into, as the node's pooled requests
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p := series.Points{Type: series.Float, T: []int64{int64(i) + 10}, F: []float64{1}}
		h.Notify(&wire.WatchNotifyReq{From: "c", Epoch: 1, Seq: uint64(i) + 1, Runs: []wire.WatchRun{{Key: "k", Points: p}}})
		for s := range sessions {
			poll := &wire.WatchNextReq{Session: uint64(s + 1), Cursors: cursors[s], Groups: true}
			if token[s] != 0 {
				poll.Cursors, poll.Token = nil, token[s]
			}
			body = wire.AppendWatchNextReq(body[:0], poll)
			if err := wire.DecodeWatchNextReq(body, &req); err != nil {
				b.Fatal(err)
			}
			resp, err := h.Next(context.Background(), &req)
			if err != nil {
				b.Fatal(err)
			}
			n := len(resp.Subs)
			for _, bt := range resp.Subs {
				cursors[s][at[bt.ID]].Seen = bt.Seen
			}
			for _, g := range resp.Groups {
				n += len(g.IDs)
				for _, id := range g.IDs {
					cursors[s][at[id]].Seen += uint64(len(g.Runs))
				}
			}
			if n != perSession {
				b.Fatalf("session %d: %d subscriptions answered, want %d", s, n, perSession)
			}
			if tokens && len(resp.Subs) == 0 {
				token[s] = resp.Token
			} else {
				token[s] = 0
			}
			buf = wire.AppendWatchNextResp(buf[:0], resp)
		}
	}
}

// TestPollMemo: a session's poll finds its subscriptions by their place in its last
// poll (session.last); a subscription closed since, cursors in another order, fewer
// or more of them are each answered as if looked up afresh.
func TestPollMemo(t *testing.T) {
	h, src := newTestHub(t, 0)
	var ids []uint64
	for range 3 {
		id, err := h.Open(context.Background(), &wire.WatchOpenReq{Series: "k", From: 1, Session: 7})
		if err != nil {
			t.Fatal(err)
		}
		waitReady(t, h, id)
		ids = append(ids, id)
	}
	src.write(h, "k", 1)
	poll := func(ids ...uint64) map[uint64]string {
		t.Helper()
		cs := make([]wire.WatchCursor, len(ids))
		for i, id := range ids {
			cs[i] = wire.WatchCursor{ID: id}
		}
		resp, err := h.Next(context.Background(), &wire.WatchNextReq{Session: 7, Cursors: cs, WaitMillis: 5000})
		if err != nil {
			t.Fatal(err)
		}
		got := map[uint64]string{}
		for _, b := range resp.Subs {
			if b.Ended != "" {
				got[b.ID] = "ended"
			} else if len(b.Runs) > 0 {
				got[b.ID] = "runs"
			}
		}
		return got
	}
	// A poll answers what is ready when it is asked: the point may reach the three
	// subscriptions a moment apart, so the first polls are asked until each has had it
	// (the cursors acknowledge nothing, so a poll hands again what the last one did).
	seen := map[uint64]string{}
	for deadline := time.Now().Add(5 * time.Second); len(seen) < 3; {
		for id, s := range poll(ids...) {
			seen[id] = s
		}
		if time.Now().After(deadline) {
			t.Fatalf("first polls: %v, want runs for all 3", seen)
		}
	}
	if seen[ids[0]] != "runs" || seen[ids[1]] != "runs" || seen[ids[2]] != "runs" {
		t.Fatalf("first polls: %v, want runs for all 3", seen)
	}
	if _, err := h.Next(context.Background(), &wire.WatchNextReq{Session: 7, Close: true, Cursors: []wire.WatchCursor{{ID: ids[1]}}}); err != nil {
		t.Fatal(err)
	}
	if got := poll(ids...); got[ids[1]] != "ended" || got[ids[0]] != "runs" || got[ids[2]] != "runs" {
		t.Fatalf("after closing %d: %v, want it ended and the others' runs", ids[1], got)
	}
	if got := poll(ids[2], ids[0]); len(got) != 2 || got[ids[0]] != "runs" || got[ids[2]] != "runs" {
		t.Fatalf("reordered: %v, want runs for %d and %d", got, ids[2], ids[0])
	}
	if got := poll(ids[2], ids[1], ids[0]); got[ids[1]] != "ended" || got[ids[0]] != "runs" {
		t.Fatalf("a closed one in the middle: %v", got)
	}
}

// TestPollLinger: a poll that lingers (wire.WatchNextReq.LingerMillis) is answered no
// sooner than its linger after the session's previous answer, with every point
// written meanwhile in one answer; a point that comes after a quiet spell of the
// linger is answered at once; each point once, in order.
func TestPollLinger(t *testing.T) {
	h, src := newTestHub(t, 0)
	const linger = wire.MaxWatchLingerMillis * time.Millisecond
	p := open(t, h, wire.WatchOpenReq{Series: "a"})
	waitReady(t, h, p.id)
	lingering := func() ([]int64, time.Time) {
		t.Helper()
		resp, err := h.Next(context.Background(), &wire.WatchNextReq{Session: p.session, Cursors: []wire.WatchCursor{{ID: p.id, Seen: p.seen}},
			WaitMillis: 5000, LingerMillis: linger.Milliseconds()})
		at := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Subs) != 1 || resp.Subs[0].Ended != "" {
			t.Fatalf("answer %+v: want one batch of subscription %d", resp.Subs, p.id)
		}
		p.seen = resp.Subs[0].Seen
		var ts []int64
		for _, r := range resp.Subs[0].Runs {
			ts = append(ts, r.Points.T...)
		}
		return ts, at
	}
	src.write(h, "a", 1)
	ts, first := lingering() // the session's first answer: nothing to linger after
	if !slices.Equal(ts, []int64{1}) {
		t.Fatalf("first answer %v, want [1]", ts)
	}
	src.write(h, "a", 2)
	got := make(chan []int64, 1)
	at := make(chan time.Time, 1)
	go func() {
		ts, when := lingering()
		got <- ts
		at <- when
	}()
	src.write(h, "a", 3)
	src.write(h, "a", 4)
	if ts := <-got; !slices.Equal(ts, []int64{2, 3, 4}) {
		t.Fatalf("lingered answer %v, want [2 3 4] in one answer", ts)
	}
	second := <-at
	if d := second.Sub(first); d < linger {
		t.Fatalf("answered %v after the previous answer, within the linger of %v", d, linger)
	}
	// A quiet spell of the linger: the next point is answered at once.
	go func() {
		ts, when := lingering()
		got <- ts
		at <- when
	}()
	for time.Since(second) < linger+50*time.Millisecond {
		time.Sleep(5 * time.Millisecond)
	}
	wrote := time.Now()
	src.write(h, "a", 5)
	if ts := <-got; !slices.Equal(ts, []int64{5}) {
		t.Fatalf("answer after a quiet spell %v, want [5]", ts)
	}
	if d := (<-at).Sub(wrote); d >= linger {
		t.Fatalf("a point after a quiet spell answered %v after its write: it lingered", d)
	}
}
