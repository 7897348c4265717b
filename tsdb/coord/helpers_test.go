package coord

import (
	"log/slog"
	"testing"
	"time"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"
	"github.com/tsdht/tsdht/tsdb/repair"
	"github.com/tsdht/tsdht/tsdb/replica"
	"github.com/tsdht/tsdht/tsdb/store"
)

// testConfig is the coordinator's configuration on a node with the defaults
// (tsdb.DefaultConfig), for tests that build coordinators without nodes.
func testConfig() Config {
	return Config{RF: 3, WriteQuorum: 2, ReadQuorum: 2, Quantum: 10, Format: quanta.QFI, MaxFuture: 10 * time.Minute,
		CallTimeout: 5 * time.Second, WriteRetry: 10 * time.Second, ReadConcurrency: 16, LongReadShare: DefaultLongReadShare}
}

// repairConfig is what a repairer beside a coordinator of cfg takes.
func repairConfig(cfg Config) repair.RepairConfig {
	return repair.RepairConfig{RF: cfg.RF, CallTimeout: cfg.CallTimeout, Interval: 10 * time.Minute,
		FullEvery: 6 * time.Hour, Settle: 500 * time.Millisecond, Rate: 4 << 20, MaxHintPoints: 1 << 20}
}

// diskNode returns the coordinator of a one-node cluster at rf 1 (testConfig otherwise)
// whose replica is wrap's wrapping of one over a store on disk (sync always), closed
// when the test ends: for tests that watch the requests a write makes of its replica.
func diskNode(t testing.TB, wrap func(*replica.Local) cluster.Local) *Coordinator {
	t.Helper()
	cfg := testConfig()
	cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 1, 1, 1
	self := dht.Peer{ID: "self", RPCAddr: "self:1"}
	st, err := store.OpenPebble(t.TempDir(), store.PebbleOptions{Sync: store.SyncAlways, SealInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rep := wrap(replica.New(replica.Config{Store: st, Quantum: cfg.Quantum, Format: cfg.Format, MaxFuture: cfg.MaxFuture}))
	replicas := cluster.NewReplicas(self.ID, rep, nil, cfg.CallTimeout, nil)
	place := &clustertest.FixedPlacement{Me: self, Owners: []dht.Peer{self}}
	logger := slog.New(slog.DiscardHandler)
	return New(cfg, place, replicas, NewRegistry(place, replicas, cfg, logger), nil, nil, logger)
}

// oneNode returns the coordinator of a one-node cluster at rf 1 (testConfig otherwise,
// changed by tweak when not nil), its replica in process over a fresh store in memory:
// the coordinator's own paths, with no network.
func oneNode(t testing.TB, tweak func(*Config)) *Coordinator {
	t.Helper()
	cfg := testConfig()
	cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 1, 1, 1
	if tweak != nil {
		tweak(&cfg)
	}
	self := dht.Peer{ID: "self", RPCAddr: "self:1"}
	local := replica.New(replica.Config{Store: store.NewMem(), Quantum: cfg.Quantum, Format: cfg.Format, MaxFuture: cfg.MaxFuture})
	replicas := cluster.NewReplicas(self.ID, local, nil, cfg.CallTimeout, nil)
	place := &clustertest.FixedPlacement{Me: self, Owners: []dht.Peer{self}}
	logger := slog.New(slog.DiscardHandler)
	_, cfg.LocalBatches = any(store.NewMem()).(store.BatchAppender)
	return New(cfg, place, replicas, NewRegistry(place, replicas, cfg, logger), nil, nil, logger)
}
