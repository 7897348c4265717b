package coord

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// fakeClock is a pacer's clock that moves only when told.
type fakeClock struct{ t time.Time }

func (f *fakeClock) now() time.Time      { return f.t }
func (f *fakeClock) add(d time.Duration) { f.t = f.t.Add(d) }
func pacedBy(share float64, burst time.Duration) (*pacer, *fakeClock) {
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	p := newPacer(share, burst)
	p.now = clk.now
	return p, clk
}

// TestPacerBoundsShare runs pages of several lengths back to back, each waiting as
// the pacer says, on a clock of its own: whatever the pages take, the time they are
// charged stays within the burst plus share of the time that passed (plus the last
// page, which is charged after it ran).
func TestPacerBoundsShare(t *testing.T) {
	for _, tc := range []struct {
		share float64
		burst time.Duration
		page  time.Duration
	}{
		{0.25, 250 * time.Millisecond, 3 * time.Millisecond},
		{0.25, 250 * time.Millisecond, 400 * time.Millisecond}, // pages longer than the burst
		{0.5, 0, time.Millisecond},
		{1, time.Second, 7 * time.Millisecond},
	} {
		p, clk := pacedBy(tc.share, tc.burst)
		start := clk.now()
		var waited time.Duration
		for range 2000 {
			w := p.wait()
			waited += w
			clk.add(w)
			clk.add(tc.page)
			p.charge(tc.page)
			elapsed := clk.now().Sub(start)
			if bound := tc.burst + time.Duration(tc.share*float64(elapsed)) + tc.page; p.spent > bound {
				t.Fatalf("share %.2f burst %v pages of %v: %v charged after %v, more than the bound %v",
					tc.share, tc.burst, tc.page, p.spent, elapsed, bound)
			}
		}
		if tc.share < 1 && waited == 0 {
			t.Errorf("share %.2f burst %v pages of %v: pages never waited", tc.share, tc.burst, tc.page)
		}
		if tc.share == 1 && waited > tc.page {
			t.Errorf("share 1: pages waited %v", waited)
		}
	}
}

// TestPacerBurst: pages within the burst run at once; the first beyond it waits for
// its debt to be earned back at the share; idle time refills the burst, no further.
func TestPacerBurst(t *testing.T) {
	p, clk := pacedBy(0.25, 100*time.Millisecond)
	for range 10 {
		if w := p.wait(); w != 0 {
			t.Fatalf("a page within the burst waits %v", w)
		}
		p.charge(10 * time.Millisecond)
	}
	p.charge(10 * time.Millisecond) // 10 ms over
	if w := p.wait(); w != 40*time.Millisecond {
		t.Fatalf("10 ms over the burst at a quarter: waits %v, want 40ms", w)
	}
	clk.add(40 * time.Millisecond)
	if w := p.wait(); w != 0 {
		t.Fatalf("after the debt is earned back: waits %v", w)
	}
	clk.add(time.Hour) // refills the burst, not an hour's worth
	p.charge(110 * time.Millisecond)
	if w := p.wait(); w != 40*time.Millisecond {
		t.Fatalf("after an idle hour, 110 ms at once: waits %v, want 40ms (the burst is 100 ms)", w)
	}
}

// TestLongTurnPage: a long read's page asks its replicas one request at a time, paced
// or not; a short read's ReadConcurrency at once; on a contended node (another long
// read waits for its turn) a page is charged its time, and one whose wait outlasts
// its deadline is refused with wire.CodeUnavailable, saying why and what to do.
func TestLongTurnPage(t *testing.T) {
	c := &Coordinator{cfg: Config{ReadConcurrency: 16}, longReads: make(chan struct{}, MaxLongReads)}
	var clk *fakeClock
	c.longPace, clk = pacedBy(0.25, 100*time.Millisecond)
	c.longPace.waiting.Add(1) // another long read waits: the node is contended throughout
	limit := func(turn *longTurn, ctx context.Context) (n int, err error) {
		err = turn.page(ctx, func(ctx context.Context, b *pageBufs) error {
			n = c.fetchLimit(b)
			clk.add(20 * time.Millisecond) // the page's work
			return nil
		})
		return n, err
	}
	ctx := context.Background()
	if n, err := limit(nil, ctx); err != nil || n != 16 {
		t.Fatalf("a short read's page: limit %d, %v", n, err)
	}
	begin := clk.now()
	turn, err := c.longRead(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer turn.release()
	for range 5 { // within the burst, 100 ms
		if n, err := limit(turn, ctx); err != nil || n != 1 {
			t.Fatalf("a long read's page within the burst: limit %d, %v", n, err)
		}
	}
	if c.longPace.spent != 100*time.Millisecond || clk.now().Sub(begin) != 100*time.Millisecond {
		t.Fatalf("charged %v in all, %v of it by the long read", c.longPace.spent, clk.now().Sub(begin))
	}
	c.longPace.credit = -time.Millisecond // 1 ms in debt: the next page waits 4 ms (real time)
	if n, err := limit(turn, ctx); err != nil || n != 1 {
		t.Fatalf("a paced page: limit %d, %v; want 1", n, err)
	}
	c.longPace.charge(time.Hour)
	dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	ran := false
	err = turn.page(dctx, func(context.Context, *pageBufs) error { ran = true; return nil })
	var re *rpc.RemoteError
	if !errors.As(err, &re) || re.Code != wire.CodeUnavailable || ran {
		t.Fatalf("a page that cannot start before its deadline: ran %v, %v; want %s", ran, err, wire.CodeUnavailable)
	}
}

// TestLongReadPaced reads a long range through a node whose long reads may take half
// its time with no burst, while a writer stores a point after another through it: the
// read is served whole, its pages waited for the share, and the time its pages took
// stays within half the time the read took (plus a page).
func TestLongReadPaced(t *testing.T) {
	c := oneNode(t, nil)
	var err error
	q := int64(c.cfg.Quantum) * int64(time.Second)
	to := time.Now().UnixNano() / q * q
	var pts series.Points
	for i := range int64(8) {
		pts.AppendFloat(to-i*ReadPageQuanta*q-q/2, float64(i))
	}
	if _, err := c.Put(context.Background(), "paced", pts, wire.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	c.longPace = newPacer(0.5, 0)
	stop := writeBeside(t, c, to)
	start := time.Now()
	res, err := c.Get(context.Background(), "paced", to-8*ReadPageQuanta*q, to, wire.GetOptions{})
	took := time.Since(start)
	stop()
	if err != nil || res.Points.Len() != 8 {
		t.Fatalf("paced read: %d points, %v", res.Points.Len(), err)
	}
	spent, held, _ := c.longPace.paced()
	if spent == 0 || held == 0 {
		t.Fatalf("8 pages beside a writer: %v charged, held back %v; want both above 0 (the share applies)", spent, held)
	}
	if spent > took/2+spent/8 {
		t.Fatalf("8 pages took %v of a read of %v: more than half, plus a page", spent, took)
	}
	t.Logf("8 pages took %v of a paced read of %v, held back %v", spent, took, held)
	ares, err := c.Aggregate(context.Background(), "paced", to-8*ReadPageQuanta*q, to, ReadPageQuanta*q, wire.GetOptions{})
	if err != nil || len(ares.Windows) != 8 {
		t.Fatalf("paced aggregate: %d windows, %v", len(ares.Windows), err)
	}
}

// writeBeside starts a writer that stores a point after another through c, in a
// series of its own, and returns once its first write is stored (so that the node
// is contended from then on); the stop it returns ends the writer and reports what it
// failed with.
func writeBeside(t *testing.T, c *Coordinator, at int64) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	first, done := make(chan error, 1), make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			var pt series.Points
			pt.AppendFloat(at-int64(i%1000)*int64(time.Millisecond)-1, float64(i))
			_, err := c.Put(ctx, "beside", pt, wire.PutOptions{})
			if i == 0 {
				first <- err
			}
			if ctx.Err() != nil {
				done <- nil
				return
			}
			if err != nil {
				done <- err
				return
			}
		}
	}()
	if err := <-first; err != nil {
		cancel()
		t.Fatalf("the writer beside the read: %v", err)
	}
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the writer beside the read: %v", err)
		}
	}
}

// TestPacerContended: on a fake clock, the node is contended while a long read waits
// for its turn and for contentionWindow after a write it coordinated; uncontended, a
// page waits for nothing whatever the debt, and is not charged; contended, it waits
// for the debt and is charged, also when the contention came while it ran.
func TestPacerContended(t *testing.T) {
	p, clk := pacedBy(0.25, 0)
	if p.contended() {
		t.Fatal("a fresh pacer is contended")
	}
	p.charge(time.Second) // debt that a contended page would wait 4 s for
	if d, contended := p.admit(); d != 0 || contended {
		t.Fatalf("an idle node in debt: a page waits %v (contended %v), want 0", d, contended)
	}
	p.settle(10*time.Millisecond, false)
	if spent, held, free := p.paced(); spent != time.Second || held != 0 || free != 10*time.Millisecond {
		t.Fatalf("an uncontended page of 10ms: charged %v, held %v, free %v; want 1s, 0, 10ms", spent, held, free)
	}

	p.waiting.Add(1)
	if d, contended := p.admit(); d != 4*time.Second || !contended {
		t.Fatalf("a long read waiting, 1 s in debt at a quarter: a page waits %v (contended %v), want 4s", d, contended)
	}
	p.waiting.Add(-1)
	clk.add(4 * time.Second)

	p.noteWrite()
	clk.add(contentionWindow - time.Millisecond)
	if !p.contended() {
		t.Fatalf("%v after a write: not contended", contentionWindow-time.Millisecond)
	}
	clk.add(time.Millisecond)
	if p.contended() {
		t.Fatalf("%v after a write: still contended", contentionWindow)
	}

	// A page that started idle and saw a write come is charged.
	_, contended := p.admit()
	p.noteWrite()
	p.settle(5*time.Millisecond, contended)
	if spent, held, free := p.paced(); spent != time.Second+5*time.Millisecond || held != 4*time.Second || free != 10*time.Millisecond {
		t.Fatalf("a page that saw a write come: charged %v in all, held %v, free %v; want 1.005s, 4s, 10ms", spent, held, free)
	}
}

// TestLongReadAloneUnpaced reads, and aggregates, a long range through a one-node
// cluster that nothing else asks anything of, whose long reads may take half its
// time with no burst (so that, contended, every page after the first would wait):
// no page waits and none is charged, every page's time is free. Then a second long
// read comes while the first runs: from then on the first is contended, its pages are
// charged and held back, and the second, once alone, runs free again.
func TestLongReadAloneUnpaced(t *testing.T) {
	c := oneNode(t, nil)
	q := int64(c.cfg.Quantum) * int64(time.Second)
	to := time.Now().UnixNano() / q * q
	from := to - 8*ReadPageQuanta*q
	var pts series.Points
	for i := range int64(8) {
		pts.AppendFloat(to-i*ReadPageQuanta*q-q/2, float64(i))
	}
	if _, err := c.Put(context.Background(), "alone", pts, wire.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	c.longPace = newPacer(0.5, 0) // and no write within contentionWindow: an idle node
	naps := 0
	savedPageYield := pageYield
	defer func() { pageYield = savedPageYield }()
	pageYield = func(nap bool) {
		if nap {
			naps++
		}
	}
	if res, err := c.Get(context.Background(), "alone", from, to, wire.GetOptions{}); err != nil || res.Points.Len() != 8 {
		t.Fatalf("a long read alone: %d points, %v", res.Points.Len(), err)
	}
	if ares, err := c.Aggregate(context.Background(), "alone", from, to, ReadPageQuanta*q, wire.GetOptions{}); err != nil || len(ares.Windows) != 8 {
		t.Fatalf("a long aggregate alone: %d windows, %v", len(ares.Windows), err)
	}
	spent, held, free := c.longPace.paced()
	if spent != 0 || held != 0 || naps != 0 || free == 0 {
		t.Fatalf("a long read and aggregate alone: charged %v, held back %v, %d naps, %v free; want 0, 0, 0 and above 0", spent, held, naps, free)
	}
	t.Logf("a long read and aggregate alone: %v of pages, none charged nor held back", free)

	// Two at once: the second comes at the first's second page and waits for its turn.
	keepLongYield(t)
	pages := 0
	second := make(chan error, 1)
	longYield = func() {
		if pages++; pages != 2 {
			return
		}
		go func() {
			res, err := c.Get(context.Background(), "alone", from, to, wire.GetOptions{})
			if err == nil && res.Points.Len() != 8 {
				err = fmt.Errorf("%d points, want 8", res.Points.Len())
			}
			second <- err
		}()
		testutil.WaitFor(t, 10*time.Second, func() bool { return c.longPace.waiting.Load() == 1 }, "the second long read to wait for its turn")
	}
	freeBefore := free
	if res, err := c.Get(context.Background(), "alone", from, to, wire.GetOptions{}); err != nil || res.Points.Len() != 8 {
		t.Fatalf("a long read with another waiting: %d points, %v", res.Points.Len(), err)
	}
	spent, held, _ = c.longPace.paced()
	if spent == 0 || held == 0 {
		t.Fatalf("a long read with another waiting: charged %v, held back %v; want both above 0 (the share applies)", spent, held)
	}
	if err := <-second; err != nil {
		t.Fatalf("the second long read: %v", err)
	}
	spent2, held2, free2 := c.longPace.paced()
	if spent2 != spent || held2 != held || free2 <= freeBefore {
		t.Fatalf("the second long read, alone once the first ended: charged %v more, held back %v more, %v more free; want 0, 0 and above 0",
			spent2-spent, held2-held, free2-freeBefore)
	}
	t.Logf("two long reads: the first charged %v and held back %v while the second waited; the second ran %v free", spent, held, free2-freeBefore)
}

// TestCoverQuanta: a range's quanta made a page at a time are Covering's, page after
// page, and its errors are Covering's; making the cover allocates nothing, whatever
// the range.
func TestCoverQuanta(t *testing.T) {
	q := quanta.Quantum(10)
	const s = int64(time.Second)
	for _, r := range [][2]int64{{0, 0}, {5 * s, 5 * s}, {0, 1}, {3 * s, 95 * s}, {-25 * s, 31 * s}, {0, 7000 * s},
		{0, quanta.MaxQuantaPerRange * 10 * s}, {0, quanta.MaxQuantaPerRange*10*s + 1}, {9, 3}} {
		want, werr := q.Covering(r[0], r[1])
		cover, err := coverQuanta(q, r[0], r[1])
		if (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() {
			t.Fatalf("[%d, %d): error %v, Covering's %v", r[0], r[1], err, werr)
		}
		if err != nil {
			continue
		}
		var got []int64
		for lo := 0; lo < cover.n; lo += 256 {
			p := cover.page(lo, 256)
			if len(p) > 256 {
				t.Fatalf("[%d, %d): a page of %d starts", r[0], r[1], len(p))
			}
			got = append(got, p...)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("[%d, %d): %d starts, Covering %d (first %v, %v)", r[0], r[1], len(got), len(want), got[:min(3, len(got))], want[:min(3, len(want))])
		}
	}
	if n := testing.AllocsPerRun(10, func() { _, _ = coverQuanta(q, 0, quanta.MaxQuantaPerRange*10*s) }); n != 0 {
		t.Fatalf("covering the documented maximum range allocates %v times", n)
	}
}

// TestLongReadYieldsAndHoldsAPage reads, and aggregates, the documented maximum range,
// 2²⁰ quanta, stopping the read after its third page and the aggregate after its first
// (of 2,048 quanta): each page yielded the core before it ran, and the read allocated
// a few pages' worth, not the 8 MiB that the starts of the whole range take (a long
// read's garbage is collected at the cost of every request beside it).
func TestLongReadYieldsAndHoldsAPage(t *testing.T) {
	c := oneNode(t, nil)
	var err error
	var pts series.Points
	now := time.Now().UnixNano()
	pts.AppendFloat(now-time.Hour.Nanoseconds(), 1)
	if _, err := c.Put(context.Background(), "huge", pts, wire.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	q := int64(c.cfg.Quantum) * int64(time.Second)
	from, to := now-(quanta.MaxQuantaPerRange-1)*q, now
	keepLongYield(t)
	for _, aggregate := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		pages, stop := 0, 3
		if aggregate {
			stop = 1
		}
		longYield = func() {
			if pages++; pages == stop {
				cancel()
			}
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		if aggregate {
			_, err = c.Aggregate(ctx, "huge", from, to, 24*time.Hour.Nanoseconds(), wire.GetOptions{})
		} else {
			_, err = c.Get(ctx, "huge", from, to, wire.GetOptions{})
		}
		runtime.ReadMemStats(&after)
		cancel()
		var re *rpc.RemoteError
		if !errors.As(err, &re) || re.Code != wire.CodeUnavailable {
			t.Fatalf("aggregate %v: a read stopped after %d pages: %v, want %s", aggregate, stop, err, wire.CodeUnavailable)
		}
		if pages != stop {
			t.Fatalf("aggregate %v: %d pages yielded before the read stopped, want %d", aggregate, pages, stop)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
			t.Fatalf("aggregate %v: %d pages of the maximum range allocated %d KiB, more than 4 MiB", aggregate, stop, got>>10)
		} else {
			t.Logf("aggregate %v: %d pages of the maximum range allocated %d KiB", aggregate, stop, got>>10)
		}
	}
}

// BenchmarkLongReadQuantum reads the documented maximum range of a series that holds
// one point, through a one-node cluster (rf 1) whose long reads are unpaced, stopping
// after 16 pages: what a quantum of a long read costs the node (allocs/op and B/op are
// per quantum).
func BenchmarkLongReadQuantum(b *testing.B) {
	c := oneNode(b, nil)
	c.longPace = newPacer(1, 0)
	var pts series.Points
	now := time.Now().UnixNano()
	pts.AppendFloat(now-time.Hour.Nanoseconds(), 1)
	if _, err := c.Put(context.Background(), "huge", pts, wire.PutOptions{}); err != nil {
		b.Fatal(err)
	}
	q := int64(c.cfg.Quantum) * int64(time.Second)
	from, to := now-(quanta.MaxQuantaPerRange-1)*q, now
	const pages = 16
	keepLongYield(b)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += pages * ReadPageQuanta {
		ctx, cancel := context.WithCancel(context.Background())
		n := 0
		longYield = func() {
			if n++; n == pages+1 {
				cancel()
			}
		}
		_, _ = c.Get(ctx, "huge", from, to, wire.GetOptions{})
		cancel()
	}
}

// BenchmarkLongAggregateQuantum is BenchmarkLongReadQuantum for an aggregate with
// daily windows (pages of aggPageQuanta).
func BenchmarkLongAggregateQuantum(b *testing.B) {
	c := oneNode(b, nil)
	c.longPace = newPacer(1, 0)
	var pts series.Points
	now := time.Now().UnixNano()
	pts.AppendFloat(now-time.Hour.Nanoseconds(), 1)
	if _, err := c.Put(context.Background(), "huge", pts, wire.PutOptions{}); err != nil {
		b.Fatal(err)
	}
	q := int64(c.cfg.Quantum) * int64(time.Second)
	from, to := now-(quanta.MaxQuantaPerRange-1)*q, now
	const pages = 4
	keepLongYield(b)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += pages * AggPageQuanta {
		ctx, cancel := context.WithCancel(context.Background())
		n := 0
		longYield = func() {
			if n++; n == pages+1 {
				cancel()
			}
		}
		_, _ = c.Aggregate(ctx, "huge", from, to, 24*time.Hour.Nanoseconds(), wire.GetOptions{})
		cancel()
	}
}

// TestLongReadAllocs bounds what a quantum of a long read, and of a long aggregate,
// allocates on the node that coordinates it: a page reuses the working slices of the
// page before (pageBufs), so a read of the documented maximum range, which a node
// under a flood of them serves without end, makes little garbage for the collector —
// whose cycles every request beside it pays for. Measured over 16 pages of a read and
// 4 of an aggregate of a series holding one point (about 1 KiB and 2 allocations per
// quantum when each page made its slices afresh).
func TestLongReadAllocs(t *testing.T) {
	c := oneNode(t, nil)
	c.longPace = newPacer(1, 0)
	var pts series.Points
	now := time.Now().UnixNano()
	pts.AppendFloat(now-time.Hour.Nanoseconds(), 1)
	if _, err := c.Put(context.Background(), "huge", pts, wire.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	q := int64(c.cfg.Quantum) * int64(time.Second)
	from, to := now-(quanta.MaxQuantaPerRange-1)*q, now
	keepLongYield(t)
	for _, tc := range []struct {
		name  string
		pages int
		quant int // quanta per page
		read  func(ctx context.Context) error
	}{
		{"get", 16, ReadPageQuanta, func(ctx context.Context) error { _, err := c.Get(ctx, "huge", from, to, wire.GetOptions{}); return err }},
		{"aggregate", 4, AggPageQuanta, func(ctx context.Context) error {
			_, err := c.Aggregate(ctx, "huge", from, to, 24*time.Hour.Nanoseconds(), wire.GetOptions{})
			return err
		}},
	} {
		run := func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			n := 0
			longYield = func() {
				if n++; n == tc.pages+1 {
					cancel()
				}
			}
			var re *rpc.RemoteError
			if err := tc.read(ctx); !errors.As(err, &re) || re.Code != wire.CodeUnavailable {
				t.Fatalf("%s stopped after %d pages: %v, want %s", tc.name, tc.pages, err, wire.CodeUnavailable)
			}
		}
		run() // the page buffers, grown once
		allocs := testing.AllocsPerRun(5, run)
		// Bytes: the least of five runs, each counted alone. The count is the whole
		// process's, and the node's background work (and, on a busy machine, a run
		// stretched by waits and naps) only ever adds to it.
		minBytes := uint64(math.MaxUint64)
		for range 5 {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			run()
			runtime.ReadMemStats(&after)
			minBytes = min(minBytes, after.TotalAlloc-before.TotalAlloc)
		}
		quantaRead := float64(tc.pages * tc.quant)
		perQuantum := allocs / quantaRead
		bytesPerQuantum := float64(minBytes) / quantaRead
		t.Logf("%s: %.3f allocations and %.0f bytes per quantum", tc.name, perQuantum, bytesPerQuantum)
		if perQuantum > 0.5 {
			t.Errorf("%s: %.3f allocations per quantum read, want at most 0.5", tc.name, perQuantum)
		}
		if bytesPerQuantum > 128 {
			t.Errorf("%s: %.0f bytes allocated per quantum read, want at most 128", tc.name, bytesPerQuantum)
		}
	}
}

// keepLongYield puts longYield back as it was when the test or benchmark ends: they
// replace it to count pages, and the next one must find the node's own.
func keepLongYield(tb testing.TB) {
	saved := longYield
	tb.Cleanup(func() { longYield = saved })
}
