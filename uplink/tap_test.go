package uplink

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/coord"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

func floats(ts ...int64) series.Points {
	var p series.Points
	for _, t := range ts {
		p.AppendFloat(t, float64(t)/3)
	}
	return p
}

// TestTapHoldsWhatTheStoreWould: a tap answers a range as the store would (sorted,
// the last value of a repeated timestamp), holds nothing from before it was armed,
// and is dropped — the store read instead — by a failed write, a write of another
// type and a write past its bound.
func TestTapHoldsWhatTheStoreWould(t *testing.T) {
	ok := []coord.SeriesResult{{}}
	ts := newTaps(10 * 16)
	ts.arm("a", 100, series.Float)
	ts.stored([]coord.SeriesPut{{Key: "a", Points: floats(50, 120, 110)}, {Key: "b", Points: floats(130)}}, []coord.SeriesResult{{}, {}})
	again := series.Points{}
	again.AppendFloat(110, -1)
	ts.stored([]coord.SeriesPut{{Key: "a", Points: again}}, ok)
	if _, held := ts.take("a", 90, 200); held {
		t.Error("the tap answered a range that begins before it was armed")
	}
	got, held := ts.take("a", 100, 200)
	want := series.Points{}
	want.AppendFloat(110, -1)
	want.AppendFloat(120, 40)
	if !held || !series.SameBits(&got, &want) {
		t.Errorf("take = %v %v (held %v), want %v %v", got.T, got.F, held, want.T, want.F)
	}
	if got, _ := ts.take("a", 115, 200); got.Len() != 1 || ts.bytes != 16 {
		t.Errorf("after taking from 115: %v, %d bytes held, want [120] and 16", got.T, ts.bytes)
	}
	if _, held := ts.take("b", 100, 200); held {
		t.Error("a series never armed has a tap")
	}

	drops := map[string]func(){
		"a failed write": func() {
			ts.stored([]coord.SeriesPut{{Key: "a", Points: floats(130)}}, []coord.SeriesResult{{Stored: 1, Err: errors.New("quorum missed")}})
		},
		"another type": func() {
			var p series.Points
			p.AppendInt(130, 1)
			ts.stored([]coord.SeriesPut{{Key: "a", Points: p}}, ok)
		},
		"a write past the bound": func() {
			ts.stored([]coord.SeriesPut{{Key: "a", Points: floats(130, 131, 132, 133, 134, 135, 136, 137, 138, 139)}}, ok)
		},
	}
	for what, write := range drops {
		ts.arm("a", 100, series.Float)
		ts.stored([]coord.SeriesPut{{Key: "a", Points: floats(101)}}, ok)
		write()
		if _, held := ts.take("a", 100, 200); held {
			t.Errorf("the tap survived %s", what)
		}
		if ts.bytes != 0 || ts.armed.Load() != 0 {
			t.Errorf("after %s: %d bytes, %d taps held, want none", what, ts.bytes, ts.armed.Load())
		}
	}
}

// TestForwardsFromTheWritePath: a forwarder that caught up with a series written
// through its own node takes the points from the write path: once a read of its
// replica agreed with them, it reads the replica no more, and the centre still gets
// every point, each value exactly, and a late point too.
func TestForwardsFromTheWritePath(t *testing.T) {
	ctx := context.Background()
	lc, target, url := startOne(t)
	n := lc.Nodes[0]
	own := &countingOwn{Own: n.Coordinator()}
	cfg := quickConfig(url)
	cfg.Settle = 50 * time.Millisecond
	u, err := New(cfg, n.Coordinator(), own, n.DHT(), slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	n.SetStoredTap(u.Stored)

	const key = "site/pmu1/freq"
	write := func(points int) { // in writes of 10 points, a microsecond apart
		for i := 0; i < points; i += 10 {
			var p series.Points
			now := time.Now().UnixNano()
			for j := range int64(10) {
				at := now + j*1000
				p.AppendFloat(at, float64(at%1000)/7)
			}
			if _, err := n.Coordinator().Put(ctx, key, p, wire.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond) // a writer's pace: looks every 20 ms find points
		}
	}
	tapped := func() bool {
		_, ok := u.taps.armedAt(key)
		return ok
	}
	write(50) // before the uplink starts: its first listing finds the series
	go u.Run()
	defer u.Close()
	waitFor(t, 20*time.Second, func() bool { return target.count(key) == 50 && tapped() }, "the first 50 points to be forwarded and the series tapped")
	// Points into the tapped time: the first read there comes from the replica and
	// agrees with the tap; the others come from the tap.
	write(50)
	waitFor(t, 20*time.Second, func() bool { return target.count(key) == 100 }, "100 points to be forwarded")
	reads := own.held.Load()
	write(200)
	waitFor(t, 20*time.Second, func() bool { return target.count(key) == 300 }, "300 points to be forwarded")
	if !tapped() {
		t.Fatal("the series lost its tap")
	}
	if d := own.held.Load() - reads; d > 1 {
		t.Errorf("the forwarder read its replica %d times while 200 points were written through its node; want at most one (a tap's first comparison)", d)
	}
	// A late point through the node, in a late-check window the cursor passed: the tap
	// sees it, and the late check, which runs less often for a tapped series, runs at
	// once.
	var late series.Points
	at := agg.WindowStart(time.Now().Add(-2*time.Second).UnixNano(), lateWidthRaw) - int64(time.Second)
	late.AppendFloat(at, float64(at%1000)/7)
	if _, err := n.Coordinator().Put(ctx, key, late, wire.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() bool { return target.count(key) == 301 }, "the late point to be forwarded")
	if s := u.Stats(); s.Late == 0 {
		t.Errorf("the late point was forwarded but not counted: %+v", s)
	}
	target.mu.Lock()
	defer target.mu.Unlock()
	for at, v := range target.pts[key] {
		f, err := strconv.ParseFloat(strings.TrimPrefix(v, "value="), 64)
		if want := float64(at%1000) / 7; err != nil || math.Float64bits(f) != math.Float64bits(want) {
			t.Errorf("the centre holds %s at %d, want value=%v", v, at, want)
		}
	}
	if target.changed != 0 {
		t.Errorf("%d points were sent again with another value", target.changed)
	}
}

// TestTapOfASeriesWrittenElsewhere: a series written through another node than its
// forwarder is never forwarded from the forwarder's tap, which the other node's
// writes do not reach: its first read of the tapped time finds the tap short and
// drops it. Every point reaches the centre without a late window.
func TestTapOfASeriesWrittenElsewhere(t *testing.T) {
	ctx := context.Background()
	lc, target, url := startRF3(t)
	cfg := quickConfig(url)
	cfg.Settle = 50 * time.Millisecond
	const key = "site/pmu2/freq"
	fwd := -1
	for i, n := range lc.Nodes {
		if homes, err := n.Coordinator().Homes(ctx, key); err == nil && len(homes) > 0 && homes[0].ID == n.DHT().Self().ID {
			fwd = i
		}
	}
	if fwd < 0 {
		t.Fatal("no node is the series' first registry replica")
	}
	via := lc.Nodes[(fwd+1)%3].Coordinator()
	total := 0
	write := func(points int) { // in writes of 10 points, a microsecond apart
		for i := 0; i < points; i += 10 {
			var p series.Points
			now := time.Now().UnixNano()
			for j := range int64(10) {
				p.AppendFloat(now+j*1000, float64(total))
				total++
			}
			if _, err := via.Put(ctx, key, p, wire.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond) // a writer's pace: looks every 20 ms find points
		}
	}
	write(50) // before the uplinks start: their first listing finds the series
	ups := runUplinks(t, lc, cfg, func(_ int, n *tsdb.Node) Own { return n.Coordinator() })
	for _, u := range ups {
		defer u.Close()
	}
	waitFor(t, 20*time.Second, func() bool { return target.count(key) == 50 && ups[fwd].taps.arms.Load() > 0 },
		"the first 50 points to be forwarded and the series tapped")
	write(150)
	waitFor(t, 20*time.Second, func() bool { return target.count(key) == 200 }, "200 points to be forwarded")
	if _, ok := ups[fwd].taps.armedAt(key); ok {
		t.Error("the forwarder kept a tap that the writes through another node never reached")
	}
	if s := ups[fwd].Stats(); s.Late != 0 {
		t.Errorf("%d windows were sent again as late: the tap's points were forwarded", s.Late)
	}
}
