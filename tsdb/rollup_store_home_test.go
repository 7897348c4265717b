package tsdb

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// knownOf reads [from, to) of level width from a node's homes and returns its known
// ranges.
func knownOf(t *testing.T, n *Node, key string, width, from, to int64) []int64 {
	t.Helper()
	resp, err := n.homes.Read(&wire.RollupReadReq{Key: key, Width: width, From: from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Known
}

// Rollups survive a node's restart: the restarted home holds its series and vouches
// for the windows it had pulled before any new pull, and aggregates stay exact.
func TestRollupNodeRestartKeepsRollups(t *testing.T) {
	lc := rollupCluster(t, 3, quanta.KFI)
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(3, 4))
	day, min := int64(24*time.Hour), int64(time.Minute)
	t0 := dayStart(2)
	key := "roll/restart"
	c := lc.Nodes[0].Coordinator()
	if _, err := c.Put(ctx, key, everyPoint(t0, t0+day/4, int64(30*time.Second), rnd), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	sealAll(t, lc)
	checkAgg(t, c, key, t0, t0+day/4, min) // the homes start keeping the series
	rollUp(t, lc)
	checkAgg(t, c, key, t0, t0+day/4, min)
	if h, _ := rollupHits(lc); h == 0 {
		t.Fatal("no window answered from the homes before the restart")
	}
	n := lc.Nodes[2]
	before := knownOf(t, n, key, min, t0, t0+day/4)
	if len(before) == 0 {
		t.Fatal("node 2 vouches for nothing before the restart")
	}
	dir := n.cfg.DHT.DataDir
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	lc.Nodes[2] = nil
	i, err := lc.Add(func(i int, cfg *Config) {
		cfg.DHT.DataDir = dir
		cfg.DHT.Quantum = 60
		cfg.CallTimeout = 30 * time.Second
		cfg.Rollups = RollupConfig{Horizon: 3 * time.Minute, PullInterval: time.Hour}
		st, err := store.OpenPebble(filepath.Join(dir, "store"), store.PebbleOptions{Sync: store.SyncNone, SealInterval: -1, Quantum: 60})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Store = st
		cfg.DHT.Format = quanta.KFI
	})
	if err != nil {
		t.Fatal(err)
	}
	back := lc.Nodes[i]
	if back.RollupStats().Pulls != 0 {
		t.Fatalf("the restarted node pulled %d rounds already", back.RollupStats().Pulls)
	}
	if after := knownOf(t, back, key, min, t0, t0+day/4); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("the restarted home vouches for %v, before the restart %v", after, before)
	}
	if err := lc.WaitLive(ctx, 3, time.Minute); err != nil {
		t.Fatal(err)
	}
	checkAgg(t, back.Coordinator(), key, t0, t0+day/4, min)
}

// A home drops a series it is no longer a home of: after nodes joined and took it
// over, two passes later, from memory and from the store. Aggregates stay exact.
func TestRollupHomeDropsSeriesAfterMembershipChange(t *testing.T) {
	tweak := func(i int, cfg *Config) {
		cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 1, 1, 1
		cfg.DHT.Quantum = 60
		cfg.CallTimeout = 30 * time.Second
		cfg.Rollups = RollupConfig{Horizon: 3 * time.Minute, PullInterval: time.Hour}
	}
	lc := startCluster(t, 1, tweak)
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(5, 6))
	hour, min := int64(time.Hour), int64(time.Minute)
	t0 := dayStart(1)
	c := lc.Nodes[0].Coordinator()
	var keys []string
	for i := range 12 {
		key := fmt.Sprintf("roll/move%d", i)
		keys = append(keys, key)
		if _, err := c.Put(ctx, key, everyPoint(t0, t0+hour, int64(time.Minute), rnd), PutOptions{}); err != nil {
			t.Fatal(err)
		}
		checkAgg(t, c, key, t0, t0+hour, min)
	}
	rollUp(t, lc)
	first := lc.Nodes[0]
	if got := first.RollupStats().Series; got != len(keys) {
		t.Fatalf("the only node keeps %d series, want %d", got, len(keys))
	}
	for range 3 {
		if _, err := lc.Add(tweak); err != nil {
			t.Fatal(err)
		}
	}
	if err := lc.WaitLive(ctx, 4, time.Minute); err != nil {
		t.Fatal(err)
	}
	moved := 0
	for _, key := range keys {
		homes, err := c.Homes(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if homes[0].ID != first.DHT().Self().ID {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("no series changed home: the test needs one that did")
	}
	for range 2 {
		if err := first.RollupNow(ctx); err != nil {
			t.Fatal(err)
		}
	}
	st := first.RollupStats()
	if st.Series != len(keys)-moved || st.Dropped != int64(moved) {
		t.Fatalf("after two passes: %d series kept, %d dropped; want %d kept, %d dropped", st.Series, st.Dropped, len(keys)-moved, moved)
	}
	heads := 0
	first.store.(store.RollupStore).RollupHeads(func(string, []byte) bool { heads++; return true })
	if heads != len(keys)-moved {
		t.Fatalf("the store holds %d heads, want %d", heads, len(keys)-moved)
	}
	repairAll(t, lc)
	for _, key := range keys {
		checkAgg(t, lc.Nodes[1].Coordinator(), key, t0, t0+hour, min)
	}
}

// rollupPulled sums the finest windows the live nodes pulled as homes.
func rollupPulled(lc *LocalCluster) (n int64) {
	for _, node := range lc.Nodes {
		if node != nil {
			n += node.RollupStats().Pulled
		}
	}
	return n
}

// Idle stays idle: a home pulls a series' windows within its bounds once and moves over
// the empty windows before and after them without asking any replica; the empty
// windows are vouched for (every level), and later passes with nothing written pull
// nothing, however far the horizon moved. A late point before the bounds is pulled.
func TestRollupIdleSeriesPullsNothing(t *testing.T) {
	lc := rollupCluster(t, 3, quanta.KFI)
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(7, 8))
	day, hour, min := int64(24*time.Hour), int64(time.Hour), int64(time.Minute)
	t0 := dayStart(3) + 5*hour
	key := "roll/idle"
	c := lc.Nodes[0].Coordinator()
	if _, err := c.Put(ctx, key, everyPoint(t0, t0+hour, min, rnd), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	sealAll(t, lc)
	checkAgg(t, c, key, dayStart(3), dayStart(0), day) // the homes start keeping it
	rollUp(t, lc)
	// The bounds' hour of minutes per home: not the 5 hours before it from the day's
	// start, nor the 3 days up to the horizon.
	pulled := rollupPulled(lc)
	if pulled == 0 || pulled > 3*60 {
		t.Fatalf("%d minutes pulled by 3 homes for one hour of data 3 days ago", pulled)
	}
	h0, _ := rollupHits(lc)
	checkAgg(t, c, key, dayStart(3), dayStart(0), day)
	checkAgg(t, c, key, dayStart(1), dayStart(1)+hour, min) // empty minutes, a day later
	if h1, _ := rollupHits(lc); h1-h0 != 3+60 {
		t.Fatalf("%d windows from the homes, want 3 days and 60 empty minutes", h1-h0)
	}
	// An hour later, nothing written: the homes move on without pulling.
	for _, n := range lc.Nodes {
		n.homes.SetClock(func() time.Time { return time.Now().Add(time.Hour) })
	}
	rollUp(t, lc)
	if again := rollupPulled(lc); again != pulled {
		t.Fatalf("a pass with nothing written pulled %d windows", again-pulled)
	}
	// A late point two hours before the first, in a minute the homes passed over as
	// empty: answered at once (its minute is dirty), and from the homes once pulled.
	late := series.Points{}
	late.AppendFloat(t0-2*hour, 42)
	if _, err := c.Put(ctx, key, late, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	sealAll(t, lc)
	checkAgg(t, c, key, dayStart(3), dayStart(0), day)
	rollUp(t, lc)
	h2, _ := rollupHits(lc)
	checkAgg(t, c, key, dayStart(3), dayStart(0), day)
	if h3, _ := rollupHits(lc); h3-h2 != 3 {
		t.Fatalf("after the late point was pulled: %d windows from the homes, want 3 days", h3-h2)
	}
}

// Rollups kept longer than the raw data keep answering once the raw quanta are dropped
// by retention: per day and per hour (levels kept forever) the same answer as before the
// drop; per minute, with the minutes past their own retention too, the raw path answers
// what the raw store still holds — nothing, as `get` shows — rather than failing
// (docs/rollups.md, "Retention per level").
func TestRollupOutlivesRawRetention(t *testing.T) {
	lc := startCluster(t, 3, func(i int, cfg *Config) {
		cfg.DHT.Format = quanta.KFI
		cfg.DHT.Quantum = 60
		cfg.CallTimeout = 30 * time.Second
		cfg.MaxFuture = 7 * 24 * time.Hour // a point 3 days ahead lets the test move the stores' clock
		cfg.Rollups = RollupConfig{Horizon: 3 * time.Minute, PullInterval: time.Hour,
			Retention: []time.Duration{time.Hour, 0, 0}}
		st, err := store.OpenPebble(filepath.Join(cfg.DHT.DataDir, "store"), store.PebbleOptions{Sync: store.SyncNone, SealInterval: -1,
			Quantum: 60, Retention: 72 * time.Hour, EnforceInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Store = st
	})
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(11, 12))
	day, hour, min := int64(24*time.Hour), int64(time.Hour), int64(time.Minute)
	// Yesterday, or the day before in the first 90 minutes of a UTC day: the minutes'
	// retention (an hour, from now) must have passed over the whole day for the last
	// check, and the raw retention (72 h) must still take the day's points.
	d := 1
	if time.Now().UnixNano()-dayStart(0) < int64(90*time.Minute) {
		d = 2
	}
	from, to := dayStart(d), dayStart(d-1)
	key := "roll/outlive"
	c := lc.Nodes[0].Coordinator()
	pts := everyPoint(from, to, 5*min, rnd)
	ahead := time.Now().Add(3 * 24 * time.Hour)
	pts.AppendFloat(ahead.UnixNano(), 1) // the stores' newest quantum, 3 days ahead
	if _, err := c.Put(ctx, key, pts, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	sealAll(t, lc)
	checkAgg(t, c, key, from, to, day) // the homes start keeping it
	rollUp(t, lc)
	before := map[int64]wire.AggResult{}
	for _, every := range []int64{day, hour} {
		checkAgg(t, c, key, from, to, every) // from the homes, checked against the raw points
		res, err := c.Aggregate(ctx, key, from, to, every, GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		before[every] = res
	}
	dropped := 0
	for _, n := range lc.Nodes {
		d, err := n.Store().(*store.Pebble).EnforceRetention(ahead) // drops the day: 3 days old or more then
		if err != nil {
			t.Fatal(err)
		}
		dropped += d
	}
	if dropped == 0 {
		t.Fatal("raw retention dropped nothing")
	}
	if got, err := c.Get(ctx, key, from, to, GetOptions{}); err != nil || got.Points.Len() != 0 {
		t.Fatalf("raw points left after retention: %d, %v", got.Points.Len(), err)
	}
	for _, every := range []int64{day, hour} {
		h0, _ := rollupHits(lc)
		res, err := c.Aggregate(ctx, key, from, to, every, GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if h1, _ := rollupHits(lc); h1-h0 != (to-from)/every {
			t.Fatalf("every %v: %d windows from the homes, want %d", time.Duration(every), h1-h0, (to-from)/every)
		}
		if fmt.Sprint(res) != fmt.Sprint(before[every]) {
			t.Fatalf("every %v after the raw data was dropped:\n%v\nbefore:\n%v", time.Duration(every), res, before[every])
		}
	}
	res, err := c.Aggregate(ctx, key, from, to, min, GetOptions{})
	if err != nil || len(res.Windows) != 0 {
		t.Fatalf("per minute, minutes and raw data both past retention: %d windows, %v", len(res.Windows), err)
	}
}
