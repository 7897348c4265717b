package coord

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync"
	"testing"

	"log/slog"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"
	"github.com/tsdht/tsdht/tsdb/replica"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// doMany sends an idle key's items at once, cut at max; on a busy key they queue behind
// the call under way, filling its last waiting call before opening others; each item
// gets its own answer.
func TestCoalescerDoMany(t *testing.T) {
	h := newHeldCalls()
	c := newCoalescer(4, math.MaxInt, func(int) int { return 1 }, func(_ context.Context, _ string, ins []int) ([]int, error) {
		h.record(ins)
		out := make([]int, len(ins))
		for i, in := range ins {
			out[i] = 10 * in
		}
		return out, nil
	})
	first := make(chan error, 1)
	go func() { _, err := c.do(context.Background(), "k", 0); first <- err }()
	waitFor(t, "the first call", func() bool { h.mu.Lock(); defer h.mu.Unlock(); return len(h.calls) == 1 })
	var wg sync.WaitGroup
	var outs []int
	var errs []error
	wg.Go(func() { outs, errs = c.doMany(context.Background(), "k", []int{1, 2, 3, 4, 5, 6}) })
	waitFor(t, "the items queued", func() bool { return c.queued("k") == 6 })
	close(h.release)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil || outs[i] != 10*(i+1) {
			t.Fatalf("item %d: %d, %v", i+1, outs[i], err)
		}
	}
	want := [][]int{{0}, {1, 2, 3, 4}, {5, 6}}
	if !reflect.DeepEqual(h.calls, want) {
		t.Errorf("calls %v, want %v", h.calls, want)
	}
	// An idle key: the first call at once, on this goroutine, cut at max.
	h.calls = nil
	if outs, errs = c.doMany(context.Background(), "idle", []int{7, 8, 9, 10, 11}); errs[4] != nil || outs[4] != 110 {
		t.Fatalf("idle key: %v, %v", outs, errs)
	}
	if want := [][]int{{7, 8, 9, 10}, {11}}; !reflect.DeepEqual(h.calls, want) {
		t.Errorf("calls %v, want %v", h.calls, want)
	}
	if outs, errs = c.doMany(context.Background(), "idle", nil); len(outs)+len(errs) != 0 {
		t.Errorf("no items: %v, %v", outs, errs)
	}
}

// entryCounter counts the entry reads and merges a registry replica is asked for.
type entryCounter struct {
	*replica.Local
	mu             sync.Mutex
	reads, merges  int
	readN, mergedN int // entries asked for, merged
}

func (r *entryCounter) Entries(ctx context.Context, keys []string) ([]catalog.Entry, error) {
	r.mu.Lock()
	r.reads++
	r.readN += len(keys)
	r.mu.Unlock()
	return r.Local.Entries(ctx, keys)
}

func (r *entryCounter) MergeEntries(ctx context.Context, es []catalog.Entry) ([]catalog.Entry, error) {
	r.mu.Lock()
	r.merges++
	r.mergedN += len(es)
	r.mu.Unlock()
	return r.Local.MergeEntries(ctx, es)
}

// MergeCatalog counts as one merge of its entries (their postings beside them).
func (r *entryCounter) MergeCatalog(ctx context.Context, lists []catalog.TagMembers, es []catalog.Entry) ([]catalog.Entry, error) {
	r.mu.Lock()
	r.merges++
	r.mergedN += len(es)
	r.mu.Unlock()
	return r.Local.MergeCatalog(ctx, lists, es)
}

func (r *entryCounter) take() (reads, merges, readN, mergedN int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	reads, merges, readN, mergedN = r.reads, r.merges, r.readN, r.mergedN
	r.reads, r.merges, r.readN, r.mergedN = 0, 0, 0, 0
	return reads, merges, readN, mergedN
}

// newSeriesLoad writes one point to each of n new series "load/eNNNN" through a
// coordinator whose one registry replica counts its entry calls.
func newSeriesLoad(t *testing.T, n int) (*Coordinator, *entryCounter, []SeriesPut) {
	t.Helper()
	var counter *entryCounter
	c, puts := loadNewSeries(t, "load/e", n, func(l *replica.Local) cluster.Local {
		counter = &entryCounter{Local: l}
		return counter
	})
	return c, counter, puts
}

// loadNewSeries writes one point to each of n new series prefix+NNNN through a
// coordinator of rf 1 whose one replica (this node) is wrap's of a memory store.
func loadNewSeries(t *testing.T, prefix string, n int, wrap func(*replica.Local) cluster.Local) (*Coordinator, []SeriesPut) {
	t.Helper()
	cfg := testConfig()
	cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 1, 1, 1
	self := dht.Peer{ID: "self", RPCAddr: "self:1"}
	rep := wrap(replica.New(replica.Config{Store: store.NewMem(), Quantum: cfg.Quantum, Format: cfg.Format, MaxFuture: cfg.MaxFuture}))
	replicas := cluster.NewReplicas(self.ID, rep, nil, cfg.CallTimeout, nil)
	place := &clustertest.FixedPlacement{Me: self, Owners: []dht.Peer{self}}
	logger := slog.New(slog.DiscardHandler)
	c := New(cfg, place, replicas, NewRegistry(place, replicas, cfg, logger), nil, nil, logger)
	puts := make([]SeriesPut, n)
	for i := range puts {
		puts[i] = SeriesPut{Key: fmt.Sprintf("%s%04d", prefix, i), Points: series.Points{Type: series.Float, T: []int64{int64(i+1) * 1e9}, F: []float64{1}}}
	}
	for i, r := range c.PutMany(context.Background(), puts, wire.PutOptions{}) {
		if r.Err != nil || r.Stored != 1 {
			t.Fatalf("series %d: stored %d, %v", i, r.Stored, r.Err)
		}
	}
	return c, puts
}

// A write of many new series reads their entries in as few calls as an answer's frame
// allows and merges them in one (not a call per round of the goroutines readying them), and every series is then
// known, with bounds covering its points, and listed.
func TestPutManyNewSeriesOneEntryRound(t *testing.T) {
	c, counter, puts := newSeriesLoad(t, 3*maxPrepareParallel)
	n := len(puts)
	reads, merges, readN, mergedN := counter.take()
	wantReads := (n + entryReadsPerCall - 1) / entryReadsPerCall // an answer's frame bounds a read's keys
	if reads != wantReads || merges != 1 || readN != n || mergedN != n {
		t.Errorf("%d entry reads of %d keys and %d entry merges of %d entries for a write of %d new series, want %d reads and 1 merge",
			reads, readN, merges, mergedN, n, wantReads)
	}
	for _, p := range puts {
		e, err := c.Entry(context.Background(), p.Key)
		if err != nil || !e.HasBounds || e.First > p.Points.T[0] || e.Last < p.Points.T[0] {
			t.Fatalf("%s: %+v, %v", p.Key, e, err)
		}
	}
	got, err := c.Series(context.Background(), catalog.Query{Prefix: "load/"})
	if err != nil || len(got) != n {
		t.Fatalf("listed %d series (%v), want %d", len(got), err, n)
	}
}

// MetaMany tags many series in one entry merge, each as Meta would, and a request that
// is wrong or names an unknown series fails alone.
func TestMetaManyOneEntryRound(t *testing.T) {
	c, counter, puts := newSeriesLoad(t, 2*maxPrepareParallel)
	counter.take()
	reqs := make([]*wire.MetaReq, len(puts))
	for i, p := range puts {
		reqs[i] = wire.TagsMeta(p.Key, map[string]string{"parity": fmt.Sprint(i % 2), "unit": "u"})
	}
	bad := len(reqs)
	reqs = append(reqs, &wire.MetaReq{Key: puts[0].Key, SetTags: true, Pairs: []string{"odd"}}, wire.TagsMeta("load/none", map[string]string{"a": "b"}))
	es, errs := c.MetaMany(context.Background(), reqs)
	for i := range puts {
		if errs[i] != nil || len(es[i].Tags) != 2 {
			t.Fatalf("%s: %+v, %v", puts[i].Key, es[i], errs[i])
		}
	}
	if errs[bad] == nil || errs[bad+1] == nil {
		t.Errorf("odd tag pairs: %v; unknown series: %v; want both refused", errs[bad], errs[bad+1])
	}
	if _, merges, _, mergedN := counter.take(); merges != 1 || mergedN != len(puts) {
		t.Errorf("%d entry merges of %d entries to tag %d series, want 1 of %d", merges, mergedN, len(puts), len(puts))
	}
	got, err := c.Series(context.Background(), catalog.Query{Match: []catalog.Tag{{K: "parity", V: "1"}}})
	if err != nil || len(got) != len(puts)/2 {
		t.Fatalf("parity=1 lists %d series (%v), want %d", len(got), err, len(puts)/2)
	}
	// Removing a tag takes the series out of its posting list.
	e, err := c.Meta(context.Background(), &wire.MetaReq{Key: puts[1].Key, SetTags: true, Pairs: []string{"unit", "u"}})
	if err != nil || len(e.Tags) != 1 {
		t.Fatalf("retag: %+v, %v", e, err)
	}
	if got, err = c.Series(context.Background(), catalog.Query{Match: []catalog.Tag{{K: "parity", V: "1"}}}); err != nil || len(got) != len(puts)/2-1 {
		t.Fatalf("parity=1 lists %d series after one lost it (%v), want %d", len(got), err, len(puts)/2-1)
	}
}

// declareCounter counts the declaration requests a registry replica is asked for.
type declareCounter struct {
	*replica.Local
	mu       sync.Mutex
	calls, n int
}

func (r *declareCounter) DeclareMany(ctx context.Context, keys []string, ds []store.Decl) ([]store.Decl, []error, error) {
	r.mu.Lock()
	r.calls++
	r.n += len(keys)
	r.mu.Unlock()
	return r.Local.DeclareMany(ctx, keys, ds)
}

// A write of many new series declares them in one request to the registry replica; a
// series written with another type than it holds is refused alone.
func TestPutManyNewSeriesOneDeclaration(t *testing.T) {
	var counter *declareCounter
	c, puts := loadNewSeries(t, "load/d", 3*maxPrepareParallel, func(l *replica.Local) cluster.Local {
		counter = &declareCounter{Local: l}
		return counter
	})
	counter.mu.Lock()
	calls, n := counter.calls, counter.n
	counter.calls, counter.n = 0, 0
	counter.mu.Unlock()
	if calls != 1 || n != len(puts) {
		t.Errorf("%d declaration requests of %d series for a write of %d new series, want 1", calls, n, len(puts))
	}
	c.types.forget(puts[0].Key)
	again := []SeriesPut{
		{Key: puts[0].Key, Points: series.Points{Type: series.Int, T: []int64{5e9}, I: []int64{1}}},
		{Key: "load/dnew", Points: series.Points{Type: series.Float, T: []int64{5e9}, F: []float64{1}}},
	}
	res := c.PutMany(context.Background(), again, wire.PutOptions{})
	var re *rpc.RemoteError
	if !errors.As(res[0].Err, &re) || re.Code != wire.CodeTypeMismatch {
		t.Errorf("ints to a float series: %v, want %s", res[0].Err, wire.CodeTypeMismatch)
	}
	if res[1].Err != nil || res[1].Stored != 1 {
		t.Errorf("the new series beside it: stored %d, %v", res[1].Stored, res[1].Err)
	}
}

// A new series written with tags is created with them: posted under them beside its
// prefix in the one posting request and recorded in its entry in the one entry merge,
// so nothing is left to record (Tagged); a series that exists keeps its own tags and is
// not Tagged with others; tags the catalog would refuse are left to the caller.
func TestPutManyNewSeriesCreatedWithTags(t *testing.T) {
	var counter *postingsCounter
	c, puts := loadNewSeries(t, "load/t", 3, func(l *replica.Local) cluster.Local {
		counter = &postingsCounter{Local: l}
		return counter
	})
	counter.mu.Lock()
	counter.calls, counter.members = 0, 0
	counter.mu.Unlock()
	n := 2 * maxPrepareParallel
	tagged := make([]SeriesPut, n)
	for i := range tagged {
		tagged[i] = SeriesPut{Key: fmt.Sprintf("load/u%04d", i), Points: series.Points{Type: series.Float, T: []int64{1e9}, F: []float64{1}},
			Tags: map[string]string{"parity": fmt.Sprint(i % 2)}}
	}
	tagged = append(tagged,
		SeriesPut{Key: puts[0].Key, Points: series.Points{Type: series.Float, T: []int64{2e9}, F: []float64{1}}, Tags: map[string]string{"parity": "0"}},
		SeriesPut{Key: "load/bad", Points: series.Points{Type: series.Float, T: []int64{1e9}, F: []float64{1}}, Tags: map[string]string{"": "x"}})
	res := c.PutMany(context.Background(), tagged, wire.PutOptions{})
	for i := range n {
		if res[i].Err != nil || res[i].Stored != 1 || !res[i].Tagged {
			t.Fatalf("series %d: stored %d, tagged %v, %v", i, res[i].Stored, res[i].Tagged, res[i].Err)
		}
	}
	if r := res[n]; r.Err != nil || r.Tagged {
		t.Errorf("a series that exists, written with tags it lacks: tagged %v, %v; want stored, not tagged", r.Tagged, r.Err)
	}
	if r := res[n+1]; r.Err != nil || r.Tagged {
		t.Errorf("a new series with an empty tag key: tagged %v, %v; want stored, not tagged", r.Tagged, r.Err)
	}
	counter.mu.Lock()
	calls, members := counter.calls, counter.members
	counter.mu.Unlock()
	// Prefix, bucket and tag of each tagged new series; prefix and bucket of the bad one.
	if calls != 1 || members != 3*n+2 {
		t.Errorf("%d posting requests of %d members, want 1 of %d", calls, members, 3*n+2)
	}
	got, err := c.Series(context.Background(), catalog.Query{Match: []catalog.Tag{{K: "parity", V: "1"}}})
	if err != nil || len(got) != n/2 {
		t.Fatalf("parity=1 lists %d series (%v), want %d", len(got), err, n/2)
	}
}
