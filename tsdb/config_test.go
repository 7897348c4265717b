package tsdb

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
)

// A Config with nothing but a store and the node's addresses is a working node: no
// replica call times out at once, a point stamped a second ahead is taken, and the
// node repairs.
func TestZeroConfigIsTheDefault(t *testing.T) {
	dir := t.TempDir()
	n, err := Start(Config{Store: store.NewMem(), DHT: dht.Config{DataDir: dir, GossipAddr: "127.0.0.1:0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	want, got := DefaultConfig(), n.cfg
	if got.RF != want.RF || got.CallTimeout != want.CallTimeout || got.MaxFuture != want.MaxFuture ||
		got.RepairInterval != want.RepairInterval || got.RepairRate != want.RepairRate || got.DHT.Quantum != want.DHT.Quantum ||
		got.WriteQuorum != 2 || got.ReadQuorum != 2 {
		t.Fatalf("zero config became %+v", got)
	}
	ctx := context.Background()
	var pts series.Points
	ahead := time.Now().Add(time.Second).UnixNano()
	pts.AppendFloat(ahead, 1)
	if _, err := n.Coordinator().Put(ctx, "z", pts, PutOptions{WriteQuorum: 1}); err != nil {
		t.Fatalf("put a point 1s ahead: %v", err)
	}
	res, err := n.Coordinator().Get(ctx, "z", ahead, ahead+1, GetOptions{ReadQuorum: 1})
	if err != nil || res.Points.Len() != 1 {
		t.Fatalf("get: %d points, %v", res.Points.Len(), err)
	}
	if _, err := n.RepairNow(ctx); err != nil {
		t.Fatalf("repair: %v", err)
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Store: store.NewMem(), RF: 8}, "replication factor 8"},
		{Config{Store: store.NewMem(), RF: 3, WriteQuorum: 4}, "write quorum 4"},
		{Config{Store: store.NewMem(), CallTimeout: -time.Second}, "call timeout"},
		{Config{Store: store.NewMem(), LongReadShare: 1.5}, "long read share 1.5"},
		{Config{Store: store.NewMem(), LongReadShare: -0.1}, "long read share -0.1"},
		{Config{}, "no store"},
	} {
		err := c.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate() = %v; want an error naming %q", err, c.want)
		}
	}
}

// The cluster's quantum is the one in DHT; a store opened with another is refused.
func TestStoreQuantumMustAgree(t *testing.T) {
	dir := t.TempDir()
	opts := store.PebbleOptions{Quantum: quanta.Quantum(60), Sync: store.SyncNone}
	st, err := store.OpenPebble(filepath.Join(dir, "store"), opts)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Store: st, DHT: dht.Config{DataDir: dir, GossipAddr: "127.0.0.1:0", Quantum: quanta.Quantum(10)}}
	err = cfg.Validate()
	st.Close()
	if err == nil || !strings.Contains(err.Error(), "quantum") {
		t.Fatalf("a store at quantum 60s under a cluster at 10s: Validate() = %v", err)
	}
}
