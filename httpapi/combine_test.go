package httpapi

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/tsdb/series"
)

// gatedEngine is the package's real engine with its Writes counted, and the first
// Write held until release is closed.
type gatedEngine struct {
	*NodeEngine
	writes  atomic.Int64
	first   sync.Once
	entered chan struct{}
	release chan struct{}
}

func (g *gatedEngine) Write(ctx context.Context, key string, tags map[string]string, pts series.Points) (int, error) {
	g.writes.Add(1)
	g.first.Do(func() {
		close(g.entered)
		<-g.release
	})
	return g.NodeEngine.Write(ctx, key, tags, pts)
}

// TestCombinerMergesConcurrentWrites holds one Write of a series in flight while 15
// other requests bring points of it: they go as one more Write, every request is told
// its own points were stored, and every point reads back.
func TestCombinerMergesConcurrentWrites(t *testing.T) {
	g := &gatedEngine{NodeEngine: engine, entered: make(chan struct{}), release: make(chan struct{})}
	c := newCombiner(g)
	key := "combine/m,host=a#v"
	start := base.Add(5 * time.Minute).UnixNano()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const reqs, per = 16, 10
	results := make([]int, reqs)
	errs := make([]error, reqs)
	var wg sync.WaitGroup
	run := func(r int) {
		defer wg.Done()
		var p series.Points
		for i := 0; i < per; i++ {
			p.AppendFloat(start+int64(r*per+i)*int64(time.Second), float64(r*per+i))
		}
		results[r], errs[r] = c.write(ctx, key, map[string]string{"host": "a"}, p)
	}
	wg.Add(1)
	go run(0)
	<-g.entered
	for r := 1; r < reqs; r++ {
		wg.Add(1)
		go run(r)
	}
	// Wait until the 15 have joined the group behind the held Write.
	waitGathered(t, c, key, (reqs-1)*per)
	close(g.release)
	wg.Wait()
	for r := range reqs {
		if errs[r] != nil || results[r] != per {
			t.Fatalf("request %d: stored %d, err %v; want %d, nil", r, results[r], errs[r], per)
		}
	}
	if n := g.writes.Load(); n != 2 {
		t.Fatalf("%d Engine.Writes for %d requests, want 2 (the held one and the combined rest)", n, reqs)
	}
	got, err := engine.Read(ctx, key, start, start+int64(reqs*per)*int64(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got.Len() != reqs*per {
		t.Fatalf("read back %d points, want %d", got.Len(), reqs*per)
	}
	for i := range got.T {
		if got.F[i] != float64(i) {
			t.Fatalf("point %d = %v, want %d", i, got.F[i], i)
		}
	}
	for i := range c.shards {
		if n := len(c.shards[i].running); n != 0 {
			t.Fatalf("combiner still tracks %d series after every write returned", n)
		}
	}
}

// TestCombinerBlamesOnlyTheBadRequest: a request whose point is refused (too far in
// the future) in a combined write does not fail the others of that write.
func TestCombinerBlamesOnlyTheBadRequest(t *testing.T) {
	g := &gatedEngine{NodeEngine: engine, entered: make(chan struct{}), release: make(chan struct{})}
	c := newCombiner(g)
	key := "combine/m,host=bad#v"
	start := base.Add(7 * time.Minute).UnixNano()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pts := func(ts ...int64) series.Points {
		var p series.Points
		for i, t := range ts {
			p.AppendFloat(t, float64(i))
		}
		return p
	}
	var wg sync.WaitGroup
	var errHeld, errGood, errBad error
	var nGood int
	wg.Add(1)
	go func() { defer wg.Done(); _, errHeld = c.write(ctx, key, nil, pts(start)) }()
	<-g.entered
	wg.Add(2)
	go func() { defer wg.Done(); nGood, errGood = c.write(ctx, key, nil, pts(start+1e9, start+2e9)) }()
	future := time.Now().Add(10 * 365 * 24 * time.Hour).UnixNano()
	go func() { defer wg.Done(); _, errBad = c.write(ctx, key, nil, pts(start+3e9, future)) }()
	waitGathered(t, c, key, 4)
	close(g.release)
	wg.Wait()
	if errHeld != nil || errGood != nil || nGood != 2 {
		t.Fatalf("good requests: %v; %d stored, %v", errHeld, nGood, errGood)
	}
	if errBad == nil || !strings.Contains(errBad.Error(), "future") {
		t.Fatalf("the request with a point 10 years ahead: err %v, want one about the future", errBad)
	}
	got, err := engine.Read(ctx, key, start, start+10e9)
	if err != nil || got.Len() != 3 {
		t.Fatalf("read back %d points (%v), want the 3 good ones", got.Len(), err)
	}
}

// waitGathered waits until key's group behind the write in flight holds n points.
func waitGathered(t *testing.T, c *combiner, key string, n int) {
	t.Helper()
	got := 0
	if !testutil.Poll(30*time.Second, func() bool {
		sh := c.shard(key)
		sh.mu.Lock()
		defer sh.mu.Unlock()
		if grp := sh.running[key]; grp != nil {
			got = grp.pts.Len()
		}
		return got == n
	}) {
		t.Fatalf("%d of %d points gathered behind the write in flight", got, n)
	}
}
