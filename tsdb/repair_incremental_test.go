package tsdb

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"

	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"

	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/repair"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
)

// pebbleCluster starts n nodes with pebble stores that seal only when told.
func pebbleCluster(t testing.TB, n int, tweak func(i int, cfg *Config)) *LocalCluster {
	t.Helper()
	lc, err := StartLocal(context.Background(), n, t.TempDir(), func(i int, cfg *Config) {
		healConfig(i, cfg)
		st, err := store.OpenPebble(filepath.Join(cfg.DHT.DataDir, "store"), store.PebbleOptions{Sync: store.SyncNone, SealInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Store = st
		if tweak != nil {
			tweak(i, cfg)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	return lc
}

func sealAll(t testing.TB, lc *LocalCluster) {
	t.Helper()
	for _, n := range lc.Nodes {
		if n != nil {
			if _, err := n.Store().(*store.Pebble).SealNow(time.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// autoPass runs one periodic-style pass on node i and returns how many pairs it compared.
func autoPass(t testing.TB, lc *LocalCluster, i int) int64 {
	t.Helper()
	r := lc.Nodes[i].repair
	before := r.Counters().Compared
	if err := r.Pass(context.Background(), repair.PassAuto); err != nil {
		t.Fatal(err)
	}
	return r.Counters().Compared - before
}

// Between full passes a pass compares what changed: nothing on an idle node holding
// sealed data, exactly the touched pair after a late write; the full-pass interval and
// RepairNow compare everything again — and a full pass finds a copy lost without any
// write (which the passes between cannot see). A membership change:
// TestJoinComparesWhatMoved.
func TestRepairPassesCostWhatChanged(t *testing.T) {
	lc := pebbleCluster(t, 3, nil)
	ctx := context.Background()
	t0 := clustertest.Base()
	want := map[string]series.Points{}
	for k := range 4 {
		key := fmt.Sprintf("pmu%d/freq", k)
		want[key] = clustertest.SixtyHz(t0, 60*60) // a minute: six 10 s quanta
		if _, err := lc.Nodes[0].Coordinator().Put(ctx, key, want[key], PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sealAll(t, lc)
	held := lc.Nodes[0].Store().Stats().Shards // rf 3 on 3 nodes: every node holds every pair
	if held < 24 || lc.Nodes[1].Store().Stats().Shards != held || lc.Nodes[2].Store().Stats().Shards != held {
		t.Fatalf("nodes hold %d, %d, %d pairs; want the same, ≥ 24 (4 series × 6+ quanta)", held,
			lc.Nodes[1].Store().Stats().Shards, lc.Nodes[2].Store().Stats().Shards)
	}
	// After a full pass, one with nothing changed compares nothing.
	quiet(t, lc, 0, int64(held))

	// A late point into one sealed pair: that pair, and only it, is compared.
	var latePair heldPair
	if err := lc.Nodes[0].Store().(*store.Pebble).Pairs(func(ref store.ShardRef, key string) bool {
		if key == "pmu2/freq" && (latePair.key == "" || ref.Start < latePair.ref.Start) {
			latePair = heldPair{ref, key}
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	before, _ := holds(t, lc.Nodes[0], latePair)
	late := series.Points{Type: series.Float, T: []int64{t0 + 5}, F: []float64{-1}}
	if _, err := lc.Nodes[1].Coordinator().Put(ctx, "pmu2/freq", late, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	want["pmu2/freq"] = series.Merge(want["pmu2/freq"], late)
	// The put returned at the write quorum: wait for node 0's copy too.
	testutil.WaitFor(t, 10*time.Second, func() bool {
		n, _ := holds(t, lc.Nodes[0], latePair)
		return n == before+1
	}, "node 0 to hold the late point")
	if n := autoPass(t, lc, 0); n != 1 {
		t.Fatalf("after a late point: compared %d pairs, want 1", n)
	}

	// A copy lost without a write (a replica's pair gone): only a full pass sees it. Not
	// a pair of the late point's series: its pair changed since the last full pass (the
	// seal below re-seals it), so a pass between full ones may rightly compare it. A late
	// gossip update may move a node's placement version and so make some node's next
	// pass (node 0's here, or a background one elsewhere) full, which rightly restores
	// the copy: then the test has not tested anything, and tries again.
	for attempt := 0; ; attempt++ {
		var lost heldPair
		if err := lc.Nodes[2].Store().(*store.Pebble).Pairs(func(ref store.ShardRef, key string) bool {
			if key == latePair.key {
				return true
			}
			lost = heldPair{ref, key}
			return false
		}); err != nil {
			t.Fatal(err)
		}
		fulls := fullPassesOf(lc)
		if err := lc.Nodes[2].Store().(repair.Walker).Delete(lost.ref, lost.key); err != nil {
			t.Fatal(err)
		}
		sealAll(t, lc)
		autoPass(t, lc, 0)
		_, back := holds(t, lc.Nodes[2], lost)
		if back && fullPassesOf(lc) == fulls {
			t.Fatal("the lost copy came back without a full pass; the test no longer tests what it says")
		}
		quiet(t, lc, 0, int64(held))
		if _, ok := holds(t, lc.Nodes[2], lost); !ok {
			t.Fatalf("a full pass did not restore the lost copy of %s/%d", lost.key, lost.ref.Start)
		}
		if !back {
			break
		}
		if attempt == 5 {
			t.Fatal("every attempt met a full pass between the loss and the check")
		}
		t.Logf("attempt %d: a full pass ran between the loss and the check; again", attempt)
	}

	// The full-pass interval, then a membership change, make the next pass full.
	r := lc.Nodes[0].repair
	r.DueFull()
	if n := autoPass(t, lc, 0); n != int64(held) {
		t.Fatalf("with a full pass due: compared %d pairs, want %d", n, held)
	}

}

// A join: the passes it brings compare the pairs whose owners it moved, not every pair
// held, and still put every pair on its owners. Which pairs moved is computed here with
// dht.ClosestPeers over the member lists before and after (the repairer computes it its
// own way, through dht.View). Key-first shard IDs and rf 2 of 3 spread the pairs over
// owner sets; which of a node's pairs a join moves depends on the random node IDs (it may
// move all of one node's), so every node that was there is checked, and some node must
// have kept some pairs' owners.
func TestJoinComparesWhatMoved(t *testing.T) {
	tweak := func(i int, cfg *Config) {
		cfg.DHT.Format = quanta.KFI
		cfg.RF = 2
	}
	lc := pebbleCluster(t, 3, tweak)
	ctx := context.Background()
	t0 := clustertest.Base()
	want := map[string]series.Points{}
	for k := range 48 {
		key := fmt.Sprintf("pmu%d/ch%d", k/4, k%4)
		want[key] = clustertest.SixtyHz(t0, 60*20)
		if _, err := lc.Nodes[0].Coordinator().Put(ctx, key, want[key], PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sealAll(t, lc)
	type before struct {
		mine                   []heldPair
		compared, moved, fulls int64
	}
	var was [3]before
	for i := range was {
		quiet(t, lc, i, int64(lc.Nodes[i].Store().Stats().Shards))
	}
	for i := range was {
		if err := lc.Nodes[i].Store().(*store.Pebble).Pairs(func(ref store.ShardRef, key string) bool {
			was[i].mine = append(was[i].mine, heldPair{ref, key})
			return true
		}); err != nil {
			t.Fatal(err)
		}
		r := lc.Nodes[i].repair
		c := r.Counters()
		was[i].compared, was[i].moved, was[i].fulls = c.Compared, c.MovedPasses, c.FullPasses
	}
	membersBefore := lc.Nodes[0].DHT().Live()
	if _, err := lc.Add(func(i int, cfg *Config) {
		healConfig(i, cfg)
		tweak(i, cfg)
	}); err != nil {
		t.Fatal(err)
	}
	if err := lc.WaitLive(ctx, 4, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for i := range was {
		autoPass(t, lc, i) // the join's own passes may have run in the background already
	}
	// Placed by the passes the join brings (waitHealed runs RepairNow: full passes).
	testutil.WaitFor(t, 30*time.Second, func() bool {
		bad, _ := misplaced(t, lc, 2)
		return bad == 0
	}, "the join's passes to put every pair on its owners")
	membersAfter := lc.Nodes[0].DHT().Live()
	kept := 0
	for i, w := range was {
		moved := 0
		for _, pr := range w.mine {
			if !cluster.SamePeers(dht.ClosestPeers(membersBefore, pr.ref.ID, 2), dht.ClosestPeers(membersAfter, pr.ref.ID, 2)) {
				moved++
			}
		}
		kept += len(w.mine) - moved
		r := lc.Nodes[i].repair
		c := r.Counters()
		compared, movedPasses, fullPasses := c.Compared-w.compared, c.MovedPasses-w.moved, c.FullPasses-w.fulls
		if movedPasses == 0 || fullPasses != 0 {
			t.Fatalf("node %d after the join: %d membership passes, %d full ones; want membership passes only", i, movedPasses, fullPasses)
		}
		if compared < int64(moved) || moved < len(w.mine) && compared >= int64(len(w.mine)) {
			t.Fatalf("after a join that moved %d of node %d's %d pairs, its passes compared %d", moved, i, len(w.mine), compared)
		}
		t.Logf("the join moved %d of node %d's %d pairs; its passes compared %d", moved, i, len(w.mine), compared)
	}
	if kept == 0 {
		t.Fatal("the join moved every pair of every node: the test tested nothing")
	}
	checkAll(t, lc, want)
}

// quiet runs a full pass on node i, which must compare all held pairs, then a
// periodic-style one, which must compare none — again if membership news (a late
// gossip update after start) moved the placement version in between.
func quiet(t *testing.T, lc *LocalCluster, i int, held int64) {
	t.Helper()
	r := lc.Nodes[i].repair
	for attempt := 0; ; attempt++ {
		v := lc.Nodes[i].DHT().Version()
		c0 := r.Counters()
		before, passes := c0.Compared, c0.Passes
		if _, err := lc.Nodes[i].RepairNow(context.Background()); err != nil {
			t.Fatal(err)
		}
		if c := r.Counters(); c.Compared-before != held {
			n := c.Compared - before
			if c.Passes-passes > 1 && attempt < 10 {
				continue // a background pass (membership news) ran beside it and counted too
			}
			t.Fatalf("a full pass compared %d pairs, want all %d", n, held)
		}
		n := autoPass(t, lc, i)
		if n == 0 {
			return
		}
		if lc.Nodes[i].DHT().Version() == v || attempt == 10 {
			t.Fatalf("after a full pass, with nothing changed, a pass compared %d pairs, want 0", n)
		}
	}
}

func holds(t *testing.T, n *Node, pr heldPair) (int64, bool) {
	t.Helper()
	st, held, err := n.Store().(store.Analyzer).PairStats(pr.ref, pr.key)
	if err != nil {
		t.Fatal(err)
	}
	return st.Count, held
}

// fullPassesOf counts the full repair passes every node of lc has completed, after
// waiting for those under way.
func fullPassesOf(lc *LocalCluster) int64 {
	var n int64
	for _, node := range lc.Nodes {
		if node != nil {
			n += node.repair.Counters().FullPasses
		}
	}
	return n
}

// readCounter counts the point reads made of a store.
type readCounter struct {
	*store.Pebble
	reads atomic.Int64
}

func (c *readCounter) Read(ref store.ShardRef, key string, from, to int64) (series.Points, bool, error) {
	c.reads.Add(1)
	return c.Pebble.Read(ref, key, from, to)
}

// A pass after a membership change reads no point: otherwise a node joining or
// restarting would make every node read everything it holds. It compares the pairs the
// change moved to other owners (none here) or, where the placement cannot tell which
// moved, every pair's set hash. RepairNow and the periodic full pass (every
// RepairFullEvery) read every pair, verifying checksums (a scrub).
func TestMembershipPassReadsNoPoints(t *testing.T) {
	var counter *readCounter
	lc := pebbleCluster(t, 3, func(i int, cfg *Config) {
		if i == 0 {
			counter = &readCounter{Pebble: cfg.Store.(*store.Pebble)}
			cfg.Store = counter
		}
	})
	ctx := context.Background()
	t0 := clustertest.Base()
	for k := range 4 {
		if _, err := lc.Nodes[0].Coordinator().Put(ctx, fmt.Sprintf("pmu%d/freq", k), clustertest.SixtyHz(t0, 60*60), PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range []*store.Pebble{counter.Pebble, lc.Nodes[1].Store().(*store.Pebble), lc.Nodes[2].Store().(*store.Pebble)} {
		if _, err := st.SealNow(time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	held := int64(counter.Stats().Shards)
	if held < 24 {
		t.Fatalf("node 0 holds %d pairs, want ≥ 24", held)
	}
	r := lc.Nodes[0].repair
	reads := func(pass func()) int64 {
		before := counter.reads.Load()
		pass()
		return counter.reads.Load() - before
	}
	if n := reads(func() {
		if _, err := lc.Nodes[0].RepairNow(ctx); err != nil {
			t.Fatal(err)
		}
	}); n < held {
		t.Fatalf("RepairNow read %d pairs, want every one of %d", n, held)
	}
	// As after a membership change that moved none of this node's pairs: the placement
	// version moved, the owners did not.
	r.PlacementMoved(true)
	var compared int64
	if n := reads(func() { compared = autoPass(t, lc, 0) }); n != 0 || compared != 0 {
		t.Fatalf("a pass after a membership change that moved nothing compared %d pairs and read %d; want none of either", compared, n)
	}
	// As after a membership change under a placement that cannot say what moved.
	r.PlacementMoved(false)
	if n := reads(func() { compared = autoPass(t, lc, 0) }); n != 0 || compared != held {
		t.Fatalf("a pass after a membership change compared %d pairs and read %d; want %d compared, none read", compared, n, held)
	}
	// The periodic full pass, once RepairFullEvery has passed since the last scrub.
	r.DueFull()
	r.DueScrub()
	if n := reads(func() { autoPass(t, lc, 0) }); n < held {
		t.Fatalf("the periodic full pass read %d pairs, want every one of %d", n, held)
	}
}

// heldPair is a (shard, series) pair a node holds.
type heldPair struct {
	ref store.ShardRef
	key string
}
