package rollup

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// TestReadYields: a home's read of wire.MaxRollupReadWindows windows yields the core
// once per windowYieldEvery of them.
func TestReadYields(t *testing.T) {
	cfg := Config{Retention: []time.Duration{0, 0, 0}}.WithDefaults(quanta.Quantum(10))
	r := NewHomes(cfg, nil, Options{Quantum: quanta.Quantum(10), Store: store.NewMem()})
	min := int64(time.Minute)
	knownOf(t, r, "k", min, 0, min) // adopts k
	yields := 0
	saved := windowYield
	defer func() { windowYield = saved }()
	windowYield = func() { yields++ }
	// Nothing pulled yet: nothing to walk.
	if _, err := r.Read(&wire.RollupReadReq{Key: "k", Width: min, From: 0, To: wire.MaxRollupReadWindows * min}); err != nil || yields != 0 {
		t.Fatalf("a read of a series not pulled yet yielded %d times (%v), want 0: it has no window to walk", yields, err)
	}
	s := r.series["k"]
	s.started, s.from, s.front = true, 0, wire.MaxRollupReadWindows*min
	if _, err := r.Read(&wire.RollupReadReq{Key: "k", Width: min, From: 0, To: wire.MaxRollupReadWindows * min}); err != nil {
		t.Fatal(err)
	}
	if want := wire.MaxRollupReadWindows / windowYieldEvery; yields != want {
		t.Errorf("a read of %d windows yielded %d times, want %d (one per %d)", wire.MaxRollupReadWindows, yields, want, windowYieldEvery)
	}
}

// A coordinator's walk of windows no home vouches for is one step: a home that has
// pulled nothing of a series answers nothing known, and the whole range is bad at
// once, without a yield.
func TestChunkSkipsUnknownRanges(t *testing.T) {
	cfg := Config{Retention: []time.Duration{0, 0, 0}}.WithDefaults(quanta.Quantum(10))
	r := NewHomes(cfg, nil, Options{Quantum: quanta.Quantum(10), Store: store.NewMem()})
	c := NewClient(cfg, nil, time.Second, nil)
	c.ServeLocally("me", r)
	homes := []dht.Peer{{ID: "me"}}
	min := int64(time.Minute)
	hi := int64(wire.MaxRollupReadWindows) * min
	c.chunk(context.Background(), "k", homes, min, 0, hi, 1) // adopts k
	yields := 0
	saved := windowYield
	defer func() { windowYield = saved }()
	windowYield = func() { yields++ }
	ws, bad, reached := c.chunk(context.Background(), "k", homes, min, 0, hi, 1)
	if !reached || len(ws) != 0 || fmt.Sprint(bad) != fmt.Sprint([][2]int64{{0, hi}}) || yields != 0 {
		t.Fatalf("a range no home knows: reached %v, %d windows, bad %v, %d yields; want it all bad in one step", reached, len(ws), bad, yields)
	}
	// Known in the middle only: bad on both sides, and the middle walked.
	s := r.series["k"]
	s.started, s.from, s.front = true, 10*min, 20*min
	ws, bad, reached = c.chunk(context.Background(), "k", homes, min, 0, hi, 1)
	if !reached || len(ws) != 0 || fmt.Sprint(bad) != fmt.Sprint([][2]int64{{0, 10 * min}, {20 * min, hi}}) {
		t.Fatalf("known [10, 20) minutes: reached %v, %d windows, bad %v", reached, len(ws), bad)
	}
}
