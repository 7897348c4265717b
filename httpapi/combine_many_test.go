package httpapi

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

func (g *gatedManyEngine) WriteMany(ctx context.Context, ws []SeriesWrite, committed func()) []WriteResult {
	g.calls.Add(1)
	g.first.Do(func() {
		close(g.entered)
		<-g.release
	})
	return g.NodeEngine.WriteMany(ctx, ws, committed)
}

// gathered waits until the group behind the WriteMany in flight holds n points.
func gathered(t *testing.T, c *manyCombiner, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.mu.Lock()
		got := 0
		if c.next != nil {
			for _, w := range c.next.ws {
				got += w.Pts.Len()
			}
		}
		c.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d points gathered behind the write in flight", got, n)
		}
		time.Sleep(time.Millisecond) // polling a condition, with a deadline
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
	if c.inflight != 0 || c.appending || c.next != nil {
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

// pipeWriter is a ManyWriter whose WriteManys each report their commit (when commit is
// set) and then wait for release before they return, recording when each began.
type pipeWriter struct {
	commit  bool
	began   chan int // the number of points of each WriteMany, as it begins
	release chan struct{}
}

func (p *pipeWriter) WriteMany(_ context.Context, ws []SeriesWrite, committed func()) []WriteResult {
	n := 0
	for _, w := range ws {
		n += w.Pts.Len()
	}
	p.began <- n
	if p.commit && committed != nil {
		committed()
	}
	<-p.release
	out := make([]WriteResult, len(ws))
	for i := range ws {
		out[i].Stored = ws[i].Pts.Len()
	}
	return out
}

// TestManyCombinerStartsNextAtCommit: the group gathered behind a WriteMany goes as
// soon as that WriteMany reports its commit, while it still waits (for its sync), and
// not before its commit when it never reports one.
func TestManyCombinerStartsNextAtCommit(t *testing.T) {
	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("commit=%v", commit), func(t *testing.T) {
			p := &pipeWriter{commit: commit, began: make(chan int, 4), release: make(chan struct{})}
			c := newManyCombiner(p, writesInFlight)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			write := func(key string, ts int64) SeriesWrite {
				var pts series.Points
				pts.AppendFloat(ts, 1)
				return SeriesWrite{Key: key, Pts: pts}
			}
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); c.write(ctx, []SeriesWrite{write("a", 1)}) }()
			<-p.began // the first WriteMany is in flight (and committed, if commit)
			wg.Add(2)
			go func() { defer wg.Done(); c.write(ctx, []SeriesWrite{write("a", 2)}) }()
			go func() { defer wg.Done(); c.write(ctx, []SeriesWrite{write("b", 2)}) }()
			if commit {
				// Both later requests go without the first returning: as the next group,
				// or one at once if it came before the first reported its commit.
				got := 0
				for got < 2 {
					select {
					case n := <-p.began:
						got += n
					case <-time.After(30 * time.Second):
						t.Fatalf("%d of 2 points written after the first write committed; want them going before it returns", got)
					}
				}
			} else {
				gathered(t, c, 2)
				select {
				case n := <-p.began:
					t.Fatalf("a WriteMany of %d points began before the one in flight committed or returned", n)
				default:
				}
			}
			close(p.release)
			wg.Wait()
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.inflight != 0 || c.appending || c.next != nil {
				t.Fatal("the combiner is still busy after every write returned")
			}
		})
	}
}
