package rollup

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// quietHome is a home ("me") that the client calls directly, over a source of one
// hour of points three days ago, and the client's late mark of one of its points.
func quietHome(t *testing.T) (*Homes, *Client, []dht.Peer, *wire.RollupMarkReq) {
	t.Helper()
	q := quanta.Quantum(10)
	day, hour := int64(24*time.Hour), int64(time.Hour)
	t0 := agg.WindowStart(time.Now().UnixNano(), day) - 3*day
	homes := []dht.Peer{{ID: "me", RPCAddr: "127.0.0.1:1"}}
	src := &fakeSource{q: q, first: t0, last: t0 + hour - 1, homes: homes}
	cfg := Config{}.WithDefaults(q)
	r := NewHomes(cfg, src, Options{Quantum: q, ReadQuorum: 2, Self: "me"})
	// No RPC client: a call that went over the network would panic.
	c := NewClient(cfg, nil, time.Second, nil)
	c.ServeLocally("me", r)
	var pts series.Points
	pts.AppendFloat(t0+5, 1)
	req := c.LateMarks("k", &pts, time.Now())
	if req == nil {
		t.Fatal("a point three days old is not late")
	}
	return r, c, homes, req
}

// A late mark of a series a home holds nothing of is answered with a quiet period:
// the coordinator sends no other mark of the series to that home until it ends, the
// home pulls nothing of the series before it ends (even when a read adopts it at
// once), and a delete is sent all the same. The home that is this node is called, not
// reached over RPC.
func TestMarkQuietPeriod(t *testing.T) {
	r, c, homes, req := quietHome(t)
	ctx := context.Background()
	before := time.Now()
	if err := c.Mark(ctx, homes, req, 1); err != nil {
		t.Fatal(err)
	}
	r.qmu.Lock()
	first := r.quiet["k"]
	r.qmu.Unlock()
	if first.Before(before.Add(QuietPeriod)) {
		t.Fatalf("the home promised quiet until %v, want at least %v after the mark", first, QuietPeriod)
	}
	if err := c.Mark(ctx, homes, req, 1); err != nil {
		t.Fatal(err)
	}
	r.qmu.Lock()
	again := r.quiet["k"]
	r.qmu.Unlock()
	if !again.Equal(first) {
		t.Fatal("a second late mark inside the quiet period reached the home")
	}
	// A read adopts the series; its first pull waits for the promise.
	min, hour := int64(time.Minute), int64(time.Hour)
	t0 := agg.WindowStart(req.Starts[0], hour)
	readOf(t, r, "k", min, t0, t0+hour)
	if got := r.QuietUntil(); !got.Equal(first) {
		t.Fatalf("the adopted series is quiet until %v, want the promise's %v", got, first)
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.Stats().Pulls == 0 {
		passed := time.Now()
		if err := r.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		if r.Stats().Pulls != 0 && passed.Before(first) {
			t.Fatalf("a pass %v before the promised end pulled the series", first.Sub(passed))
		}
		if time.Now().After(deadline) {
			t.Fatal("no pull within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if known, _ := readOf(t, r, "k", min, t0, t0+hour); len(known) == 0 || r.Stats().Pulls == 0 {
		t.Fatalf("after the quiet period: %d pulls, known %v; want the hour pulled", r.Stats().Pulls, known)
	}
	// The series is held now: a late mark makes its window dirty and promises nothing.
	if err := c.Mark(ctx, homes, req, 1); err != nil {
		t.Fatal(err)
	}
	if r.series["k"].dirty[agg.WindowStart(req.Starts[0], min)] == 0 {
		t.Fatal("a late mark after the quiet period (the series held) did not reach the home")
	}
	// A delete is always sent.
	if err := c.Mark(ctx, homes, &wire.RollupMarkReq{Key: "k", From: t0, To: t0 + hour}, 1); err != nil {
		t.Fatal(err)
	}
	if r.series["k"] != nil {
		t.Fatal("a range delete from before the series' first window left the series held")
	}
}

// A mark that fewer than a quorum of homes acknowledged fails the write ("retry"),
// and remembers no quiet period: the retry marks again. This is what makes a late
// window be pulled again when a coordinator dies before its mark lands: the write was
// not acknowledged, and its retry marks.
func TestMarkUnreachedHomesFailTheWrite(t *testing.T) {
	r, _, homes, req := quietHome(t)
	cli := rpc.NewClient(rpc.NewMemNetwork().Transport(), rpc.Config{}) // nobody listens at "gone"'s address
	defer cli.Close()
	c := NewClient(r.cfg, cli, 200*time.Millisecond, nil)
	c.ServeLocally("me", r)
	far := append([]dht.Peer{{ID: "gone", RPCAddr: "127.0.0.1:1"}}, homes...)
	err := c.Mark(context.Background(), far, req, 2)
	if err == nil || !strings.Contains(err.Error(), "retry") {
		t.Fatalf("a mark one of two homes acknowledged: %v, want an error that says retry", err)
	}
	if n := c.quietAt("k", far, time.Now()); n != 1 {
		t.Fatalf("%d homes remembered quiet, want 1 (this node's, which answered)", n)
	}
	r.qmu.Lock()
	first := r.quiet["k"]
	r.qmu.Unlock()
	if err := c.Mark(context.Background(), far, req, 2); err == nil {
		t.Fatal("the retry succeeded with one of two homes")
	}
	r.qmu.Lock()
	again := r.quiet["k"]
	r.qmu.Unlock()
	if again.Equal(first) {
		t.Fatal("the retry of a failed mark was not sent")
	}
}

// A restarted home keeps what it promised before: its pull loop's first pass comes
// QuietPeriod after Start, however soon a read asks for a series.
func TestHomesFirstPassWaitsQuietPeriod(t *testing.T) {
	r, _, _, req := quietHome(t)
	start := time.Now()
	r.Start()
	defer r.Close()
	hour := int64(time.Hour)
	t0 := agg.WindowStart(req.Starts[0], hour)
	readOf(t, r, "k", int64(time.Minute), t0, t0+hour) // adopts k and kicks the loop
	deadline := time.Now().Add(10 * time.Second)
	for r.Stats().Pulls == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no pull within 10 s of Start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d := time.Since(start); d < QuietPeriod {
		t.Fatalf("the first pull came %v after Start, inside the quiet period %v", d, QuietPeriod)
	}
}

// A late mark of windows a home holds dirty already, with no pull started since their
// last mark, changes nothing and takes no exclusive lock; once a pull started, the
// next mark counts again, so that the pull does not settle the window.
func TestMarkOfDirtyWindowCoalesces(t *testing.T) {
	r, _, _, req := quietHome(t)
	hour, min := int64(time.Hour), int64(time.Minute)
	t0 := agg.WindowStart(req.Starts[0], hour)
	readOf(t, r, "k", min, t0, t0+hour) // adopts k: no quiet period was promised
	if err := r.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	w := agg.WindowStart(req.Starts[0], min)
	mark := func() uint64 {
		t.Helper()
		if _, err := r.Mark(req); err != nil {
			t.Fatal(err)
		}
		r.mu.RLock()
		defer r.mu.RUnlock()
		return r.seq
	}
	first := mark()
	if r.series["k"].dirty[w] != first {
		t.Fatalf("window dirty at %d, want the mark's %d", r.series["k"].dirty[w], first)
	}
	if again := mark(); again != first {
		t.Fatalf("a second mark of a window dirty since the last pull was applied again (seq %d → %d)", first, again)
	}
	if err := r.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if after := mark(); r.series["k"].dirty[w] != after || after <= r.series["k"].pullSeq {
		t.Fatalf("a mark after a pull: window dirty at %d, latest pull %d; want it dirty after the pull", r.series["k"].dirty[w], r.series["k"].pullSeq)
	}
}

// Quiet periods are bounded on both sides: a home promises at most MaxSeries at once,
// a coordinator remembers those of at most maxQuietSeries series; past either, late
// points are marked as before.
func TestQuietPeriodsBounded(t *testing.T) {
	cfg := Config{MaxSeries: 2}.WithDefaults(quanta.Quantum(10))
	r := NewHomes(cfg, nil, Options{Quantum: quanta.Quantum(10)})
	for i, want := range []int64{int64(QuietPeriod), int64(QuietPeriod), 0, int64(QuietPeriod)} {
		key := string(rune('a' + i))
		if i == 3 {
			key = "a" // promised already: renewed
		}
		resp, err := r.Mark(&wire.RollupMarkReq{Key: key, Starts: []int64{0}})
		if err != nil || resp.Quiet != want {
			t.Fatalf("mark %d (%s): quiet %v, %v; want %v", i, key, time.Duration(resp.Quiet), err, time.Duration(want))
		}
	}
	c := NewClient(cfg, nil, time.Second, nil)
	until := time.Now().Add(time.Hour)
	homes := []dht.Peer{{ID: "h"}}
	for i := range maxQuietSeries {
		c.keepQuiet(string(rune(i+1)), "h", until)
	}
	c.keepQuiet("new", "h", until)
	if n := c.quietAt("new", homes, time.Now()); n != 0 {
		t.Fatalf("past %d series the client remembered another", maxQuietSeries)
	}
	if n := c.quietAt(string(rune(1)), homes, time.Now()); n != 1 {
		t.Fatal("the client forgot a period that has not ended")
	}
}
