package tsdb

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
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

// TestLongTurnPage: a page that had to wait asks its replicas one request at a time;
// one that did not, and a short read's, ReadConcurrency at once; a page whose wait
// outlasts its deadline is refused with CodeUnavailable, saying why and what to do.
func TestLongTurnPage(t *testing.T) {
	c := &Coordinator{cfg: &Config{ReadConcurrency: 16}, longReads: make(chan struct{}, maxLongReads)}
	var clk *fakeClock
	c.longPace, clk = pacedBy(0.25, 100*time.Millisecond)
	limit := func(turn *longTurn, ctx context.Context) (n int, err error) {
		err = turn.page(ctx, func(ctx context.Context) error {
			n = c.fetchLimit(ctx)
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
		if n, err := limit(turn, ctx); err != nil || n != 16 {
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
	err = turn.page(dctx, func(context.Context) error { ran = true; return nil })
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
