package tsdb

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/store"

	"github.com/tsdht/tsdht/tsdb/series"
)

// TestPutManyStoresEachSeriesAsPut writes 40 series (each across several quanta) in
// one PutMany through one node of three at rf 3, with a series whose key is invalid
// and one whose type is already fixed otherwise among them: those two fail alone, with
// the codes Put gives them, and every point of the others reads back from another node.
func TestPutManyStoresEachSeriesAsPut(t *testing.T) {
	lc := startCluster(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c0 := lc.Nodes[0].Coordinator()
	if _, err := c0.Put(ctx, "many/int", intPoints(base(), 3), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	var puts []SeriesPut
	for s := range 40 {
		var p series.Points
		for i := range 30 {
			p.AppendFloat(base()+int64(i)*int64(time.Second), float64(s*1000+i))
		}
		puts = append(puts, SeriesPut{Key: fmt.Sprintf("many/s%d", s), Points: p})
	}
	puts = append(puts, SeriesPut{Key: "", Points: sixtyHz(base(), 5)}, SeriesPut{Key: "many/int", Points: sixtyHz(base(), 5)})
	res := c0.PutMany(ctx, puts, PutOptions{})
	if len(res) != len(puts) {
		t.Fatalf("%d results for %d series", len(res), len(puts))
	}
	if got := code(res[40].Err); got != CodeBadInput || res[40].Stored != 0 {
		t.Errorf("invalid key: stored %d, %v (code %q), want %s", res[40].Stored, res[40].Err, got, CodeBadInput)
	}
	if got := code(res[41].Err); got != CodeTypeMismatch || res[41].Stored != 0 {
		t.Errorf("type conflict: stored %d, %v (code %q), want %s", res[41].Stored, res[41].Err, got, CodeTypeMismatch)
	}
	c2 := lc.Nodes[2].Coordinator()
	for i, p := range puts[:40] {
		if res[i].Err != nil || res[i].Stored != p.Points.Len() {
			t.Fatalf("%s: stored %d of %d: %v", p.Key, res[i].Stored, p.Points.Len(), res[i].Err)
		}
		got, err := c2.Get(ctx, p.Key, p.Points.T[0], p.Points.T[p.Points.Len()-1]+1, GetOptions{ReadQuorum: 3})
		if err != nil {
			t.Fatalf("%s: %v", p.Key, err)
		}
		requireSame(t, p.Points, got.Points)
	}
}

// TestPutManyFailsWithoutQuorum: with a replica dead, a PutMany asking for all three
// copies fails every series with CodeUnavailable once Config.WriteRetry has passed, and
// one asking for two stores them all.
func TestPutManyFailsWithoutQuorum(t *testing.T) {
	lc := startCluster(t, 3, func(_ int, cfg *Config) { cfg.WriteRetry = 300 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := lc.Kill(2); err != nil {
		t.Fatal(err)
	}
	c0 := lc.Nodes[0].Coordinator()
	puts := []SeriesPut{{Key: "q/a", Points: sixtyHz(base(), 20)}, {Key: "q/b", Points: sixtyHz(base(), 20)}}
	for i, r := range c0.PutMany(ctx, puts, PutOptions{WriteQuorum: 2}) {
		if r.Err != nil || r.Stored != 20 {
			t.Fatalf("w=2, %s: stored %d: %v", puts[i].Key, r.Stored, r.Err)
		}
	}
	puts = []SeriesPut{{Key: "q/c", Points: sixtyHz(base(), 20)}, {Key: "q/d", Points: sixtyHz(base(), 20)}}
	for i, r := range c0.PutMany(ctx, puts, PutOptions{WriteQuorum: 3}) {
		if code(r.Err) != CodeUnavailable {
			t.Fatalf("w=3 with a replica dead, %s: stored %d: %v, want %s", puts[i].Key, r.Stored, r.Err, CodeUnavailable)
		}
	}
	for _, r := range c0.PutMany(ctx, puts, PutOptions{WriteQuorum: 4}) {
		if code(r.Err) != CodeBadInput {
			t.Fatalf("w=4 at rf 3: %v, want %s", r.Err, CodeBadInput)
		}
	}
}

func intPoints(t0 int64, n int) series.Points {
	var p series.Points
	for i := range n {
		p.AppendInt(t0+int64(i)*int64(time.Second), int64(i))
	}
	return p
}

// TestPutManyBlamesOnlyTheExpiredSeries: replicas keep 2 h; one series of a PutMany is
// stamped 3 h ago. The replicas refuse the requests that carry it whole; each of their
// shards goes again alone, so the old series alone fails, with CodeExpired, and the
// others are stored on every replica.
func TestPutManyBlamesOnlyTheExpiredSeries(t *testing.T) {
	lc := startCluster(t, 3, func(_ int, cfg *Config) {
		st, err := store.OpenPebble(filepath.Join(cfg.DHT.DataDir, "store"),
			store.PebbleOptions{Sync: store.SyncNone, SealInterval: -1, Retention: 2 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Store = st
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old := time.Now().Add(-3 * time.Hour).UnixNano()
	puts := []SeriesPut{{Key: "exp/old", Points: sixtyHz(old, 10)}}
	for s := range 5 {
		puts = append(puts, SeriesPut{Key: fmt.Sprintf("exp/new%d", s), Points: sixtyHz(base(), 10)})
	}
	res := lc.Nodes[0].Coordinator().PutMany(ctx, puts, PutOptions{})
	if code(res[0].Err) != CodeExpired || res[0].Stored != 0 {
		t.Fatalf("series 3 h old: stored %d, %v; want %s", res[0].Stored, res[0].Err, CodeExpired)
	}
	for i, p := range puts[1:] {
		if r := res[i+1]; r.Err != nil || r.Stored != 10 {
			t.Fatalf("%s: stored %d: %v", p.Key, r.Stored, r.Err)
		}
		got, err := lc.Nodes[1].Coordinator().Get(ctx, p.Key, p.Points.T[0], p.Points.T[9]+1, GetOptions{ReadQuorum: 3})
		if err != nil {
			t.Fatalf("%s: %v", p.Key, err)
		}
		requireSame(t, p.Points, got.Points)
	}
}
