package tsdb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/coord"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// TestHistoryMany: what a subscription to many series reads when it opens
// (coord.HistoryMany, through node 2 of 3 at rf 3, the points written through node 0)
// is, for each series, exactly what a Get of its range reads: series with points in
// the range, late points among them (written after newer ones), series with points
// only before the range and one never written (none, no error), and a series whose
// range spans too many quanta (refused, to be read alone).
func TestHistoryMany(t *testing.T) {
	lc := startCluster(t, 3, func(_ int, cfg *Config) { cfg.RF = 3 })
	w, err := client.New([]string{lc.Nodes[0].RPCAddr()}, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx := context.Background()
	put := func(key string, ts ...int64) {
		t.Helper()
		p := series.Points{Type: series.Float}
		for _, x := range ts {
			p.AppendFloat(x, float64(x))
		}
		if _, err := w.Put(ctx, key, p, wire.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now().UnixNano()
	sec := int64(time.Second)
	var items []coord.SeriesRange
	from, to := t0-30*sec, t0+int64(10*time.Minute)
	for i := range 40 {
		k := fmt.Sprintf("hm/live/%02d", i)
		var ts []int64
		for j := int64(20); j > 0; j-- {
			ts = append(ts, t0-j*sec/2)
		}
		put(k, ts...)
		if i%2 == 0 {
			put(k, t0-25*sec+int64(i)) // late: older than every point written before
		}
		items = append(items, coord.SeriesRange{Key: k, From: from, To: to})
	}
	for i := range 10 {
		k := fmt.Sprintf("hm/old/%02d", i)
		put(k, t0-int64(2*time.Hour)+int64(i))
		items = append(items, coord.SeriesRange{Key: k, From: from, To: to})
	}
	items = append(items, coord.SeriesRange{Key: "hm/never", From: from, To: to})
	var long []int64
	for j := int64(0); j < 60; j++ {
		long = append(long, t0-j*10*sec)
	}
	slices.Sort(long)
	put("hm/long", long...)
	items = append(items, coord.SeriesRange{Key: "hm/long", From: t0 - int64(11*time.Minute), To: to})

	c := lc.Nodes[2].coord
	got, err := c.HistoryMany(ctx, items, wire.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(items) {
		t.Fatalf("%d results for %d series", len(got), len(items))
	}
	for i, it := range items {
		g := got[i]
		if it.Key == "hm/long" {
			var re *rpc.RemoteError
			if !errors.As(g.Err, &re) || re.Code != wire.CodeTooLarge {
				t.Errorf("%s, 60 quanta: err %v, want %s (read it alone)", it.Key, g.Err, wire.CodeTooLarge)
			}
			continue
		}
		if g.Err != nil {
			t.Errorf("%s: %v", it.Key, g.Err)
			continue
		}
		var want []int64
		if it.Key != "hm/never" {
			res, err := c.Get(ctx, it.Key, it.From, it.To, wire.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want = res.Points.T
		}
		if !slices.Equal(g.Points.T, want) {
			t.Errorf("%s: HistoryMany read %v, Get %v", it.Key, g.Points.T, want)
		}
		switch n := len(g.Points.T); {
		case it.Key[:8] == "hm/live/" && n != 20+(1-i%2):
			t.Errorf("%s: %d points, want %d", it.Key, n, 20+(1-i%2))
		case it.Key[:7] == "hm/old/" && n != 0:
			t.Errorf("%s: %d points in a range after its only one", it.Key, n)
		}
	}
}
