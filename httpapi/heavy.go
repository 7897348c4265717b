package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"time"

	"golang.org/x/sync/semaphore"
)

// The heavy-work gate (docs/http.md, "The node's HTTP budget").
//
// With a work budget, the HTTP requests doing CPU-bound work — parsing a write's body,
// decoding a remote write, executing a query — do it at most Config.MaxHeavyRequests at
// once (by default one fewer than GOMAXPROCS, at least one), so that the RPC writers'
// goroutines find a P free instead of queueing behind HTTP work in the scheduler, which
// has no priorities. A request waits for the gate at most its queue wait (WriteQueueWait,
// QueryQueueWait), then is refused like a request that found no slot. Once through, its
// client's budget is checked again: what the requests before it cost while it waited is
// charged by then, so a burst admitted at once does not all run (a flood of queries runs
// one of them per debt paid back, not one per slot).

// defaultHeavy is MaxHeavyRequests' default: GOMAXPROCS less one, at least one.
func defaultHeavy() int { return max(1, runtime.GOMAXPROCS(0)-1) }

// heavyGate is the gate; nil when the node has no work budget (nothing waits).
type heavyGate struct {
	sem *semaphore.Weighted
	n   int
}

func newHeavyGate(cfg Config) *heavyGate {
	if cfg.WorkBytesPerSecond < 0 {
		return nil
	}
	return &heavyGate{sem: semaphore.NewWeighted(int64(cfg.MaxHeavyRequests)), n: cfg.MaxHeavyRequests}
}

// heavy takes a place at the gate for r, waiting at most wait, and checks acct's budget
// again, not counting the own bytes r charged itself so far; it returns the function that gives the place back, or nil when r was answered
// (code, with Retry-After): no place came, or the budget was spent meanwhile. what names
// the work, for the messages.
func (h *Handler) heavy(w http.ResponseWriter, r *http.Request, acct account, own int64, wait time.Duration, code int, what string) func() {
	g := h.gate
	if g == nil {
		return func() {}
	}
	if !g.sem.TryAcquire(1) {
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		err := g.sem.Acquire(ctx, 1)
		cancel()
		if err != nil {
			h.m.refused.WithLabelValues("heavy_busy").Inc()
			w.Header().Set("Retry-After", "1")
			httpError(w, code, fmt.Sprintf("this node is busy with %d HTTP requests' work (MaxHeavyRequests), not %s: retry after 1 s, or send to another node", g.n, what))
			return nil
		}
	}
	if !h.answerSpent(w, acct.check(own, what), code) {
		g.sem.Release(1)
		return nil
	}
	return func() { g.sem.Release(1) }
}
