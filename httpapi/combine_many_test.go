package httpapi

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/tsdb/series"
)

// gatedManyEngine is the package's real engine with its WriteManys counted, and the
// first WriteMany held until release is closed.
type gatedManyEngine struct {
	*NodeEngine
	calls   atomic.Int64
	first   sync.Once
	entered chan struct{}
	release chan struct{}
}

func (g *gatedManyEngine) WriteMany(ctx context.Context, ws []SeriesWrite) []WriteResult {
	g.calls.Add(1)
	g.first.Do(func() {
		close(g.entered)
		<-g.release
	})
	return g.NodeEngine.WriteMany(ctx, ws)
}

// gathered waits until the group behind the WriteMany in flight holds n points.
func gathered(t *testing.T, c *manyCombiner, n int) {
	t.Helper()
	got := 0
	if !testutil.Poll(30*time.Second, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		got = 0
		if c.next != nil {
			for _, w := range c.next.ws {
				got += w.Pts.Len()
			}
		}
		return got == n
	}) {
		t.Fatalf("%d of %d points gathered behind the write in flight", got, n)
	}
}

// TestManyCombinerMergesConcurrentRequests holds one request's WriteMany in flight
// while 7 more requests, each of the same 3 series, arrive: they go as one more
// WriteMany, every request is told its own points were stored, and every point reads
// back in order.
func TestManyCombinerMergesConcurrentRequests(t *testing.T) {
	g := &gatedManyEngine{NodeEngine: engine, entered: make(chan struct{}), release: make(chan struct{})}
	c := newManyCombiner(g, 1)
	start := base.Add(9 * time.Minute).UnixNano()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const reqs, nseries, per = 8, 3, 10
	key := func(s int) string { return fmt.Sprintf("combmany/m,host=h%d#v", s) }
	results := make([][]WriteResult, reqs)
	var wg sync.WaitGroup
	run := func(r int) {
		defer wg.Done()
		var ws []SeriesWrite
		for s := range nseries {
			var p series.Points
			for i := range per {
				p.AppendFloat(start+int64(r*per+i)*int64(time.Second), float64(r*per+i))
			}
			ws = append(ws, SeriesWrite{Key: key(s), Tags: map[string]string{"host": fmt.Sprint("h", s)}, Pts: p})
		}
		results[r] = c.write(ctx, ws)
	}
	wg.Add(1)
	go run(0)
	<-g.entered
	// Later requests first, so that the group's points are out of order.
	for r := reqs - 1; r >= 1; r-- {
		wg.Add(1)
		go run(r)
	}
	gathered(t, c, (reqs-1)*nseries*per)
	close(g.release)
	wg.Wait()
	for r := range reqs {
		for s, res := range results[r] {
			if res.Err != nil || res.Stored != per {
				t.Fatalf("request %d, series %d: stored %d, err %v; want %d, nil", r, s, res.Stored, res.Err, per)
			}
		}
	}
	if n := g.calls.Load(); n != 2 {
		t.Fatalf("%d WriteManys for %d requests, want 2 (the held one and the combined rest)", n, reqs)
	}
	for s := range nseries {
		got, err := engine.Read(ctx, key(s), start, start+int64(reqs*per)*int64(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if got.Len() != reqs*per {
			t.Fatalf("%s: read back %d points, want %d", key(s), got.Len(), reqs*per)
		}
		for i := range got.T {
			if got.F[i] != float64(i) {
				t.Fatalf("%s: point %d = %v, want %d", key(s), i, got.F[i], i)
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inflight != 0 || c.next != nil {
		t.Fatal("the combiner is still busy after every write returned")
	}
}

// TestManyCombinerBlamesOnlyTheBadRequest: a request whose point is refused (too far
// in the future) in a combined WriteMany does not fail the other request of the group
// that wrote the same series, nor its other series.
func TestManyCombinerBlamesOnlyTheBadRequest(t *testing.T) {
	g := &gatedManyEngine{NodeEngine: engine, entered: make(chan struct{}), release: make(chan struct{})}
	c := newManyCombiner(g, 1)
	start := base.Add(11 * time.Minute).UnixNano()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	one := func(key string, ts ...int64) SeriesWrite {
		var p series.Points
		for i, t := range ts {
			p.AppendFloat(t, float64(i))
		}
		return SeriesWrite{Key: key, Pts: p}
	}
	a, b := "combmany/bad,s=a#v", "combmany/bad,s=b#v"
	future := time.Now().Add(10 * 365 * 24 * time.Hour).UnixNano()
	var wg sync.WaitGroup
	var held, good, bad []WriteResult
	wg.Add(1)
	go func() { defer wg.Done(); held = c.write(ctx, []SeriesWrite{one(a, start)}) }()
	<-g.entered
	wg.Add(2)
	go func() {
		defer wg.Done()
		good = c.write(ctx, []SeriesWrite{one(a, start+1e9, start+2e9), one(b, start)})
	}()
	go func() {
		defer wg.Done()
		bad = c.write(ctx, []SeriesWrite{one(a, start+3e9, future), one(b, start+1e9)})
	}()
	gathered(t, c, 6)
	close(g.release)
	wg.Wait()
	if held[0].Err != nil || good[0].Err != nil || good[0].Stored != 2 || good[1].Err != nil || good[1].Stored != 1 {
		t.Fatalf("good requests: %+v; %+v", held, good)
	}
	if bad[0].Err == nil || !strings.Contains(bad[0].Err.Error(), "future") || bad[0].Stored != 0 {
		t.Fatalf("the series with a point 10 years ahead: %+v, want an error about the future", bad[0])
	}
	if bad[1].Err != nil || bad[1].Stored != 1 {
		t.Fatalf("the bad request's other series: %+v, want stored", bad[1])
	}
	for key, want := range map[string]int{a: 3, b: 2} {
		got, err := engine.Read(ctx, key, start, start+10e9)
		if err != nil || got.Len() != want {
			t.Fatalf("%s: read back %d points (%v), want %d", key, got.Len(), err, want)
		}
	}
}

// TestMergePoints: a request's points join a group's sorted, later ones appended, earlier
// or overlapping ones merged, the request's value winning a shared timestamp.
func TestMergePoints(t *testing.T) {
	pts := func(ts ...int64) series.Points {
		var p series.Points
		for _, x := range ts {
			p.AppendFloat(x, float64(x))
		}
		return p
	}
	dst := series.Points{Type: series.Float}
	for _, src := range []series.Points{pts(5, 6), pts(7, 9), pts(1, 6, 8)} {
		if src.T[0] == 1 {
			src.F[1] = -6 // the later request's value of t=6
		}
		mergePoints(&dst, &src)
	}
	wantT := []int64{1, 5, 6, 7, 8, 9}
	wantF := []float64{1, 5, -6, 7, 8, 9}
	if fmt.Sprint(dst.T) != fmt.Sprint(wantT) || fmt.Sprint(dst.F) != fmt.Sprint(wantF) {
		t.Fatalf("merged %v %v, want %v %v", dst.T, dst.F, wantT, wantF)
	}
}
