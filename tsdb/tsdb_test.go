package tsdb

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

func startCluster(t *testing.T, n int, tweak func(i int, cfg *Config)) *LocalCluster {
	t.Helper()
	lc, err := StartLocal(context.Background(), n, t.TempDir(), tweak)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	return lc
}

func TestPutGetTrimsExactly(t *testing.T) {
	for _, f := range []quanta.Format{quanta.QFI, quanta.KFI} {
		t.Run(f.String(), func(t *testing.T) {
			lc := startCluster(t, 4, func(_ int, cfg *Config) { cfg.DHT.Format = f })
			ctx := context.Background()
			t0 := clustertest.Base()
			all := clustertest.SixtyHz(t0, 3000)
			if n, err := lc.Nodes[0].Coordinator().Put(ctx, "pmu/a", all, PutOptions{}); err != nil || n != 3000 {
				t.Fatalf("put: %d, %v", n, err)
			}
			sec := int64(time.Second)
			for _, r := range [][2]int64{
				{t0, t0 + 50*sec}, {t0 + 1, t0 + 2}, {t0 + 7*sec, t0 + 23*sec + 5}, {t0 - sec, t0 + sec},
				{t0 + 49*sec, t0 + 99*sec}, {t0 + 5*sec, t0 + 5*sec}, {t0 - 100*sec, t0 - 50*sec},
			} {
				res, err := lc.Nodes[3].Coordinator().Get(ctx, "pmu/a", r[0], r[1], GetOptions{})
				if err != nil {
					t.Fatalf("get [%d,%d): %v", r[0], r[1], err)
				}
				clustertest.RequireSame(t, all.Trim(r[0], r[1]), res.Points)
			}
		})
	}
}

// A replica that is not the closest may hold points the closest lacks (a new owner, a
// missed write): a read must find them through the digests and merge them in.
func TestReadMergesPointsOnlyAFartherReplicaHolds(t *testing.T) {
	lc := startCluster(t, 4, nil)
	ctx := context.Background()
	t0 := clustertest.Base()
	pts := clustertest.SixtyHz(t0, 600) // ten quanta
	c := lc.Nodes[0].Coordinator()
	if _, err := c.Put(ctx, "s", pts, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// Plant a point on the third replica of the first quantum, and a whole quantum the
	// closest replica has never seen on the second replica.
	byID := map[string]*Node{}
	for _, n := range lc.Nodes {
		byID[n.DHT().Self().ID] = n
	}
	q := quanta.Quantum(10)
	extra := t0 + 1
	start := q.Start(extra)
	ref := cluster.ShardRef(lc.Nodes[0].cfg.DHT.Format, "s", start)
	replicas := lc.Nodes[0].DHT().ReplicaSet(ref.ID, 3)
	var one series.Points
	one.AppendFloat(extra, 42)
	if err := byID[replicas[2].ID].Store().Append(ref, "s", one); err != nil {
		t.Fatal(err)
	}
	late := t0 + 200*int64(time.Second)
	lref := cluster.ShardRef(lc.Nodes[0].cfg.DHT.Format, "s", q.Start(late))
	lrep := lc.Nodes[0].DHT().ReplicaSet(lref.ID, 3)
	var two series.Points
	two.AppendFloat(late, 7)
	if err := byID[lrep[1].ID].Store().Append(lref, "s", two); err != nil {
		t.Fatal(err)
	}

	res, err := lc.Nodes[1].Coordinator().Get(ctx, "s", t0, late+1, GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := series.Merge(series.Merge(pts, one), two)
	clustertest.RequireSame(t, want, res.Points)
}

// With every replica of a shard unreachable and not yet declared dead, a read must fail
// rather than return the other shards as if they were all.
func TestReadNeverSilentlyShort(t *testing.T) {
	lc := startCluster(t, 3, func(_ int, cfg *Config) {
		cfg.RF = 1
		cfg.CallTimeout = time.Second
		cfg.DHT.ProbeInterval = time.Hour // keep the dead node in the replica sets
		cfg.DHT.ProbeTimeout = time.Minute
	})
	ctx := context.Background()
	t0 := clustertest.Base()
	pts := clustertest.SixtyHz(t0, 60*60) // 60 s: several shards on every node, most likely
	if _, err := lc.Nodes[0].Coordinator().Put(ctx, "s", pts, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// Kill a node that owns at least one shard of the range.
	victim := -1
	for i := 1; i < 3 && victim < 0; i++ {
		if lc.Nodes[i].Store().Stats().Shards > 0 {
			victim = i
		}
	}
	if victim < 0 {
		t.Skip("nodes 1 and 2 own no shard of this series: placement left nothing to kill")
	}
	if err := lc.Kill(victim); err != nil {
		t.Fatal(err)
	}
	_, err := lc.Nodes[0].Coordinator().Get(ctx, "s", t0, t0+int64(time.Minute), GetOptions{})
	if clustertest.Code(err) != CodePartial {
		t.Fatalf("read with an unreachable shard: err = %v, want code %q", err, CodePartial)
	}
	res, err := lc.Nodes[0].Coordinator().Get(ctx, "s", t0, t0+int64(time.Minute), GetOptions{AllowPartial: true})
	if err != nil || !res.Partial || res.Missing == 0 || res.Points.Len() >= pts.Len() {
		t.Fatalf("partial read: %d points, partial=%v missing=%d err=%v", res.Points.Len(), res.Partial, res.Missing, err)
	}
}

func TestTypeIsFixedByFirstWrite(t *testing.T) {
	lc := startCluster(t, 3, nil)
	ctx := context.Background()
	t0 := clustertest.Base()
	var f series.Points
	f.AppendFloat(t0, 1.5)
	if _, err := lc.Nodes[0].Coordinator().Put(ctx, "typed", f, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// Another coordinator, another quantum (so other data replicas): still refused.
	var i series.Points
	i.AppendInt(t0+int64(time.Hour)/2, 7)
	n, err := lc.Nodes[2].Coordinator().Put(ctx, "typed", i, PutOptions{})
	if clustertest.Code(err) != CodeTypeMismatch || n != 0 {
		t.Fatalf("int write into a float series: stored %d, err %v", n, err)
	}
	var s series.Points
	s.AppendString(t0+1, "x")
	if _, err := lc.Nodes[1].Coordinator().Put(ctx, "typed", s, PutOptions{}); clustertest.Code(err) != CodeTypeMismatch {
		t.Fatalf("string write into a float series: %v", err)
	}
	if _, err := lc.Nodes[1].Coordinator().Get(ctx, "never-written", 0, 1, GetOptions{}); clustertest.Code(err) != CodeUnknownSeries {
		t.Fatalf("read of an unknown series: %v", err)
	}
}

func TestBadRequestsAreRefused(t *testing.T) {
	lc := startCluster(t, 1, func(_ int, cfg *Config) { cfg.RF = 1 })
	c := lc.Nodes[0].Coordinator()
	ctx := context.Background()
	var p series.Points
	p.AppendFloat(time.Now().Add(time.Hour).UnixNano(), 1)
	if _, err := c.Put(ctx, "future", p, PutOptions{}); clustertest.Code(err) != CodeBadInput {
		t.Errorf("future point: %v", err)
	}
	var q series.Points
	q.AppendFloat(clustertest.Base(), 1)
	if _, err := c.Put(ctx, "", q, PutOptions{}); clustertest.Code(err) != CodeBadInput {
		t.Errorf("empty key: %v", err)
	}
	if _, err := c.Put(ctx, "k", q, PutOptions{WriteQuorum: 2}); clustertest.Code(err) != CodeBadInput {
		t.Errorf("write quorum above rf: %v", err)
	}
	if _, err := c.Get(ctx, "k", 2, 1, GetOptions{}); clustertest.Code(err) != CodeBadInput {
		t.Errorf("from > to: %v", err)
	}
}

// changingStore is a store whose next data read first lets another write land, as a
// repair push or a delivered hint would between a read's rounds.
type changingStore struct {
	*store.Mem // the whole memory store: its catalog too
	mu         sync.Mutex
	before     func() // run once, at the next Read
}

func (s *changingStore) Read(ref store.ShardRef, key string, from, to int64) (series.Points, bool, error) {
	s.mu.Lock()
	f := s.before
	s.before = nil
	s.mu.Unlock()
	if f != nil {
		f()
	}
	return s.Mem.Read(ref, key, from, to)
}

// Summary passes the whole-quantum digests through to the store beneath.
func (s *changingStore) Summary(ref store.ShardRef, key string) (store.Summary, bool, error) {
	return s.Mem.Summary(ref, key)
}

// Two replicas send the same digest, unlike the closest one's points; the one fetched in
// round two has gained a point in the meantime, so the other's digest now matches
// nothing in hand. The read must ask again, not report the shard unreadable.
func TestReadSettlesReplicasThatChangeMidRead(t *testing.T) {
	stores := make([]*changingStore, 3)
	lc := startCluster(t, 3, func(i int, cfg *Config) {
		stores[i] = &changingStore{Mem: store.NewMem()}
		cfg.Store = stores[i]
		cfg.RepairInterval = time.Hour // nothing but this test changes the stores
	})
	ctx := context.Background()
	q := quanta.Quantum(10)
	start := q.Start(clustertest.Base())
	pts := clustertest.SixtyHz(q.BeginNanos(start), 600)
	if _, err := lc.Nodes[0].Coordinator().Put(ctx, "s", pts, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// Put returns at the write quorum: wait for the third copy too.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if stores[0].Stats().Points == 600 && stores[1].Stats().Points == 600 && stores[2].Stats().Points == 600 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the three replicas never all held the write")
		}
	}
	ref := cluster.ShardRef(lc.Nodes[0].cfg.DHT.Format, "s", start)
	byID := map[string]int{}
	for i, n := range lc.Nodes {
		byID[n.DHT().Self().ID] = i
	}
	replicas := lc.Nodes[0].DHT().ReplicaSet(ref.ID, 3)
	var extra, late series.Points
	extra.AppendFloat(q.BeginNanos(start)+1, 1)
	late.AppendFloat(q.BeginNanos(start)+2, 2)
	for _, r := range replicas[1:] {
		if err := stores[byID[r.ID]].Mem.Append(ref, "s", extra); err != nil {
			t.Fatal(err)
		}
	}
	second := stores[byID[replicas[1].ID]]
	second.mu.Lock()
	second.before = func() {
		if err := second.Mem.Append(ref, "s", late); err != nil {
			t.Error(err)
		}
	}
	second.mu.Unlock()

	// The closest replica coordinates, so round one reads its points (dataReplica reads
	// the coordinator's own copy). Read by the third, the second's digest would match
	// the third's points, and the second, never read, would gain nothing.
	res, err := lc.Nodes[byID[replicas[0].ID]].Coordinator().Get(ctx, "s", q.BeginNanos(start), q.EndNanos(start), GetOptions{})
	if err != nil {
		t.Fatalf("read while a replica changes: %v", err)
	}
	clustertest.RequireSame(t, series.Merge(series.Merge(pts, extra), late), res.Points)
}

// A replica answers a data read packed only when asked: readers that predate the packed
// form get Points, and both carry the same points.
func TestReplicaAnswersPackedOnlyWhenAsked(t *testing.T) {
	lc := startCluster(t, 1, func(_ int, cfg *Config) { cfg.RF = 1 })
	n := lc.Nodes[0]
	ctx := context.Background()
	q := quanta.Quantum(10)
	start := q.Start(clustertest.Base())
	pts := clustertest.SixtyHz(q.BeginNanos(start), 600)
	if _, err := n.Coordinator().Put(ctx, "s", pts, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	ref := cluster.ShardRef(n.cfg.DHT.Format, "s", start)
	cli := rpc.NewClient(rpc.NewTCPTransport(), rpc.Config{})
	defer cli.Close()
	read := func(packed bool) wire.ShardResult {
		t.Helper()
		req := &wire.ReadReq{Shards: []wire.ShardRead{{ID: ref.ID[:], Start: start, Key: "s",
			From: q.BeginNanos(start), To: q.EndNanos(start), Packed: packed}}}
		var resp wire.ReadResp
		if err := rpc.Invoke(ctx, cli, n.RPCAddr(), wire.MethodRead, req, &resp); err != nil {
			t.Fatal(err)
		}
		return resp.Shards[0]
	}
	plain, packed := read(false), read(true)
	if len(plain.Packed) != 0 || plain.Points.Len() != 600 {
		t.Fatalf("unpacked read: %d packed bytes, %d points", len(plain.Packed), plain.Points.Len())
	}
	if packed.Points.Len() != 0 || len(packed.Packed) == 0 || len(packed.Packed) > 4*600 {
		t.Fatalf("packed read: %d points beside %d packed bytes", packed.Points.Len(), len(packed.Packed))
	}
	if err := packed.Unpack(); err != nil {
		t.Fatal(err)
	}
	clustertest.RequireSame(t, pts, packed.Points)
	clustertest.RequireSame(t, pts, plain.Points)
	if packed.Count != plain.Count || packed.Hash != plain.Hash {
		t.Fatal("packed and plain answers carry different digests")
	}
}
