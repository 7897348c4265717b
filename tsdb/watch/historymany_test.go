package watch

import (
	"fmt"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/wire"
)

// TestHistoryManySeam: a subscription to 300 series reads their histories in batches
// (Source.HistoryMany), not a Bounds per series, and is exact at the seam: series with
// history, series with none, points written while it opens (each once, in order, none
// late), a series the batch could not read (read alone), a duplicate dropped and late
// points flagged.
func TestHistoryManySeam(t *testing.T) {
	h, src := newTestHub(t, 0)
	const n, live = 300, 5
	key := func(i int) string { return fmt.Sprintf("m/%03d", i) }
	src.mu.Lock()
	for i := range n {
		src.pts[key(i)] = []int64{}
		if i%3 != 0 { // i%3 == 0: no history before the live points
			for ts := int64(1); ts <= 20; ts++ {
				src.pts[key(i)] = append(src.pts[key(i)], ts)
			}
		}
	}
	src.failMany = map[string]bool{key(7): true}
	src.mu.Unlock()
	// Live points of every series, 100 to 104, written in turns while the subscription
	// opens and reads its histories.
	started, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for ts := int64(100); ts < 100+live; ts++ {
			for i := range n {
				src.write(h, key(i), ts)
				if ts == 100 && i == n/2 {
					close(started)
				}
			}
		}
	}()
	<-started
	p := open(t, h, wire.WatchOpenReq{Prefix: "m/", From: 1})
	type point struct {
		t    int64
		late bool
	}
	got := map[string][]point{}
	total := 0
	collect := func(want int, what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for total < want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: got %d points of %d in 10s", what, total, want)
			}
			for _, r := range p.next(t) {
				for _, x := range r.Points.T {
					got[r.Key] = append(got[r.Key], point{x, r.Late})
					total++
				}
			}
		}
	}
	collect(2*n/3*20+n*live, "history and live points")
	<-done
	waitReady(t, h, p.id)
	// A duplicate of a point delivered, then a late point of every third series.
	src.write(h, key(1), 100)
	for i := 2; i < n; i += 3 {
		src.write(h, key(i), 50)
	}
	collect(2*n/3*20+n*live+n/3, "late points")
	if extra := p.next(t); len(extra) != 0 {
		t.Fatalf("after every point, %d more runs: %v", len(extra), extra)
	}
	for i := range n {
		var want []point
		if i%3 != 0 {
			for ts := int64(1); ts <= 20; ts++ {
				want = append(want, point{ts, false})
			}
		}
		for ts := int64(100); ts < 100+live; ts++ {
			want = append(want, point{ts, false})
		}
		if i%3 == 2 {
			want = append(want, point{50, true})
		}
		if fmt.Sprint(got[key(i)]) != fmt.Sprint(want) {
			t.Errorf("%s: got %v, want %v", key(i), got[key(i)], want)
		}
	}
	if m, b := src.many.Load(), src.bounds.Load(); m == 0 || m > n/historyBatch+historyReaders || b != 1 {
		t.Errorf("%d batched reads and %d Bounds for %d series, one failing in its batch; want at most %d batched reads and one Bounds",
			m, b, n, n/historyBatch+historyReaders)
	}
}
