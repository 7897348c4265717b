package tsdb

import (
	"context"
	"fmt"
	"testing"
	"time"

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
