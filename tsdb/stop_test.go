package tsdb

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"

	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"

	"github.com/tsdht/tsdht/tsdb/repair"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
)

// TestStopKeepsDataRestartMovesOnlyHints stops a node as SIGTERM does (a restart or an
// upgrade) while writes go on, and starts it again on its data: it keeps every pair it
// held, the others keep it as an owner meanwhile (writes succeed, leaving hints), and
// bringing it back moves only what was written while it was down — not its data twice
// (a hand-off before the stop and a copy back after it), which wears a board's eMMC.
func TestStopKeepsDataRestartMovesOnlyHints(t *testing.T) {
	const rf = 3
	dir := t.TempDir()
	cfgs := map[int]Config{}
	tweak := func(i int, cfg *Config) {
		healConfig(i, cfg)
		st, err := store.OpenPebble(filepath.Join(cfg.DHT.DataDir, "store"), store.PebbleOptions{Sync: store.SyncNone})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Store = st
		cfgs[i] = *cfg
	}
	lc, err := StartLocal(context.Background(), 5, dir, tweak)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	ctx := context.Background()
	t0 := clustertest.Base()
	want := map[string]series.Points{}
	for k := range 4 {
		key := fmt.Sprintf("s%d", k)
		want[key] = clustertest.SixtyHz(t0, 7200)
		if _, err := lc.Nodes[0].Coordinator().Put(ctx, key, want[key], PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitHealed(t, lc, rf, 30*time.Second)

	x := 1
	for i, n := range lc.Nodes {
		if i != 0 && n.Store().Stats().Points > lc.Nodes[x].Store().Stats().Points {
			x = i
		}
	}
	held := lc.Nodes[x].Store().Stats()
	pushedBefore := pushedPoints(lc)
	rpcAddr, gossipAddr := lc.Nodes[x].RPCAddr(), lc.Nodes[x].DHT().GossipAddr()
	if err := lc.Nodes[x].Close(); err != nil {
		t.Fatal(err)
	}
	lc.Nodes[x] = nil
	id := nodeIDOf(cfgs[x])
	testutil.WaitFor(t, 10*time.Second, func() bool {
		for _, n := range lc.Nodes {
			if n != nil && memberState(n, id) != dht.StateStopped {
				return false
			}
		}
		return true
	}, "the others to see the node stopped")

	// Writes go on while it is down: they reach quorum on the two others.
	downKey := "during-stop"
	want[downKey] = clustertest.SixtyHz(t0+int64(3*time.Minute), 600)
	if _, err := lc.Nodes[0].Coordinator().Put(ctx, downKey, want[downKey], PutOptions{}); err != nil {
		t.Fatalf("write while a node is stopped: %v", err)
	}

	// Back on its data and its addresses.
	cfg := cfgs[x]
	st, err := store.OpenPebble(filepath.Join(cfg.DHT.DataDir, "store"), store.PebbleOptions{Sync: store.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Stats(); got.Points != held.Points || got.Shards != held.Shards {
		t.Fatalf("the stopped node kept %d points in %d pairs of its %d in %d", got.Points, got.Shards, held.Points, held.Shards)
	}
	cfg.Store, cfg.RPCBind, cfg.DHT.GossipAddr, cfg.DHT.RPCAddr = st, rpcAddr, gossipAddr, ""
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lc.Nodes[x] = n
	if err := lc.WaitLive(ctx, 5, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	waitHealed(t, lc, rf, 30*time.Second)
	moved := pushedPoints(lc) - pushedBefore
	down := want[downKey]
	t.Logf("stopped node held %d points; writes while it was down: %d points; points pushed to heal: %d",
		held.Points, down.Len(), moved)
	// Each of the other rf−1 owners may push the same missed points to the returning
	// node in the same round, so up to (rf−1)× what it missed moves — not what it held.
	if moved > int64((rf-1)*down.Len()) {
		t.Fatalf("healing after a restart pushed %d points, more than %d× the %d written while the node was down", moved, rf-1, down.Len())
	}
	checkAll(t, lc, want)
}

func pushedPoints(lc *LocalCluster) int64 {
	var n int64
	for _, node := range lc.Nodes {
		if node != nil && node.repair != nil {
			n += node.repair.Stats().PushedPoints
		}
	}
	return n
}

// nodeIDOf returns the 40-hex ID of the node whose identity lives in cfg's data dir.
func nodeIDOf(cfg Config) string {
	id, err := dht.LoadOrCreateIdentity(cfg.DHT.DataDir)
	if err != nil {
		panic(err)
	}
	return cluster.NodeID(dht.NewPeer(id, ""))
}

func memberState(n *Node, id string) dht.MemberState {
	for _, m := range n.DHT().Members() {
		if cluster.NodeID(m.Peer) == id {
			return m.State
		}
	}
	return ""
}

// TestRepairRefetchesDamagedPair damages a table of one node's store while it is
// stopped: after it is back, its repair pass does not stop at the damaged pairs but
// replaces each with another owner's copy, and the node reads them whole again.
func TestRepairRefetchesDamagedPair(t *testing.T) {
	const rf = 3
	dir := t.TempDir()
	cfgs := map[int]Config{}
	// Long quanta: each pair is a few large blocks, so that the damage lands in a
	// block of points, not in the small records that list the pairs.
	tweak := func(i int, cfg *Config) {
		healConfig(i, cfg)
		cfg.DHT.Quantum = 600
		st, err := store.OpenPebble(filepath.Join(cfg.DHT.DataDir, "store"), store.PebbleOptions{Sync: store.SyncNone, Quantum: 600})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Store = st
		cfgs[i] = *cfg
	}
	lc, err := StartLocal(context.Background(), 3, dir, tweak)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	ctx := context.Background()
	t0 := clustertest.Base()
	t0 = t0 / int64(600*time.Second) * int64(600*time.Second)
	// Random values: a smooth series compresses to a few bytes a quantum.
	rng := rand.New(rand.NewSource(1))
	var noisy series.Points
	for i := range 60 * 60 * 10 {
		noisy.AppendFloat(t0+int64(i)*int64(time.Second)/60, rng.Float64())
	}
	want := map[string]series.Points{"dmg": noisy}
	if _, err := lc.Nodes[0].Coordinator().Put(ctx, "dmg", want["dmg"], PutOptions{}); err != nil {
		t.Fatal(err)
	}
	waitHealed(t, lc, rf, 30*time.Second)
	x := 2
	st := lc.Nodes[x].Store().(*store.Pebble)
	if err := st.Flush(); err != nil {
		t.Fatal(err)
	}
	rpcAddr, gossipAddr := lc.Nodes[x].RPCAddr(), lc.Nodes[x].DHT().GossipAddr()
	if err := lc.Nodes[x].Close(); err != nil {
		t.Fatal(err)
	}
	lc.Nodes[x] = nil
	sdir := filepath.Join(cfgs[x].DHT.DataDir, "store")
	tables, _ := filepath.Glob(filepath.Join(sdir, "*.sst"))
	if len(tables) == 0 {
		t.Fatal("no table file to damage")
	}
	// The largest table holds the points; the small ones the store's own records.
	largest := tables[0]
	for _, f := range tables {
		if a, b := fileSize(f), fileSize(largest); a > b {
			largest = f
		}
	}
	for _, f := range []string{largest} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i := len(b) / 3; i < len(b)/3+64; i++ {
			b[i] ^= 0x5a
		}
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := cfgs[x]
	reopened, err := store.OpenPebble(sdir, store.PebbleOptions{Sync: store.SyncNone, Quantum: 600})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store, cfg.RPCBind, cfg.DHT.GossipAddr, cfg.DHT.RPCAddr = reopened, rpcAddr, gossipAddr, ""
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lc.Nodes[x] = n
	if err := lc.WaitLive(ctx, 3, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	stats, err := n.RepairNow(ctx)
	if err != nil {
		t.Fatalf("a repair pass over a damaged store: %v", err)
	}
	if stats.Refetched == 0 || n.Store().Stats().Corruptions == 0 {
		t.Fatalf("the damage went unnoticed: %d pairs re-fetched, %d corrupt reads", stats.Refetched, n.Store().Stats().Corruptions)
	}
	q := cfg.DHT.Quantum
	bad := 0
	if err := n.Store().(repair.Walker).Pairs(func(ref store.ShardRef, key string) bool {
		if _, _, err := n.Store().Read(ref, key, q.BeginNanos(ref.Start), q.EndNanos(ref.Start)); err != nil {
			bad++
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if bad > 0 {
		t.Fatalf("%d pairs still damaged after a pass that re-fetched %d", bad, stats.Refetched)
	}
	t.Logf("re-fetched %d damaged pairs; %d corrupt reads counted", stats.Refetched, n.Store().Stats().Corruptions)
	checkAll(t, lc, want)
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}
