package coord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"
	"github.com/tsdht/tsdht/tsdb/replica"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// heldCalls records the calls a coalescer makes, holding the first until release is
// closed.
type heldCalls struct {
	release chan struct{}
	mu      sync.Mutex
	calls   [][]int
}

func newHeldCalls() *heldCalls { return &heldCalls{release: make(chan struct{})} }

func (h *heldCalls) record(ins []int) {
	h.mu.Lock()
	h.calls = append(h.calls, append([]int(nil), ins...))
	first := len(h.calls) == 1
	h.mu.Unlock()
	if first {
		<-h.release
	}
}

// queued counts the items waiting behind key's call under way.
func (c *coalescer[K, In, Out]) queued(key K) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	if q := c.busy[key]; q != nil {
		for _, b := range q.waiting {
			n += len(b.ins)
		}
	}
	return n
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A lone call goes at once; calls that arrive while it is under way go together, at
// most max a call, each caller getting its own answer; a failed call fails its own
// callers only; another key is not held behind it.
func TestCoalescer(t *testing.T) {
	h := newHeldCalls()
	release, mu := h.release, &h.mu
	c := newCoalescer(3, 1000, func(in int) int { return max(in, -in) }, func(_ context.Context, key string, ins []int) ([]string, error) {
		h.record(ins)
		for _, in := range ins {
			if in < 0 {
				return nil, errors.New("refused")
			}
		}
		out := make([]string, len(ins))
		for i, in := range ins {
			out[i] = fmt.Sprintf("%s:%d", key, in)
		}
		return out, nil
	})
	ctx := context.Background()
	type answer struct {
		out string
		err error
	}
	answers := make(map[int]answer)
	var wg sync.WaitGroup
	ask := func(key string, in int) {
		wg.Go(func() {
			out, err := c.do(ctx, key, in)
			mu.Lock()
			answers[in] = answer{out, err}
			mu.Unlock()
		})
	}
	ask("a", 0)
	waitFor(t, "the first call", func() bool { mu.Lock(); defer mu.Unlock(); return len(h.calls) == 1 })
	for _, in := range []int{1, 2, 3, 4, -5} {
		ask("a", in)
	}
	waitFor(t, "five queued calls", func() bool { return c.queued("a") == 5 })
	// Another key goes at once, whatever waits on "a".
	if out, err := c.do(ctx, "b", 9); err != nil || out != "b:9" {
		t.Fatalf("another key: %q, %v", out, err)
	}
	close(release)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(h.calls) != 4 { // "a" alone, "b", then two groups of at most 3
		t.Fatalf("calls %v, want 4", h.calls)
	}
	sizes := []int{len(h.calls[2]), len(h.calls[3])}
	if sizes[0]+sizes[1] != 5 || max(sizes[0], sizes[1]) > 3 {
		t.Fatalf("grouped calls %v: want the five queued items in groups of at most 3", h.calls[2:])
	}
	for _, in := range []int{0, 1, 2, 3, 4} {
		var refusedWith bool
		for _, call := range h.calls[2:] {
			for _, x := range call {
				if x == in {
					for _, y := range call {
						refusedWith = refusedWith || y < 0
					}
				}
			}
		}
		a := answers[in]
		switch {
		case refusedWith && a.err == nil:
			t.Errorf("item %d went with the refused one, yet succeeded: %q", in, a.out)
		case !refusedWith && (a.err != nil || a.out != fmt.Sprintf("a:%d", in)):
			t.Errorf("item %d: %q, %v; want a:%d", in, a.out, a.err, in)
		}
	}
	if answers[-5].err == nil {
		t.Error("the refused item succeeded")
	}
	mu.Unlock() // the last call frees its target after answering
	waitFor(t, "every target freed", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.busy) == 0 })
	mu.Lock()
}

// A caller whose context ends stops waiting, and the others are answered.
func TestCoalescerCallerGivesUp(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 10)
	c := newCoalescer(10, math.MaxInt, func(int) int { return 1 }, func(_ context.Context, _ string, ins []int) ([]int, error) {
		started <- struct{}{}
		<-release
		return ins, nil
	})
	done := make(chan error, 2)
	go func() { _, err := c.do(context.Background(), "k", 1); done <- err }()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _, err := c.do(ctx, "k", 2); done <- err }()
	waitFor(t, "the queued call", func() bool { return c.queued("k") == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that gave up got %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the first caller got %v", err)
	}
}

// postingsCounter counts the posting merge requests a replica is asked for and the
// members they carry.
type postingsCounter struct {
	*replica.Local
	mu      sync.Mutex
	calls   int // requests
	members int // to every list
}

func (r *postingsCounter) MergePostings(ctx context.Context, tag catalog.Tag, ms []catalog.Member) error {
	return r.MergePostingsMany(ctx, []catalog.TagMembers{{Tag: tag, Members: ms}})
}

func (r *postingsCounter) MergePostingsMany(ctx context.Context, lists []catalog.TagMembers) error {
	r.mu.Lock()
	r.calls++
	for _, l := range lists {
		r.members += len(l.Members)
	}
	r.mu.Unlock()
	return r.Local.MergePostingsMany(ctx, lists)
}

// MergeCatalog counts as one posting request when it carries members (beside the
// entries of their series).
func (r *postingsCounter) MergeCatalog(ctx context.Context, lists []catalog.TagMembers, es []catalog.Entry) ([]catalog.Entry, error) {
	r.mu.Lock()
	if len(lists) > 0 {
		r.calls++
	}
	for _, l := range lists {
		r.members += len(l.Members)
	}
	r.mu.Unlock()
	return r.Local.MergeCatalog(ctx, lists, es)
}

// The new series of one write post their members to every posting list a replica
// keeps in one request, not one per list nor per series nor per round of the goroutines
// readying them, and every one of them is listed afterwards.
func TestPutManyNewSeriesShareMerges(t *testing.T) {
	var counter *postingsCounter
	c, puts := loadNewSeries(t, "load/s", 3*maxPrepareParallel, func(l *replica.Local) cluster.Local {
		counter = &postingsCounter{Local: l}
		return counter
	})
	n := len(puts)
	counter.mu.Lock()
	calls, members := counter.calls, counter.members
	counter.mu.Unlock()
	// Each series posts to two lists (its prefix and one of the all-series buckets).
	if members != 2*n {
		t.Errorf("%d members posted, want %d", members, 2*n)
	}
	if calls != 1 {
		t.Errorf("%d posting merge requests for %d new series, want 1", calls, n)
	}
	got, err := c.Series(context.Background(), catalog.Query{Prefix: "load/"})
	if err != nil || len(got) != n {
		t.Fatalf("listed %d series (%v), want %d", len(got), err, n)
	}
}

// slowDeclare answers every declaration only after a delay: a registry replica that is
// slow, not failed.
type slowDeclare struct {
	*replica.Local
	delay time.Duration
}

func (r slowDeclare) DeclareSeries(ctx context.Context, key string, d store.Decl) (store.Decl, error) {
	<-time.After(r.delay)
	return r.Local.DeclareSeries(ctx, key, d)
}

func (r slowDeclare) DeclareMany(ctx context.Context, keys []string, ds []store.Decl) ([]store.Decl, []error, error) {
	<-time.After(r.delay)
	return r.Local.DeclareMany(ctx, keys, ds)
}

// A write whose new series took long to ready, with no replica failed, did not wait
// for failed replicas: its results say so (they once said every such series had, and
// the node logged each one).
func TestPutManySlowPrepareIsNoWait(t *testing.T) {
	cfg := testConfig()
	cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum, cfg.LocalBatches = 1, 1, 1, true
	self := dht.Peer{ID: "self", RPCAddr: "self:1"}
	local := slowDeclare{delay: 80 * time.Millisecond,
		Local: replica.New(replica.Config{Store: store.NewMem(), Quantum: cfg.Quantum, Format: cfg.Format, MaxFuture: cfg.MaxFuture})}
	replicas := cluster.NewReplicas(self.ID, local, nil, cfg.CallTimeout, nil)
	place := &clustertest.FixedPlacement{Me: self, Owners: []dht.Peer{self}}
	logger := slog.New(slog.DiscardHandler)
	c := New(cfg, place, replicas, NewRegistry(place, replicas, cfg, logger), nil, nil, logger)
	puts := []SeriesPut{
		{Key: "slow/a", Points: series.Points{Type: series.Float, T: []int64{1e9}, F: []float64{1}}},
		{Key: "slow/b", Points: series.Points{Type: series.Float, T: []int64{1e9}, F: []float64{2}}},
	}
	start := time.Now()
	res := c.PutMany(context.Background(), puts, wire.PutOptions{})
	if took := time.Since(start); took < 80*time.Millisecond {
		t.Fatalf("the write took %v: the registry replica was not slow", took)
	}
	for i, r := range res {
		if r.Err != nil || r.Stored != 1 {
			t.Fatalf("series %d: stored %d, %v", i, r.Stored, r.Err)
		}
		if r.Waited != 0 {
			t.Errorf("series %d: waited %v for failed replicas, none failed", i, r.Waited)
		}
	}
}

// Marks of late points go to the rollup homes only for series of the cluster's quantum
// (or not known here): the homes keep rollups of no other (rollupAggregate).
func TestKeepsRollups(t *testing.T) {
	c := oneNode(t, nil)
	c.types.remember("own/q", Desc{Type: series.Float, Q: 3600})
	c.types.remember("cluster/q", Desc{Type: series.Float, Q: c.cfg.Quantum})
	for key, want := range map[string]bool{"own/q": false, "cluster/q": true, "unknown/q": true} {
		if got := c.keepsRollups(key); got != want {
			t.Errorf("keepsRollups(%q) = %v, want %v", key, got, want)
		}
	}
}

// Queued items go in calls of at most maxBytes (as size counts), so that a request and
// its answer fit an RPC frame; an item larger than that goes alone.
func TestCoalescerBytes(t *testing.T) {
	h := newHeldCalls()
	release, mu := h.release, &h.mu
	c := newCoalescer(100, 1000, func(in int) int { return in }, func(_ context.Context, _ string, ins []int) ([]int, error) {
		h.record(ins)
		return ins, nil
	})
	var wg sync.WaitGroup
	wg.Go(func() { c.do(context.Background(), "k", 1) })
	waitFor(t, "the first call", func() bool { mu.Lock(); defer mu.Unlock(); return len(h.calls) == 1 })
	for _, in := range []int{600, 300, 2000, 400, 500} {
		wg.Go(func() {
			if out, err := c.do(context.Background(), "k", in); err != nil || out != in {
				t.Errorf("item %d: %d, %v", in, out, err)
			}
		})
		waitFor(t, "the item queued", func() bool { return c.queued("k") > 0 && c.lastQueued("k") == in })
	}
	close(release)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(h.calls[1:]) != "[[600 300] [2000] [400 500]]" {
		t.Fatalf("calls after the first: %v, want [[600 300] [2000] [400 500]]", h.calls[1:])
	}
}

// lastQueued returns the item queued last behind key's call under way.
func (c *coalescer[K, In, Out]) lastQueued(key K) In {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.busy[key]
	b := q.waiting[len(q.waiting)-1]
	return b.ins[len(b.ins)-1]
}
