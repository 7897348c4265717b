package tsdb

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
// or not; a short read's ReadConcurrency at once; a page whose wait
// outlasts its deadline is refused with CodeUnavailable, saying why and what to do.
func TestLongTurnPage(t *testing.T) {
	c := &Coordinator{cfg: &Config{ReadConcurrency: 16}, longReads: make(chan struct{}, maxLongReads)}
	var clk *fakeClock
	c.longPace, clk = pacedBy(0.25, 100*time.Millisecond)
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
	if !errors.As(err, &re) || re.Code != CodeUnavailable || ran {
		t.Fatalf("a page that cannot start before its deadline: ran %v, %v; want %s", ran, err, CodeUnavailable)
	}
}

// TestLongReadPaced reads a long range through a node whose long reads may take half
// its time with no burst: the read is served whole, every page after the first
// waited, and the time its pages took stays within half the time the read took
// (plus a page).
func TestLongReadPaced(t *testing.T) {
	lc, err := StartLocal(context.Background(), 1, "", func(_ int, cfg *Config) { cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 1, 1, 1 })
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	n := lc.Nodes[0]
	c := n.Coordinator()
	q := int64(n.cfg.DHT.Quantum) * int64(time.Second)
	to := time.Now().UnixNano() / q * q
	var pts series.Points
	for i := range int64(8) {
		pts.AppendFloat(to-i*readPageQuanta*q-q/2, float64(i))
	}
	if _, err := c.Put(context.Background(), "paced", pts, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	c.longPace = newPacer(0.5, 0)
	start := time.Now()
	res, err := c.Get(context.Background(), "paced", to-8*readPageQuanta*q, to, GetOptions{})
	took := time.Since(start)
	if err != nil || res.Points.Len() != 8 {
		t.Fatalf("paced read: %d points, %v", res.Points.Len(), err)
	}
	spent := c.longPace.spent
	if spent > took/2+spent/8 {
		t.Fatalf("8 pages took %v of a read of %v: more than half, plus a page", spent, took)
	}
	t.Logf("8 pages took %v of a paced read of %v", spent, took)
	ares, err := c.Aggregate(context.Background(), "paced", to-8*readPageQuanta*q, to, readPageQuanta*q, GetOptions{})
	if err != nil || len(ares.Windows) != 8 {
		t.Fatalf("paced aggregate: %d windows, %v", len(ares.Windows), err)
	}
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
	lc, err := StartLocal(context.Background(), 1, "", func(_ int, cfg *Config) { cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 1, 1, 1 })
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	c := lc.Nodes[0].Coordinator()
	var pts series.Points
	now := time.Now().UnixNano()
	pts.AppendFloat(now-time.Hour.Nanoseconds(), 1)
	if _, err := c.Put(context.Background(), "huge", pts, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	q := int64(lc.Nodes[0].cfg.DHT.Quantum) * int64(time.Second)
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
			_, err = c.Aggregate(ctx, "huge", from, to, 24*time.Hour.Nanoseconds(), GetOptions{})
		} else {
			_, err = c.Get(ctx, "huge", from, to, GetOptions{})
		}
		runtime.ReadMemStats(&after)
		cancel()
		var re *rpc.RemoteError
		if !errors.As(err, &re) || re.Code != CodeUnavailable {
			t.Fatalf("aggregate %v: a read stopped after %d pages: %v, want %s", aggregate, stop, err, CodeUnavailable)
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
	lc, err := StartLocal(context.Background(), 1, "", func(_ int, cfg *Config) { cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 1, 1, 1 })
	if err != nil {
		b.Fatal(err)
	}
	defer lc.Close()
	c := lc.Nodes[0].Coordinator()
	c.longPace = newPacer(1, 0)
	var pts series.Points
	now := time.Now().UnixNano()
	pts.AppendFloat(now-time.Hour.Nanoseconds(), 1)
	if _, err := c.Put(context.Background(), "huge", pts, PutOptions{}); err != nil {
		b.Fatal(err)
	}
	q := int64(lc.Nodes[0].cfg.DHT.Quantum) * int64(time.Second)
	from, to := now-(quanta.MaxQuantaPerRange-1)*q, now
	const pages = 16
	keepLongYield(b)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += pages * readPageQuanta {
		ctx, cancel := context.WithCancel(context.Background())
		n := 0
		longYield = func() {
			if n++; n == pages+1 {
				cancel()
			}
		}
		_, _ = c.Get(ctx, "huge", from, to, GetOptions{})
		cancel()
	}
}

// BenchmarkLongAggregateQuantum is BenchmarkLongReadQuantum for an aggregate with
// daily windows (pages of aggPageQuanta).
func BenchmarkLongAggregateQuantum(b *testing.B) {
	lc, err := StartLocal(context.Background(), 1, "", func(_ int, cfg *Config) { cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 1, 1, 1 })
	if err != nil {
		b.Fatal(err)
	}
	defer lc.Close()
	c := lc.Nodes[0].Coordinator()
	c.longPace = newPacer(1, 0)
	var pts series.Points
	now := time.Now().UnixNano()
	pts.AppendFloat(now-time.Hour.Nanoseconds(), 1)
	if _, err := c.Put(context.Background(), "huge", pts, PutOptions{}); err != nil {
		b.Fatal(err)
	}
	q := int64(lc.Nodes[0].cfg.DHT.Quantum) * int64(time.Second)
	from, to := now-(quanta.MaxQuantaPerRange-1)*q, now
	const pages = 4
	keepLongYield(b)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += pages * aggPageQuanta {
		ctx, cancel := context.WithCancel(context.Background())
		n := 0
		longYield = func() {
			if n++; n == pages+1 {
				cancel()
			}
		}
		_, _ = c.Aggregate(ctx, "huge", from, to, 24*time.Hour.Nanoseconds(), GetOptions{})
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
	lc, err := StartLocal(context.Background(), 1, "", func(_ int, cfg *Config) { cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 1, 1, 1 })
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	c := lc.Nodes[0].Coordinator()
	c.longPace = newPacer(1, 0)
	var pts series.Points
	now := time.Now().UnixNano()
	pts.AppendFloat(now-time.Hour.Nanoseconds(), 1)
	if _, err := c.Put(context.Background(), "huge", pts, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	q := int64(lc.Nodes[0].cfg.DHT.Quantum) * int64(time.Second)
	from, to := now-(quanta.MaxQuantaPerRange-1)*q, now
	keepLongYield(t)
	for _, tc := range []struct {
		name  string
		pages int
		quant int // quanta per page
		read  func(ctx context.Context) error
	}{
		{"get", 16, readPageQuanta, func(ctx context.Context) error { _, err := c.Get(ctx, "huge", from, to, GetOptions{}); return err }},
		{"aggregate", 4, aggPageQuanta, func(ctx context.Context) error {
			_, err := c.Aggregate(ctx, "huge", from, to, 24*time.Hour.Nanoseconds(), GetOptions{})
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
			if err := tc.read(ctx); !errors.As(err, &re) || re.Code != CodeUnavailable {
				t.Fatalf("%s stopped after %d pages: %v, want %s", tc.name, tc.pages, err, CodeUnavailable)
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

// TestLongReadsOnePageAtATime sends twelve long reads and aggregates at once over
// separate connections, as a flood from many clients would: the node runs at most one
// long-read page at a time, whichever connection it came from, so one core stays free
// for the small requests beside them; every read is served whole or refused
// CodeUnavailable (told to retry, not failed), and a small write beside them is served.
func TestLongReadsOnePageAtATime(t *testing.T) {
	lc, err := StartLocal(context.Background(), 1, "", func(_ int, cfg *Config) { cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 1, 1, 1 })
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	n := lc.Nodes[0]
	c := n.Coordinator()
	q := int64(n.cfg.DHT.Quantum) * int64(time.Second)
	to := time.Now().UnixNano() / q * q
	var pts series.Points
	for i := range int64(4) {
		pts.AppendFloat(to-i*readPageQuanta*q-q/2, float64(i))
	}
	if _, err := c.Put(context.Background(), "flood", pts, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	c.longPace = newPacer(1, 0) // unpaced: pages back to back, the most overlap there could be
	from := to - 6*readPageQuanta*q
	var wg sync.WaitGroup
	var served, refused atomic.Int32
	errs := make(chan error, 12)
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cli := rpc.NewClient(rpc.NewTCPTransport(), rpc.Config{})
			defer cli.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var err error
			if i%2 == 0 {
				var resp wire.GetResp
				if err = rpc.Invoke(ctx, cli, n.RPCAddr(), wire.MethodGet, &wire.GetReq{Key: "flood", From: from, To: to}, &resp); err == nil && resp.Points.Len() != 4 {
					err = fmt.Errorf("get: %d points, want 4", resp.Points.Len())
				}
			} else {
				var resp wire.AggregateResp
				err = rpc.Invoke(ctx, cli, n.RPCAddr(), wire.MethodAggregate, &wire.AggregateReq{Key: "flood", From: from, To: to, Every: readPageQuanta * q}, &resp)
			}
			var re *rpc.RemoteError
			switch {
			case err == nil:
				served.Add(1)
			case errors.As(err, &re) && re.Code == CodeUnavailable:
				refused.Add(1)
			default:
				errs <- err
			}
		}()
	}
	var one series.Points
	one.AppendFloat(to-q/3, 1)
	if _, err := c.Put(context.Background(), "beside", one, PutOptions{}); err != nil {
		t.Fatalf("a write beside the long reads: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if most := c.longPace.most.Load(); most != 1 {
		t.Fatalf("%d long-read pages ran at once, want 1", most)
	}
	if served.Load() == 0 {
		t.Fatalf("none of 12 long reads was served (%d refused)", refused.Load())
	}
	t.Logf("12 long reads: %d served, %d refused; at most %d page at a time", served.Load(), refused.Load(), c.longPace.most.Load())
}

// keepLongYield puts longYield back as it was when the test or benchmark ends: they
// replace it to count pages, and the next one must find the node's own.
func keepLongYield(tb testing.TB) {
	saved := longYield
	tb.Cleanup(func() { longYield = saved })
}
