// Package gcfloor keeps the Go collector's heap goal from falling below a floor while
// the live heap is small.
//
// With GOGC at its default the collector starts a cycle each time the heap has grown by
// as much as was live after the last one. A node's live heap is a few MiB, so a burst
// of requests that allocates (a hostile one does, before it is refused) runs cycle after
// cycle, and on a one-core board each cycle's mark work (its worker's share of the core,
// and the assists charged to whichever goroutine allocates, a writer's included) takes
// the core from the requests the node is serving. Start sets GOGC again after every
// cycle so that the next heap goal is the floor while the live heap is small, and what
// GOGC gives once it is not: the goal is max(floor, live + (live + stacks + globals) ×
// base/100), the runtime's formula, and a soft memory limit (GOMEMLIMIT) still lowers it.
// The price is memory: up to the floor of heap between cycles instead of twice the live
// heap.
package gcfloor

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// sentinel is allocated for each cycle; its cleanup runs once a cycle has found it
// unreachable. It holds a pointer so that the tiny allocator never packs it with other
// objects (whose life would delay its cleanup).
type sentinel struct {
	_ *int
	_ [8]byte
}

// heapMinimum is the runtime's least heap goal at GOGC 100; it scales with GOGC (a goal
// is never below heapMinimum × GOGC/100), which bounds the GOGC that keeps the goal at
// the floor.
const heapMinimum = 4 << 20

// Start makes the heap goal after every collection max(floor, what base gives), base
// being the GOGC the goal follows past the floor (the runtime's default is 100); it sets
// GOGC for the first goal at once. It returns a function that stops the tuning and
// restores base. Only one Start may be in effect at a time.
func Start(floor uint64, base int) (stop func()) {
	t := &tuner{floor: floor, base: base, s: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"},
	}}
	t.tune()
	t.arm()
	return func() {
		t.stopped.Store(true)
		debug.SetGCPercent(base)
	}
}

type tuner struct {
	floor   uint64
	base    int
	s       []metrics.Sample // read only by tune, which runs on one goroutine at a time
	stopped atomic.Bool
}

// arm allocates the sentinel whose cleanup retunes after the next cycle and arms again.
func (t *tuner) arm() {
	runtime.AddCleanup(new(sentinel), func(t *tuner) {
		if t.stopped.Load() {
			return
		}
		t.tune()
		t.arm()
	}, t)
}

// tune sets GOGC for the next heap goal from what the last cycle found live.
func (t *tuner) tune() {
	metrics.Read(t.s)
	debug.SetGCPercent(Percent(t.floor, t.base, t.s[0].Value.Uint64(), t.s[1].Value.Uint64()+t.s[2].Value.Uint64()))
}

// Percent is the GOGC that makes the runtime's next heap goal, the larger of live +
// (live + roots) × GOGC/100 and heapMinimum × GOGC/100, the floor while the live heap is
// small, and never less than base.
func Percent(floor uint64, base int, live, roots uint64) int {
	scan := live + roots
	if live >= floor || scan == 0 {
		return base
	}
	p := float64(floor-live) * 100 / float64(scan)
	p = math.Min(math.Ceil(p), float64(floor)*100/heapMinimum) // up: a goal a byte short of the floor is a cycle early
	return max(base, int(p))
}
