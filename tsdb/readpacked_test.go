package tsdb

import (
	"context"
	"github.com/tsdht/tsdht/tsdb/repair"
	"log/slog"
	"math"
	"sync"
	"testing"

	"github.com/tsdht/tsdht/tsdb/replica"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// float32Readings returns n points at 60 Hz whose values are float32 readings, as a
// C37.118 PMU in floating-point format sends them: no decimal scale fits them.
func float32Readings(t0 int64, n int) series.Points {
	var p series.Points
	for i := 0; i < n; i++ {
		v := math.Mod(0.5*float64(i)/60+0.01*math.Sin(float64(i)*1.7), 360) - 180
		p.AppendFloat(t0+int64(i)*1e9/60+int64(i*7919%2000), float64(float32(v)))
	}
	return p
}

// A replica and a coordinator answer in the packed version their asker decodes: version
// 1 to one that does not say (it predates version 2), the smaller version 2 to one that
// says it decodes it; both carry the same points, and the thin client reads them back.
func TestReadAnswersInTheAskersPackedVersion(t *testing.T) {
	lc := startCluster(t, 1, func(_ int, cfg *Config) { cfg.RF = 1 })
	n := lc.Nodes[0]
	ctx := context.Background()
	q := quanta.Quantum(10)
	start := q.Start(base())
	from, to := q.BeginNanos(start), q.EndNanos(start)
	pts := float32Readings(from, 600)
	if _, err := n.Coordinator().Put(ctx, "s", pts, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	ref := cluster.ShardRef(n.cfg.DHT.Format, "s", start)
	cli := rpc.NewClient(rpc.NewTCPTransport(), rpc.Config{})
	defer cli.Close()
	read := func(version int) wire.ShardResult {
		t.Helper()
		req := &wire.ReadReq{Shards: []wire.ShardRead{{ID: ref.ID[:], Start: start, Key: "s", From: from, To: to,
			Packed: true, PackedVersion: version}}}
		var resp wire.ReadResp
		if err := rpc.Invoke(ctx, cli, n.RPCAddr(), wire.MethodRead, req, &resp); err != nil {
			t.Fatal(err)
		}
		return resp.Shards[0]
	}
	get := func(version int) wire.GetResp {
		t.Helper()
		var resp wire.GetResp
		req := &wire.GetReq{Key: "s", From: from, To: to, Packed: true, PackedVersion: version}
		if err := rpc.Invoke(ctx, cli, n.RPCAddr(), wire.MethodGet, req, &resp); err != nil {
			t.Fatal(err)
		}
		return resp
	}
	type answer struct {
		what   string
		packed []byte
		unpack func() (series.Points, error)
	}
	var answers []answer
	for _, v := range []int{0, series.PackedVersion} {
		r, g := read(v), get(v)
		answers = append(answers,
			answer{"replica read", r.Packed, func() (series.Points, error) { err := r.Unpack(); return r.Points, err }},
			answer{"coordinated get", g.Packed, func() (series.Points, error) { err := g.Unpack(); return g.Points, err }})
	}
	for i, a := range answers {
		asked := 0
		if i >= 2 {
			asked = series.PackedVersion
		}
		want := byte(1)
		if asked >= 2 {
			want = 2
		}
		if len(a.packed) == 0 || a.packed[0] != want {
			t.Fatalf("%s for a reader of version %d: answered in version %v; want %d", a.what, asked, a.packed[:min(1, len(a.packed))], want)
		}
		got, err := a.unpack()
		if err != nil {
			t.Fatalf("%s, version %d: %v", a.what, want, err)
		}
		requireSame(t, pts, got)
	}
	for i := range 2 {
		if v1, v2 := len(answers[i].packed), len(answers[i+2].packed); 10*v2 > 6*v1 {
			t.Errorf("%s: version 2 took %d bytes, version 1 %d; want it well below", answers[i].what, v2, v1)
		}
	}

	c, err := NewClient([]string{n.RPCAddr()}, DefaultClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Get(ctx, "s", from, to, GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	requireSame(t, pts, res.Points)
}

// versionRecorder records the packed versions a coordinator asks its replicas for.
type versionRecorder struct {
	cluster.Replica
	mu       sync.Mutex
	versions []int
}

func (v *versionRecorder) Read(ctx context.Context, req *wire.ReadReq) (*wire.ReadResp, error) {
	v.mu.Lock()
	for _, s := range req.Shards {
		if s.Packed {
			v.versions = append(v.versions, s.PackedVersion)
		}
	}
	v.mu.Unlock()
	return v.Replica.Read(ctx, req)
}

// A coordinator asks replicas for points in the newest packed version it decodes.
func TestCoordinatorAsksNewestPackedVersion(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 1, 1, 1
	logger := slog.New(slog.DiscardHandler)
	self := dht.Peer{ID: "self", RPCAddr: "self:1"}
	rec := &versionRecorder{Replica: replica.New(replica.Config{Store: store.NewMem(), Quantum: cfg.DHT.Quantum, Format: cfg.DHT.Format,
		Stats: func() wire.NodeStats { return wire.NodeStats{} }})}
	replicas := replicaMap{"self": rec}
	place := &fixedPlacement{self: self, owners: []dht.Peer{self}}
	coord := newCoordinator(&cfg, place, replicas, newRegistry(place, replicas, &cfg, logger), nil, logger)
	ctx := context.Background()
	q := cfg.DHT.Quantum
	from := q.BeginNanos(q.Start(base()))
	pts := float32Readings(from, 3*60*int(q))
	if _, err := coord.Put(ctx, "s", pts, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err := coord.Get(ctx, "s", from, pts.T[pts.Len()-1]+1, GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	requireSame(t, pts, res.Points)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.versions) == 0 {
		t.Fatal("the read asked no replica for packed points")
	}
	for _, v := range rec.versions {
		if v != series.PackedVersion {
			t.Fatalf("the coordinator asked for packed version %d; want %d", v, series.PackedVersion)
		}
	}
}

// Repair's fetch of an owner's copy of a damaged pair asks for the newest packed
// version too (an owner that predates it answers in version 1, which DecodePacked
// reads as well: TestReadAnswersInTheAskersPackedVersion).
func TestRepairRefetchAsksNewestPackedVersion(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 2, 1, 1
	logger := slog.New(slog.DiscardHandler)
	local := func(st store.Store) *replica.Local {
		return replica.New(replica.Config{Store: st, Quantum: cfg.DHT.Quantum, Format: cfg.DHT.Format, Stats: func() wire.NodeStats { return wire.NodeStats{} }})
	}
	self, owner := dht.Peer{ID: "self", RPCAddr: "self:1"}, dht.Peer{ID: "a", RPCAddr: "a:1"}
	selfStore, ownerStore := store.NewMem(), store.NewMem()
	rec := &versionRecorder{Replica: local(ownerStore)}
	replicas := replicaMap{self.ID: local(selfStore), owner.ID: rec}
	place := &fixedPlacement{self: self, owners: []dht.Peer{self, owner}}
	types := newRegistry(place, replicas, &cfg, logger)
	rep := repair.NewRepairer(cfg.repairConfig(), place, replicas, selfStore, selfStore, types, logger)

	q := cfg.DHT.Quantum
	start := q.Start(base())
	pts := float32Readings(q.BeginNanos(start), 600)
	ref := cluster.ShardRef(cfg.DHT.Format, "s", start)
	if err := ownerStore.Append(ref, "s", pts); err != nil {
		t.Fatal(err)
	}
	if !rep.RefetchDamaged(context.Background(), ref, "s") {
		t.Fatal("refetchDamaged found no copy on the owner that holds one")
	}
	got, _, err := selfStore.Read(ref, "s", q.BeginNanos(start), q.EndNanos(start))
	if err != nil {
		t.Fatal(err)
	}
	requireSame(t, pts, got)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.versions) != 1 || rec.versions[0] != series.PackedVersion {
		t.Fatalf("the refetch asked for packed versions %v; want [%d]", rec.versions, series.PackedVersion)
	}
}
