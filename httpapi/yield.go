package httpapi

import "github.com/tsdht/tsdht/internal/netyield"

// Heavy HTTP work gives up the core at bounded intervals (docs/http.md, "The node's
// HTTP budget").
//
// Go's scheduler has no priorities, and it looks for network events only when a P has
// nothing queued or every 10 ms: on a node with one core, an RPC writer's request that
// arrives while a request's body is parsed, a remote write decoded, a query executed
// or its answer encoded would wait for that work to end, or for the runtime's monitor.
// So each of them counts its work in the work budget's bytes (workbudget.go: a byte
// parsed or decoded, seriesCost a series built, queryPointCost a point read,
// windowBytes a window combined) on a netyield.Pacer, which yields through
// netyield.Yield every heavyYieldEvery of them: the goroutines whose network events
// are ready run before the work goes on, as they do between a long read's pages and a
// seal's pairs. An answer's encoder, several times faster a byte than a parse, yields
// each time it sends its buffer on (flushAt bytes, encode.go). TestHeavyRequestsYield
// counts the yields of each kind of request.

// heavyYieldEvery is how much work, in the budget's bytes, heavy HTTP work does
// between two yields of the core.
const heavyYieldEvery = 4 << 10

// heavyYield is what a heavy request's pacer calls (netyield.Yield; a test counts the
// calls).
var heavyYield = netyield.Yield

// newHeavyPacer returns the pacer of one request's heavy work.
func newHeavyPacer() *netyield.Pacer {
	return netyield.NewPacer(heavyYieldEvery, func() { heavyYield() })
}
