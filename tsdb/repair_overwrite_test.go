package tsdb

import (
	"context"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"
	"github.com/tsdht/tsdht/tsdb/repair"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
)

// An overwrite acknowledged by every replica stays: a replica's copy read before the
// write reached it (a repair pass, a read under way) does not undo the write where it
// landed. Anti-entropy and read repair fill what an owner lacks and keep the values it
// holds; a conflict still there once the pusher's copy has been unchanged for the call
// timeout is settled by a later pass, and the owners agree (repair/conflicts.go).
func TestRepairDoesNotUndoAnOverwrite(t *testing.T) {
	lc := pebbleCluster(t, 3, nil)
	ctx := context.Background()
	t0 := clustertest.Base()
	key := "ow/v"
	all := PutOptions{WriteQuorum: 3}
	old := series.Points{Type: series.Float, T: []int64{t0, t0 + 1e9, t0 + 2e9}, F: []float64{1, 2, 3}}
	if _, err := lc.Nodes[0].Coordinator().Put(ctx, key, old, all); err != nil {
		t.Fatal(err)
	}
	var pr heldPair
	if err := lc.Nodes[0].Store().(*store.Pebble).Pairs(func(ref store.ShardRef, k string) bool {
		if k == key {
			pr = heldPair{ref, k}
		}
		return true
	}); err != nil || pr.key == "" {
		t.Fatalf("node 0 holds no pair of %s (%v)", key, err)
	}
	over := series.Points{Type: series.Float, T: []int64{t0 + 1e9}, F: []float64{-2}}
	if _, err := lc.Nodes[1].Coordinator().Put(ctx, key, over, all); err != nil {
		t.Fatal(err)
	}
	// Node 0's copy as a pass read it before the overwrite reached node 0, and a point
	// the others lack.
	stale := series.Points{Type: series.Float, T: []int64{t0 + 1e9, t0 + 3e9}, F: []float64{2, 4}}
	if err := lc.Nodes[0].Store().Append(pr.ref, key, stale); err != nil {
		t.Fatal(err)
	}
	valueAt := func(i int, ts int64) (float64, bool) {
		pts, _, err := lc.Nodes[i].Store().Read(pr.ref, key, ts, ts+1)
		if err != nil {
			t.Fatal(err)
		}
		if pts.Len() != 1 {
			return 0, false
		}
		return pts.F[0], true
	}
	if err := lc.Nodes[0].repair.Pass(ctx, repair.PassFull); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Nodes[0].Coordinator().Get(ctx, key, t0, t0+4e9, GetOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1, 2} {
		// Read repair runs in the background: wait for the filled point, then look at
		// the overwritten one.
		testutil.WaitFor(t, 10*time.Second, func() bool { _, ok := valueAt(i, t0+3e9); return ok },
			"node %d to be given node 0's point the others lacked", i)
		if v, _ := valueAt(i, t0+1e9); v != -2 {
			t.Fatalf("node %d holds %v at the overwritten timestamp after node 0's pass and a read; want the overwrite, -2", i, v)
		}
	}
	// Node 1's passes: the first finds node 0 keeping its value, a later one, once the
	// conflict has outlived the call timeout, replaces it.
	testutil.WaitFor(t, 20*time.Second, func() bool {
		if err := lc.Nodes[1].repair.Pass(ctx, repair.PassFull); err != nil {
			t.Fatal(err)
		}
		v, _ := valueAt(0, t0+1e9)
		return v == -2
	}, "the owners to agree on the overwrite")
	for i := range 3 {
		if v, _ := valueAt(i, t0+1e9); v != -2 {
			t.Fatalf("node %d holds %v; want -2", i, v)
		}
	}
}
