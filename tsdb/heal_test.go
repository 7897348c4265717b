package tsdb

import (
	"context"
	"fmt"
	"github.com/tsdht/tsdht/tsdb/repair"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
)

// healConfig makes repair passes explicit (RepairNow) apart from those membership
// changes start, and detection fast.
func healConfig(i int, cfg *Config) {
	if os.Getenv("TSDHT_TEST_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("i", i)
	}
	cfg.RepairInterval = time.Hour
	cfg.RepairUnthrottled = true
	cfg.CallTimeout = 2 * time.Second
}

type copyKey struct {
	ref store.ShardRef
	key string
}

// placement lists, for every pair held anywhere, the live nodes that hold it.
func placement(t testing.TB, lc *LocalCluster) map[copyKey][]int {
	t.Helper()
	out := map[copyKey][]int{}
	for i, n := range lc.Nodes {
		if n == nil {
			continue
		}
		w := n.Store().(repair.Walker)
		if err := w.Pairs(func(ref store.ShardRef, key string) bool {
			ck := copyKey{ref, key}
			out[ck] = append(out[ck], i)
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// misplaced counts pairs not held by exactly their rf owners.
func misplaced(t testing.TB, lc *LocalCluster, rf int) (int, string) {
	var any *Node
	for _, n := range lc.Nodes {
		if n != nil {
			any = n
			break
		}
	}
	byID := map[string]int{}
	for i, n := range lc.Nodes {
		if n != nil {
			byID[n.DHT().Self().ID] = i
		}
	}
	bad, example := 0, ""
	for ck, holders := range placement(t, lc) {
		owners := any.DHT().ReplicaSet(ck.ref.ID, rf)
		want := map[int]bool{}
		for _, p := range owners {
			want[byID[p.ID]] = true
		}
		ok := len(holders) == len(want)
		for _, h := range holders {
			ok = ok && want[h]
		}
		if !ok {
			bad++
			example = fmt.Sprintf("%s@%d held by %v, owners %v", ck.key, ck.ref.Start, holders, want)
		}
	}
	return bad, example
}

// waitHealed runs repair passes on every live node until each pair lives on exactly
// its rf owners, and returns how long that took.
func waitHealed(t testing.TB, lc *LocalCluster, rf int, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	ctx := context.Background()
	for {
		for _, n := range lc.Nodes {
			if n != nil {
				if _, err := n.RepairNow(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		bad, example := misplaced(t, lc, rf)
		if bad == 0 {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("after %v, %d pairs are not on exactly their %d owners, e.g. %s", within, bad, rf, example)
		}
	}
}

// ingest writes 1 s batches of 60 Hz points for several series through rotating live
// coordinators until stopped, and records what was acknowledged.
type ingest struct {
	mu    sync.Mutex
	acked map[string]series.Points
	tried map[string]series.Points // acknowledged or not: what a read may return
	stop  chan struct{}
	done  chan struct{}
}

func startIngest(lc *LocalCluster, lcMu *sync.Mutex, keys []string, t0 int64) *ingest {
	in := &ingest{acked: map[string]series.Points{}, tried: map[string]series.Points{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(in.done)
		for sec := 0; ; sec++ {
			select {
			case <-in.stop:
				return
			default:
			}
			for k, key := range keys {
				pts := sixtyHz(t0+int64(sec)*int64(time.Second), 60)
				lcMu.Lock()
				var coord *Coordinator
				for j := range lc.Nodes {
					if n := lc.Nodes[(sec+k+j)%len(lc.Nodes)]; n != nil {
						coord = n.Coordinator()
						break
					}
				}
				lcMu.Unlock()
				if coord == nil {
					return
				}
				in.mu.Lock()
				in.tried[key] = series.Concat(in.tried[key], pts)
				in.mu.Unlock()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				if _, err := coord.Put(ctx, key, pts, PutOptions{}); err == nil {
					in.mu.Lock()
					in.acked[key] = series.Concat(in.acked[key], pts)
					in.mu.Unlock()
				}
				cancel()
			}
		}
	}()
	return in
}

func (in *ingest) halt() map[string]series.Points {
	close(in.stop)
	<-in.done
	return in.acked
}

func liveNode(lc *LocalCluster) *Node {
	for _, n := range lc.Nodes {
		if n != nil {
			return n
		}
	}
	return nil
}

func checkAll(t *testing.T, lc *LocalCluster, want map[string]series.Points) {
	t.Helper()
	for key, pts := range want {
		res, err := liveNode(lc).Coordinator().Get(context.Background(), key, pts.T[0], pts.T[pts.Len()-1]+1, GetOptions{})
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		requireSame(t, pts, res.Points)
	}
}

// checkAcked reads every series and checks that each acknowledged point is there and
// that nothing else is, apart from points of writes that failed (they may land anywhere
// from no replica to all).
func checkAcked(t *testing.T, lc *LocalCluster, in *ingest) {
	t.Helper()
	in.mu.Lock()
	acked, tried := map[string]series.Points{}, map[string]series.Points{}
	for k, v := range in.acked {
		acked[k] = series.Concat(v)
	}
	for k, v := range in.tried {
		tried[k] = series.Concat(v)
	}
	in.mu.Unlock()
	for key, pts := range acked {
		res, err := liveNode(lc).Coordinator().Get(context.Background(), key, pts.T[0], pts.T[pts.Len()-1]+1, GetOptions{})
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		got, all := &res.Points, tried[key]
		j := 0
		for i := range got.T {
			for j < all.Len() && all.T[j] < got.T[i] {
				j++
			}
			if j == all.Len() || all.T[j] != got.T[i] || !all.Equal(j, got, i) {
				t.Fatalf("%s: read point %d=%s was never written", key, got.T[i], got.Value(i))
			}
		}
		k := 0
		for i := range pts.T {
			for k < got.Len() && got.T[k] < pts.T[i] {
				k++
			}
			if k == got.Len() || got.T[k] != pts.T[i] {
				t.Fatalf("%s: acknowledged point %d lost", key, pts.T[i])
			}
		}
	}
}

func TestRepairRestoresReplicationAfterLosses(t *testing.T) {
	if testing.Short() {
		t.Skip("nine nodes and several failure detections")
	}
	const rf = 3
	lc := startCluster(t, 9, healConfig)
	var lcMu sync.Mutex
	keys := []string{"pmu1/freq", "pmu1/vang", "pmu2/freq", "pmu2/vang"}
	in := startIngest(lc, &lcMu, keys, base())

	live := 9
	for round, victims := range [][]int{{2, 5}, {7, 8}} {
		// Let some data land, then lose two nodes at once.
		deadline := time.Now().Add(10 * time.Second)
		for {
			in.mu.Lock()
			first := in.acked[keys[0]]
			in.mu.Unlock()
			n := first.Len()
			if n >= 600*(round+1) || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		lcMu.Lock()
		for _, v := range victims {
			if err := lc.Kill(v); err != nil {
				t.Fatal(err)
			}
		}
		lcMu.Unlock()
		live -= len(victims)
		checkAcked(t, lc, in) // complete before any repair
		if err := lc.WaitLive(context.Background(), live, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		took := waitHealed(t, lc, rf, 60*time.Second)
		held := 0
		for _, n := range lc.Nodes {
			if n != nil {
				held += int(n.Store().Stats().Points)
			}
		}
		t.Logf("round %d: killed %v; rf %d restored %v after detection, %d point copies held", round+1, victims, rf, took.Round(time.Millisecond), held)
	}
	acked := in.halt()
	checkAcked(t, lc, in)
	waitHealed(t, lc, rf, 60*time.Second)
	total := 0
	for _, p := range acked {
		total += p.Len()
	}
	t.Logf("%d acknowledged points, none lost", total)
}

func TestJoinMovesShardsToNewOwners(t *testing.T) {
	if testing.Short() {
		t.Skip("nine nodes")
	}
	const rf = 3
	lc := startCluster(t, 6, healConfig)
	ctx := context.Background()
	want := map[string]series.Points{}
	t0 := base()
	for k := 0; k < 8; k++ {
		key := fmt.Sprintf("pmu%d/freq", k)
		pts := sixtyHz(t0, 60*120)
		if _, err := lc.Nodes[k%6].Coordinator().Put(ctx, key, pts, PutOptions{}); err != nil {
			t.Fatal(err)
		}
		want[key] = pts
	}
	waitHealed(t, lc, rf, 30*time.Second)
	before := placement(t, lc)
	pushedBefore := int64(0)
	for _, n := range lc.Nodes {
		pushedBefore += n.repair.Stats().PushedPoints
	}

	for j := 0; j < 3; j++ {
		if _, err := lc.Add(healConfig); err != nil {
			t.Fatal(err)
		}
	}
	if err := lc.WaitLive(ctx, 9, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	took := waitHealed(t, lc, rf, 60*time.Second)
	after := placement(t, lc)

	// The minimum that had to move: every (pair, new owner) that did not hold it before.
	minPoints, moved := int64(0), int64(0)
	for ck, holders := range after {
		was := map[int]bool{}
		for _, h := range before[ck] {
			was[h] = true
		}
		for _, h := range holders {
			if !was[h] {
				pts, _, _ := lc.Nodes[h].Store().Read(ck.ref, ck.key, -1<<63, 1<<63-1)
				minPoints += int64(pts.Len())
			}
		}
	}
	perNode := make([]int, len(lc.Nodes))
	total := 0
	for _, holders := range after {
		for _, h := range holders {
			perNode[h]++
			total++
		}
	}
	for _, n := range lc.Nodes {
		moved += n.repair.Stats().PushedPoints
	}
	moved -= pushedBefore
	maxShards := 0
	for _, c := range perNode {
		maxShards = max(maxShards, c)
	}
	if len(after) != len(before) {
		t.Fatalf("%d pairs before the join, %d after", len(before), len(after))
	}
	t.Logf("join of 3 nodes into 6: converged in %v; pairs per node %v (max/mean %.2f); moved %d points, minimum %d (%.2f×)",
		took.Round(time.Millisecond), perNode, float64(maxShards)/(float64(total)/float64(len(perNode))), moved, minPoints, float64(moved)/float64(max(1, minPoints)))
	checkAll(t, lc, want)
}

// A decommissioned node hands its shards to the nodes that own them without it before
// it goes: no shard is left short of rf copies, before any other node repairs.
func TestGracefulLeaveHandsOff(t *testing.T) {
	const rf = 3
	lc := startCluster(t, 5, healConfig)
	ctx := context.Background()
	t0 := base()
	for k := 0; k < 4; k++ {
		// Two minutes: twelve quanta, so that (under QFI, where a quantum's shards of
		// every series share a replica set) every node owns some.
		if _, err := lc.Nodes[0].Coordinator().Put(ctx, fmt.Sprintf("s%d", k), sixtyHz(t0, 7200), PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitHealed(t, lc, rf, 30*time.Second) // every third replica write has landed
	leaver := 0
	for i, n := range lc.Nodes {
		if n.Store().Stats().Shards > lc.Nodes[leaver].Store().Stats().Shards {
			leaver = i
		}
	}
	var rest []dht.Peer
	byID := map[string]int{}
	for i, n := range lc.Nodes {
		if i != leaver {
			rest = append(rest, n.DHT().Self())
			byID[n.DHT().Self().ID] = i
		}
	}
	held := lc.Nodes[leaver].Store().Stats().Shards
	resp, err := lc.Nodes[leaver].Decommission(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The pairs may go in the hand-off pass or in the background pass the leave's
	// membership change starts first: what counts is that none is left.
	if resp.StillHeld != 0 {
		t.Errorf("decommission left %d of %d pairs held (%d handed off by its own pass)", resp.StillHeld, held, resp.HandedOff)
	}
	lc.Nodes[leaver] = nil
	short := 0
	for ck, holders := range placement(t, lc) {
		has := map[int]bool{}
		for _, h := range holders {
			has[h] = true
		}
		for _, p := range dht.ClosestPeers(rest, ck.ref.ID, rf) {
			if !has[byID[p.ID]] {
				short++
				break
			}
		}
	}
	if short > 0 {
		t.Fatalf("%d pairs lack a copy on an owner right after node %d handed off its %d", short, leaver, held)
	}
}
