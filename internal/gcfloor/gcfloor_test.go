package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		floor       uint64
		base        int
		live, roots uint64
		want        int
	}{
		{32 * mib, 100, 4 * mib, 0, 700},         // 4 + 4×7 = 32
		{32 * mib, 100, 3 * mib, 1 * mib, 725},   // 3 + 4×7.25 = 32
		{32 * mib, 100, 20 * mib, 0, 100},        // 20 + 20 > 32: GOGC's own
		{32 * mib, 100, 40 * mib, 0, 100},        // past the floor
		{32 * mib, 200, 8 * mib, 0, 300},         // 8 + 8×3 = 32
		{32 * mib, 100, 0, 0, 100},               // nothing measured yet
		{32 * mib, 100, 1, 0, 800},               // almost nothing live: the minimum goal
		{32 * mib, 100, 16 * mib, 16 * mib, 100}, // the roots count: 16 + 32 > 32
	} {
		if got := Percent(c.floor, c.base, c.live, c.roots); got != c.want {
			t.Errorf("Percent(%d MiB, %d, live %d, roots %d) = %d, want %d", c.floor/mib, c.base, c.live, c.roots, got, c.want)
		}
	}
}

// TestFloorHolds runs Start and allocates garbage over a small live heap: after each
// cycle the runtime's heap goal is at least the floor and, the live heap being small,
// within a MiB of it (the bound on the heap that the floor costs), and fewer cycles
// run for the same allocation than without it, at most one per half the floor.
func TestFloorHolds(t *testing.T) {
	const floor, mib = 24 << 20, 1 << 20
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	read := func() (goal, cycles uint64) {
		metrics.Read(s)
		return s[0].Value.Uint64(), s[1].Value.Uint64()
	}
	var sink []byte
	churn := func() uint64 { // 256 MiB of garbage, 64 KiB at a time
		runtime.GC()
		_, c0 := read()
		for range 4096 {
			sink = make([]byte, 64<<10)
		}
		_, c1 := read()
		return c1 - c0
	}
	without := churn()
	stop := Start(floor, 100)
	defer stop()
	with := churn()
	_ = sink
	// The cleanup that retunes runs on its own goroutine after a cycle, from that
	// cycle's live heap: wait for it. A retune that ran before the last cycle (from a
	// larger heap) leaves the goal below the floor until the next one, so a cycle is
	// asked again while the goal stays under it.
	deadline := time.Now().Add(10 * time.Second)
	var goal uint64
	for {
		runtime.GC()
		for wait := time.Now().Add(250 * time.Millisecond); ; runtime.Gosched() {
			if goal, _ = read(); goal >= floor || time.Now().After(wait) {
				break
			}
		}
		if goal >= floor || time.Now().After(deadline) {
			break
		}
	}
	if goal < floor || goal > floor+mib {
		t.Errorf("heap goal after a cycle %.1f MiB, want the floor %d MiB (at most 1 MiB over)", float64(goal)/mib, floor/mib)
	}
	// Each cycle with the floor lets at least half the floor of garbage pile up (the live
	// heap being small), and none saves nothing.
	if most := uint64(256 * mib / (floor / 2)); with > most || with >= without {
		t.Errorf("%d cycles for 256 MiB of garbage with a %d MiB floor, %d without: want at most %d, and fewer than without", with, floor/mib, without, most)
	}
	t.Logf("cycles for 256 MiB of garbage: %d without the floor, %d with it; heap goal %.1f MiB", without, with, float64(goal)/mib)
	stop()
	if p := debug.SetGCPercent(100); p != 100 {
		t.Errorf("GOGC after stop %d, want the base 100", p)
	}
}

// TestLimitLowersTheFloor: under a soft memory limit below the floor (GOMEMLIMIT), the
// heap goal follows the limit, not the floor: the floor never takes a node past its
// memory bound.
func TestLimitLowersTheFloor(t *testing.T) {
	const floor, limit, mib = 64 << 20, 24 << 20, 1 << 20
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(limit))
	stop := Start(floor, 100)
	defer stop()
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	var sink []byte
	for range 1024 { // 64 MiB of garbage: cycles under the limit
		sink = make([]byte, 64<<10)
	}
	_ = sink
	runtime.GC()
	metrics.Read(s)
	if goal := s[0].Value.Uint64(); goal > limit {
		t.Errorf("heap goal %.1f MiB under a %d MiB memory limit with a %d MiB floor: want at most the limit", float64(goal)/mib, limit/mib, floor/mib)
	}
}
