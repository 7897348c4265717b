package coord

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"
	"github.com/tsdht/tsdht/tsdb/replica"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// declCountingReplica counts the declaration lookups a replica is asked.
type declCountingReplica struct {
	cluster.Replica
	one, many atomic.Int64 // SeriesDecl, SeriesDecls calls
	down      atomic.Bool  // answers no lookup
}

func (r *declCountingReplica) SeriesDecl(ctx context.Context, key string) (store.Decl, bool, error) {
	r.one.Add(1)
	if r.down.Load() {
		return store.Decl{}, false, fmt.Errorf("replica down")
	}
	return r.Replica.SeriesDecl(ctx, key)
}

func (r *declCountingReplica) SeriesDecls(ctx context.Context, keys []string) ([]cluster.KnownDecl, error) {
	r.many.Add(1)
	if r.down.Load() {
		return nil, fmt.Errorf("replica down")
	}
	return r.Replica.SeriesDecls(ctx, keys)
}

// Registry.lookupMany, over 3 registry replicas, describes every series as lookup
// does — known series of the cluster's quantum and of their own, a series known only
// from an append (no quantum), a series never written, a series deleted, a key asked
// twice — in one request per replica per wire.MaxTypesPerRequest keys, and with one
// replica down still at read quorum, failing as lookup fails when two are.
func TestRegistryLookupManyMatchesLookup(t *testing.T) {
	cfg := testConfig()
	logger := slog.New(slog.DiscardHandler)
	peer := func(id string) dht.Peer { return dht.Peer{ID: id, RPCAddr: id + ":1"} }
	self, a, b, c := peer("self"), peer("a"), peer("b"), peer("c")
	stores := map[string]store.Store{}
	counted := map[string]*declCountingReplica{}
	replicas := clustertest.ReplicaMap{}
	for _, p := range []dht.Peer{self, a, b, c} {
		stores[p.ID] = store.NewMem()
		counted[p.ID] = &declCountingReplica{Replica: replica.New(replica.Config{Store: stores[p.ID], Quantum: cfg.Quantum, Format: cfg.Format})}
		replicas[p.ID] = counted[p.ID]
	}
	place := &clustertest.FixedPlacement{Me: self, Owners: []dht.Peer{a, b, c}}
	writer := New(cfg, place, replicas, NewRegistry(place, replicas, cfg, logger), nil, nil, logger)
	ctx := context.Background()
	t0 := clustertest.Base()
	put := func(key string, q quanta.Quantum) {
		t.Helper()
		if _, err := writer.Put(ctx, key, clustertest.SixtyHz(t0, 10), wire.PutOptions{Quantum: q}); err != nil {
			t.Fatal(err)
		}
	}
	put("own/default", 0)
	put("own/60s", 60)
	put("own/3600s", 3600)
	put("gone", 60)
	if _, err := writer.Delete(ctx, &wire.DelReq{Key: "gone", Whole: true}); err != nil {
		t.Fatal(err)
	}
	// Known at one replica from an append alone: no quantum of its own.
	if _, err := stores["b"].(store.Registry).DeclareSeries("appended", store.Decl{Type: series.Int, NoQuantum: true}); err != nil {
		t.Fatal(err)
	}
	keys := []string{"own/default", "own/60s", "never", "own/3600s", "gone", "appended", "own/60s"}

	compare := func(what string) {
		t.Helper()
		fresh := func() *Registry { return NewRegistry(place, replicas, cfg, logger) }
		before := map[string][2]int64{}
		for id, r := range counted {
			before[id] = [2]int64{r.one.Load(), r.many.Load()}
		}
		descs, errs := fresh().lookupMany(ctx, keys)
		for id, r := range counted {
			one, many := r.one.Load()-before[id][0], r.many.Load()-before[id][1]
			want := int64(1)
			if id == "self" {
				want = 0 // no registry replica
			}
			if one != 0 || many != want {
				t.Errorf("%s: replica %s asked %d single and %d batched lookups; want 0 and %d", what, id, one, many, want)
			}
		}
		for i, k := range keys {
			d, err := fresh().lookup(ctx, k)
			if descs[i] != d || clustertest.Code(errs[i]) != clustertest.Code(err) {
				t.Errorf("%s: %q: lookupMany %+v, %v; lookup %+v, %v", what, k, descs[i], errs[i], d, err)
			}
		}
	}
	compare("all replicas up")
	want := map[string]Desc{"own/default": {series.Float, cfg.Quantum}, "own/60s": {series.Float, 60},
		"own/3600s": {series.Float, 3600}, "appended": {series.Int, cfg.Quantum}}
	descs, errs := NewRegistry(place, replicas, cfg, logger).lookupMany(ctx, keys)
	for i, k := range keys {
		w, known := want[k]
		switch {
		case known && (errs[i] != nil || descs[i] != w):
			t.Errorf("%q: %+v, %v; want %+v", k, descs[i], errs[i], w)
		case !known && clustertest.Code(errs[i]) != wire.CodeUnknownSeries:
			t.Errorf("%q: %+v, %v; want %s", k, descs[i], errs[i], wire.CodeUnknownSeries)
		}
	}

	counted["c"].down.Store(true)
	compare("one replica of 3 down")
	counted["a"].down.Store(true)
	compare("two replicas of 3 down")
	_, errs = NewRegistry(place, replicas, cfg, logger).lookupMany(ctx, []string{"never"})
	if clustertest.Code(errs[0]) != wire.CodeUnavailable {
		t.Errorf("unknown at 1 of 3 replicas, read quorum 2: %v; want %s", errs[0], wire.CodeUnavailable)
	}
	counted["a"].down.Store(false)
	counted["c"].down.Store(false)

	// More keys than one request holds: one request per replica per MaxTypesPerRequest.
	many := make([]string, wire.MaxTypesPerRequest+10)
	for i := range many {
		many[i] = fmt.Sprintf("never/%d", i)
	}
	before := counted["a"].many.Load()
	_, errs = NewRegistry(place, replicas, cfg, logger).lookupMany(ctx, many)
	if n := counted["a"].many.Load() - before; n != 2 {
		t.Errorf("%d keys: %d requests to a replica; want 2", len(many), n)
	}
	for i, err := range errs {
		if clustertest.Code(err) != wire.CodeUnknownSeries {
			t.Fatalf("%q: %v; want %s", many[i], err, wire.CodeUnknownSeries)
		}
	}
}
