package tsdb

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Once the homes pulled a series to its end, every whole window of an aligned range
// older than the horizon comes from the homes, none from the raw shards: asked of a
// coordinator, and through the client, which narrows a long range to the series'
// points (the data here starts after the range does and ends before it).
func TestRollupEveryWindowFromHomes(t *testing.T) {
	lc := rollupCluster(t, 5, quanta.KFI)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	day, minute := int64(24*time.Hour), int64(time.Minute)
	t0, t1 := dayStart(4), dayStart(1)
	pts := everyPoint(t0+3*minute, t1-5*minute, 7*minute, r)
	if _, err := lc.Nodes[0].Coordinator().Put(ctx, "roll/whole", pts, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	checkAgg(t, lc.Nodes[1].Coordinator(), "roll/whole", t0, t0+day, day) // the homes start keeping it
	sealAll(t, lc)
	for range 20 {
		before := rollupPulled(lc)
		rollUp(t, lc)
		if rollupPulled(lc) == before {
			break
		}
	}
	cli, err := client.New([]string{lc.Nodes[3].RPCAddr()}, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// every, and the level that answers it (hits count that level's windows)
	for _, c := range []struct{ every, level int64 }{{day, day}, {int64(time.Hour), int64(time.Hour)}, {10 * minute, minute}} {
		every, want := c.every, (t1-t0)/c.level
		h0, m0 := rollupHits(lc)
		checkAgg(t, lc.Nodes[2].Coordinator(), "roll/whole", t0, t1, every)
		if h, m := rollupHits(lc); h-h0 != want || m-m0 != 0 {
			t.Errorf("coordinator, every %v: %d windows from the homes, %d from raw shards; want %d and 0", time.Duration(every), h-h0, m-m0, want)
		}
		h0, m0 = rollupHits(lc)
		tab, err := cli.Agg(ctx, "roll/whole", t0, t1, every, []agg.Fn{agg.Count}, wire.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n := int64(0)
		for _, row := range tab.Rows {
			n += row.Values[0].I
		}
		if n != int64(pts.Len()) {
			t.Errorf("client, every %v: counts sum to %d, want %d", time.Duration(every), n, pts.Len())
		}
		// The client narrows the range to the windows that hold points.
		lo := max(t0, agg.WindowStart(pts.T[0], every))
		hi := min(t1, agg.WindowStart(pts.T[pts.Len()-1], every)+every)
		if h, m := rollupHits(lc); h-h0 != (hi-lo)/c.level || m-m0 != 0 {
			want = (hi - lo) / c.level
			t.Errorf("client, every %v: %d windows from the homes, %d from raw shards; want %d and 0", time.Duration(every), h-h0, m-m0, want)
		}
	}
}

// A range that ends now is covered coarsest level first: the whole days from the day
// level, today's whole hours older than the horizon from the hour level, the minutes
// after them from the minute level, and only the horizon from the raw shards.
func TestRollupRangeToNowUsesEveryLevel(t *testing.T) {
	lc := rollupCluster(t, 5, quanta.QFI)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(5, 6))
	day, hour, minute := int64(24*time.Hour), int64(time.Hour), int64(time.Minute)
	horizon := int64(3 * time.Minute) // rollupCluster's
	t0 := dayStart(3)
	now := time.Now().UnixNano()
	if _, err := lc.Nodes[0].Coordinator().Put(ctx, "roll/now", everyPoint(t0, now, 3*minute+7, r), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	checkAgg(t, lc.Nodes[1].Coordinator(), "roll/now", t0, t0+day, day) // the homes start keeping it
	sealAll(t, lc)
	for range 20 {
		before := rollupPulled(lc)
		rollUp(t, lc)
		if rollupPulled(lc) == before {
			break
		}
	}
	// What the levels can answer of [t0, at): the days, today's hours and the minutes
	// after them, all older than the horizon.
	levelWindows := func(at int64) int64 {
		edge := at - horizon
		d, h := agg.WindowStart(edge, day), agg.WindowStart(edge, hour)
		return (d-t0)/day + (h-d)/hour + (agg.WindowStart(edge, minute)-h)/minute
	}
	before := levelWindows(time.Now().UnixNano())
	h0, _ := rollupHits(lc)
	checkAgg(t, lc.Nodes[2].Coordinator(), "roll/now", t0, time.Now().UnixNano()+1, day)
	h, _ := rollupHits(lc)
	after := levelWindows(time.Now().UnixNano())
	if got := h - h0; got < before || got > after {
		t.Errorf("%d windows from the homes; want %d to %d (days, today's hours, then minutes)", got, before, after)
	}
}
