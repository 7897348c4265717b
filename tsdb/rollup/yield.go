package rollup

import "github.com/tsdht/tsdht/internal/netyield"

// A rollup read walks every window of its range, up to wire.MaxRollupReadWindows at
// the home (Homes.Read) and again at the coordinator (Client.chunk): milliseconds of
// a core for a long range, during which, on a node with one core, a writer's request
// that arrives would wait (Go's runtime looks for network events only when its CPU
// has nothing else queued, or every 10 ms). So both loops give up the core every
// windowYieldEvery windows through netyield, as long reads do between their pages.

// windowYieldEvery is how many windows a rollup read walks between two yields.
const windowYieldEvery = 4096

// windowYield is what the pacers of rollup reads call (netyield.Yield; a test counts
// the calls).
var windowYield = netyield.Yield

func newWindowPacer() *netyield.Pacer {
	return netyield.NewPacer(windowYieldEvery, func() { windowYield() })
}
