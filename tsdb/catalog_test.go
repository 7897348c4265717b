package tsdb

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

func keysOf(es []catalog.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Key
	}
	return out
}

// TestCatalogListMetaDelete walks the catalog's life through the coordinator: a first
// write creates the entry and posts the series, meta tags it, listings find it by tag
// and by prefix from any node, a range delete removes exactly the range, and a whole
// delete frees the key for a series of another type.
func TestCatalogListMetaDelete(t *testing.T) {
	lc := startCluster(t, 5, nil)
	ctx := context.Background()
	t0 := clustertest.Base()
	keys := []string{"pmu1/bus1/freq", "pmu1/bus2/freq", "pmu2/bus1/freq", "db/cpu,host=a#usage"}
	for _, k := range keys {
		if _, err := lc.Nodes[0].Coordinator().Put(ctx, k, clustertest.SixtyHz(t0, 1200), PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i, k := range keys[:3] {
		bus := fmt.Sprint(1 + i%2)
		_, err := lc.Nodes[1].Coordinator().Meta(ctx, &wire.MetaReq{Key: k, SetUnit: true, Unit: "Hz",
			SetTags: true, AddTags: true, Tags: []string{"bus=" + bus, "kind=freq", "station=pmu" + k[3:4]}})
		if err != nil {
			t.Fatal(err)
		}
	}
	list := func(node int, q catalog.Query) []string {
		t.Helper()
		es, err := lc.Nodes[node].Coordinator().Series(ctx, q)
		if err != nil {
			t.Fatalf("Series(%+v): %v", q, err)
		}
		return keysOf(es)
	}
	cases := []struct {
		q    catalog.Query
		want string
	}{
		{catalog.Query{}, fmt.Sprint([]string{"db/cpu,host=a#usage", "pmu1/bus1/freq", "pmu1/bus2/freq", "pmu2/bus1/freq"})},
		{catalog.Query{Match: []catalog.Tag{{K: "bus", V: "1"}}}, fmt.Sprint([]string{"pmu1/bus1/freq", "pmu2/bus1/freq"})},
		{catalog.Query{Match: []catalog.Tag{{K: "bus", V: "1"}, {K: "station", V: "pmu1"}}}, fmt.Sprint([]string{"pmu1/bus1/freq"})},
		{catalog.Query{Prefix: "pmu1/"}, fmt.Sprint([]string{"pmu1/bus1/freq", "pmu1/bus2/freq"})},
		{catalog.Query{Prefix: "pmu"}, fmt.Sprint([]string{"pmu1/bus1/freq", "pmu1/bus2/freq", "pmu2/bus1/freq"})},
		{catalog.Query{Prefix: "db/cpu,"}, fmt.Sprint([]string{"db/cpu,host=a#usage"})},
	}
	for node := range lc.Nodes {
		for _, c := range cases {
			if got := fmt.Sprint(list(node, c.q)); got != c.want {
				t.Errorf("node %d, %+v: got %s, want %s", node, c.q, got, c.want)
			}
		}
	}
	e, err := lc.Nodes[4].Coordinator().Entry(ctx, keys[0])
	if err != nil || e.Type != series.Float || e.Unit != "Hz" || !e.HasBounds || e.First > t0 || e.Last < t0+1199*int64(time.Second)/60 {
		t.Fatalf("entry: %+v %v", e, err)
	}
	// Changing a tag moves the series between postings.
	if _, err := lc.Nodes[2].Coordinator().Meta(ctx, &wire.MetaReq{Key: keys[0], SetTags: true, AddTags: true, Tags: []string{"bus=9"}}); err != nil {
		t.Fatal(err)
	}
	if got := list(3, catalog.Query{Match: []catalog.Tag{{K: "bus", V: "1"}}}); fmt.Sprint(got) != "[pmu2/bus1/freq]" {
		t.Fatalf("after retagging: %v", got)
	}
	if _, err := lc.Nodes[2].Coordinator().Meta(ctx, &wire.MetaReq{Key: "no/such", SetUnit: true, Unit: "V"}); err == nil {
		t.Fatal("meta of an unknown series succeeded")
	}

	// A range delete removes exactly [from, to), across quanta.
	from, to := t0+5*int64(time.Second), t0+12*int64(time.Second)
	if _, err := lc.Nodes[3].Coordinator().Delete(ctx, &wire.DelReq{Key: keys[1], From: from, To: to}); err != nil {
		t.Fatal(err)
	}
	res, err := lc.Nodes[0].Coordinator().Get(ctx, keys[1], t0, t0+int64(time.Minute), GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := clustertest.SixtyHz(t0, 1200)
	kept := 0
	for _, ts := range want.T {
		if ts < from || ts >= to {
			kept++
		}
	}
	if res.Points.Len() != kept {
		t.Fatalf("after a range delete: %d points, want %d", res.Points.Len(), kept)
	}
	for _, ts := range res.Points.T {
		if ts >= from && ts < to {
			t.Fatalf("deleted point at %d still read", ts)
		}
	}

	// A whole delete frees the key: gone from listings, and a string series may take it.
	if _, err := lc.Nodes[4].Coordinator().Delete(ctx, &wire.DelReq{Key: keys[2], Whole: true}); err != nil {
		t.Fatal(err)
	}
	if got := list(0, catalog.Query{Prefix: "pmu2/"}); len(got) != 0 {
		t.Fatalf("deleted series still listed: %v", got)
	}
	if res, err := lc.Nodes[0].Coordinator().Get(ctx, keys[2], t0, t0+int64(time.Minute), GetOptions{}); err == nil && res.Points.Len() > 0 {
		t.Fatalf("a deleted series still reads %d points", res.Points.Len())
	}
	var s series.Points
	s.AppendString(t0+int64(2*time.Minute), "open")
	// Node 0 coordinated the first writes and caches the old type: it must ask again.
	if _, err := lc.Nodes[0].Coordinator().Put(ctx, keys[2], s, PutOptions{}); err != nil {
		t.Fatalf("a new type after a whole delete: %v", err)
	}
	res, err = lc.Nodes[1].Coordinator().Get(ctx, keys[2], t0, t0+int64(3*time.Minute), GetOptions{})
	if err != nil || res.Points.Len() != 1 || res.Points.Type != series.String {
		t.Fatalf("the re-created series: %d points of %s, %v", res.Points.Len(), res.Points.Type, err)
	}
	if got := list(2, catalog.Query{Prefix: "pmu2/"}); fmt.Sprint(got) != "[pmu2/bus1/freq]" {
		t.Fatalf("re-created series not listed: %v", got)
	}
	e, _ = lc.Nodes[2].Coordinator().Entry(ctx, keys[2])
	if e.Type != series.String || len(e.Tags) != 0 {
		t.Fatalf("re-created entry keeps the old incarnation's parts: %+v", e)
	}
}

// forgetfulStore misses deletes while missing is set: the state of a replica that was
// down while a delete ran.
type forgetfulStore struct {
	*store.Mem
	missing atomic.Bool
}

func (f *forgetfulStore) DeleteRange(ref store.ShardRef, key string, from, to int64) (int64, error) {
	if f.missing.Load() {
		return 0, nil
	}
	return f.Mem.DeleteRange(ref, key, from, to)
}

// TestDeleteSurvivesAStaleReplica: a replica that missed a delete neither shows the
// deleted points in reads (the others' tombstones hide them) nor brings them back
// through repair, which deletes them there too.
func TestDeleteSurvivesAStaleReplica(t *testing.T) {
	stores := make([]*forgetfulStore, 4)
	lc := startCluster(t, 4, func(i int, cfg *Config) {
		healConfig(i, cfg)
		stores[i] = &forgetfulStore{Mem: store.NewMem()}
		cfg.Store = stores[i]
	})
	ctx := context.Background()
	t0 := clustertest.Base()
	key := "pmu/stale"
	if _, err := lc.Nodes[0].Coordinator().Put(ctx, key, clustertest.SixtyHz(t0, 1200), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// Put returns at the write quorum: wait for every copy (rf 3 of 1200 points).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		var held int64
		for _, s := range stores {
			held += s.Stats().Points
		}
		if held == 3*1200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d point copies held, want %d", held, 3*1200)
		}
	}
	// One replica holding points of the range misses the delete; every other node
	// applies it.
	from, to := t0, t0+int64(15*time.Second)
	staleNode := -1
	for i, s := range stores {
		s.Pairs(func(ref store.ShardRef, k string) bool {
			if p, _, _ := s.Read(ref, k, from, to); p.Len() > 0 && staleNode < 0 {
				staleNode = i
			}
			return true
		})
	}
	stores[staleNode].missing.Store(true)
	if _, err := lc.Nodes[1].Coordinator().Delete(ctx, &wire.DelReq{Key: key, From: from, To: to}); err != nil {
		t.Fatal(err)
	}
	stores[staleNode].missing.Store(false)
	staleHeld := func() int {
		n := 0
		stores[staleNode].Pairs(func(ref store.ShardRef, k string) bool {
			if k == key {
				p, _, _ := stores[staleNode].Read(ref, k, from, to)
				n += p.Len()
			}
			return true
		})
		return n
	}
	if staleHeld() == 0 {
		t.Fatal("the stale replica holds nothing of the range: the test tests nothing")
	}
	check := func(when string) {
		t.Helper()
		for i, n := range lc.Nodes {
			res, err := n.Coordinator().Get(ctx, key, t0, t0+int64(time.Minute), GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, ts := range res.Points.T {
				if ts >= from && ts < to {
					for j, st := range stores {
						st.Pairs(func(ref store.ShardRef, k string) bool {
							p, _, _ := st.Read(ref, k, ts, ts+1)
							rs, _ := st.Tombstones(ref, k)
							t.Logf("node %d (stale %v) quantum %d: holds the point: %v, tombstones %v", j, j == staleNode, ref.Start, p.Len() > 0, rs)
							return true
						})
					}
					t.Fatalf("%s: node %d reads deleted point %d", when, i, ts)
				}
			}
			if res.Points.Len() != 1200-15*60 {
				t.Fatalf("%s: node %d reads %d points, want %d", when, i, res.Points.Len(), 1200-15*60)
			}
		}
	}
	check("before repair")
	for _, n := range lc.Nodes {
		if _, err := n.RepairNow(ctx); err != nil {
			t.Fatal(err)
		}
	}
	check("after repair")
	if n := staleHeld(); n != 0 {
		t.Fatalf("the stale replica still holds %d deleted points after repair", n)
	}
}

// TestCatalogConvergesAndSurvives: metadata changed while one node is cut off from the
// others' RPC (memberlist still sees it: placement stays, its copies just miss the
// updates) converges once the partition heals and repair runs; then the tags and the
// index survive the loss of rf−1 nodes.
func TestCatalogConvergesAndSurvives(t *testing.T) {
	if testing.Short() {
		t.Skip("six nodes, a partition and two failure detections")
	}
	mn := rpc.NewMemNetwork()
	lc := startCluster(t, 6, func(i int, cfg *Config) {
		healConfig(i, cfg)
		cfg.CallTimeout = 15 * time.Second // -race on a loaded machine
		cfg.Transport = mn.Transport()
		cfg.RPCBind = fmt.Sprintf("127.0.0.%d:7%03d", 1+i, i)
	})
	ctx := context.Background()
	t0 := clustertest.Base()
	var keys []string
	for i := 0; i < 30; i++ {
		k := fmt.Sprintf("pmu%d/ch%d", i%5, i)
		keys = append(keys, k)
		if _, err := lc.Nodes[0].Coordinator().Put(ctx, k, clustertest.SixtyHz(t0, 60), PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cut := lc.Nodes[5].RPCAddr()
	var rest []string
	for _, n := range lc.Nodes[:5] {
		rest = append(rest, n.RPCAddr())
	}
	mn.Partition([]string{cut}, rest)
	for i, k := range keys {
		// Quorum 2 of 3 is reached without node 5 wherever it is an owner.
		if _, err := lc.Nodes[i%5].Coordinator().Meta(ctx, &wire.MetaReq{Key: k, SetTags: true, AddTags: true,
			Tags: []string{fmt.Sprintf("station=s%d", i%5), fmt.Sprintf("even=%v", i%2 == 0)}}); err != nil {
			t.Fatalf("meta of %s during the partition: %v", k, err)
		}
	}
	mn.Heal()
	for _, n := range lc.Nodes {
		if _, err := n.RepairNow(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wantEven := func(node int) {
		t.Helper()
		es, err := lc.Nodes[node].Coordinator().Series(ctx, catalog.Query{Match: []catalog.Tag{{K: "even", V: "true"}, {K: "station", V: "s2"}}})
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for i, k := range keys {
			if i%2 == 0 && i%5 == 2 {
				want = append(want, k)
			}
		}
		sort.Strings(want)
		if fmt.Sprint(keysOf(es)) != fmt.Sprint(want) {
			t.Fatalf("node %d lists %v, want %v", node, keysOf(es), want)
		}
	}
	// Every copy of every entry agrees once repaired: node 5's included.
	for _, k := range keys {
		var first catalog.Entry
		copies := 0
		for _, n := range lc.Nodes {
			e, ok, err := n.Store().(store.Catalog).Entry(k)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				continue
			}
			if copies == 0 {
				first = e
			} else if !catalog.Equal(e, first) {
				t.Fatalf("copies of %s differ after repair: %+v vs %+v", k, e, first)
			}
			copies++
		}
		if copies < 3 || len(first.Tags) != 2 {
			t.Fatalf("%s: %d copies, tags %v", k, copies, first.Tags)
		}
	}
	wantEven(5)

	// Lose rf−1 = 2 nodes at once; after detection and repair every listing still works.
	for _, v := range []int{1, 3} {
		if err := lc.Kill(v); err != nil {
			t.Fatal(err)
		}
	}
	if err := lc.WaitLive(ctx, 4, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, n := range lc.Nodes {
		if n != nil {
			if _, err := n.RepairNow(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, i := range []int{0, 2, 4, 5} {
		wantEven(i)
		es, err := lc.Nodes[i].Coordinator().Series(ctx, catalog.Query{})
		if err != nil || len(es) != len(keys) {
			t.Fatalf("node %d lists %d series after losing two nodes (%v), want %d", i, len(es), err, len(keys))
		}
	}
}
