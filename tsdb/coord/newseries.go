package coord

import (
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// The budget for new series.
//
// A series this coordinator does not know (its type is not in the registry cache) costs
// a write round trips before its points go: its type and quantum fixed at its registry
// replicas, its catalog entry and tag postings stored, its newest quantum reported —
// each a commit on other nodes, and memory here until they are done. A write that names
// a million new series costs a node gigabytes and every other writer its deadline. So a
// coordinator takes on at most NewSeriesPerRequest unknown series in one write, and
// NewSeriesPerSecond on average (a token bucket as deep as NewSeriesPerRequest), and
// refuses a write past either whole, before anything of it is stored: the count is
// known from the write itself, nothing is half done, and resending the write (split, or
// later) is the whole remedy.
//
// "Unknown" is as this coordinator sees it: a series created through another node, or
// forgotten when its caches started over (past 65,536 series), counts again, as it costs
// the same round trips. Series the budget admitted are remembered (a bounded set) until
// their write has run, so a write admitted by a surface (httpapi, which admits each
// request before gathering several into one PutMany) is not charged twice.

// BudgetError is a write refused by the new-series budget. It wraps the rpc.RemoteError
// that travels over RPC (code wire.CodeTooManySeries or wire.CodeSlowDown); RetryAfter
// is when the per-second budget will have room for it (0 for a write too large for any).
type BudgetError struct {
	Err        *rpc.RemoteError
	RetryAfter time.Duration
}

func budgetErr(code, format string, args ...any) *rpc.RemoteError {
	return &rpc.RemoteError{Code: code, Msg: fmt.Sprintf(format, args...)}
}

func (e *BudgetError) Error() string { return e.Err.Error() }
func (e *BudgetError) Unwrap() error { return e.Err }

// ErrorCode is the error's wire code.
func (e *BudgetError) ErrorCode() string { return e.Err.Code }

// seriesBudget is a coordinator's budget for new series; the zero value (no limits)
// admits everything.
type seriesBudget struct {
	perRequest int           // 0: no limit
	lim        *rate.Limiter // nil: no limit per second

	mu       sync.Mutex
	admitted map[string]struct{} // admitted and not yet known to the registry cache
}

// maxAdmitted bounds the series the budget remembers as admitted; past it the set starts
// over (a series admitted and then forgotten is charged again by its PutMany).
const maxAdmitted = 1 << 16

func newSeriesBudget(perRequest int, perSecond float64) *seriesBudget {
	b := &seriesBudget{perRequest: max(perRequest, 0)}
	if perSecond > 0 && !math.IsInf(perSecond, 1) {
		burst := perRequest
		if burst <= 0 {
			burst = int(math.Min(math.Max(perSecond, 1), math.MaxInt32))
		}
		b.lim = rate.NewLimiter(rate.Limit(perSecond), burst)
	}
	return b
}

// AdmitSeries charges the new-series budget for the series of keys that this
// coordinator does not know and has not admitted yet, or refuses them all (a
// *BudgetError) and charges nothing. A write surface calls it before storing a request
// whose series it knows (PutMany calls it too, and then charges nothing for them).
func (c *Coordinator) AdmitSeries(keys []string) error {
	return c.admit(len(keys), func(i int) string { return keys[i] })
}

// NewSeriesPerRequest is the most series this coordinator does not know that one write
// may name (Config.NewSeriesPerRequest); 0: no limit.
func (c *Coordinator) NewSeriesPerRequest() int {
	if c.budget == nil {
		return 0
	}
	return c.budget.perRequest
}

// admitPuts is AdmitSeries of the series of puts that carry points.
func (c *Coordinator) admitPuts(puts []SeriesPut) error {
	return c.admit(len(puts), func(i int) string {
		if puts[i].Points.Len() == 0 {
			return ""
		}
		return puts[i].Key
	})
}

// admit is AdmitSeries over n keys, key(i) being the i-th ("" skips it).
func (c *Coordinator) admit(n int, key func(i int) string) error {
	b := c.budget
	if b == nil || (b.perRequest == 0 && b.lim == nil) {
		return nil
	}
	var fresh []string
	seen := map[string]struct{}{}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range n {
		k := key(i)
		if k == "" {
			continue
		}
		if _, ok := c.types.cached(k); ok {
			continue
		}
		if _, ok := b.admitted[k]; ok {
			continue
		}
		if _, ok := seen[k]; ok {
			continue
		}
		seen[k] = struct{}{}
		fresh = append(fresh, k)
		if b.perRequest > 0 && len(fresh) > b.perRequest {
			return &BudgetError{Err: budgetErr(wire.CodeTooManySeries,
				"the write names more than %d series this node does not know yet (new-series-per-request): split it into writes of fewer new series",
				b.perRequest)}
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	if b.lim != nil {
		now := time.Now()
		r := b.lim.ReserveN(now, len(fresh))
		if !r.OK() {
			return &BudgetError{Err: budgetErr(wire.CodeTooManySeries,
				"the write names %d series this node does not know yet, more than its new-series budget holds (%d): split it",
				len(fresh), b.lim.Burst())}
		}
		if d := r.DelayFrom(now); d > 0 {
			r.CancelAt(now)
			return &BudgetError{RetryAfter: d, Err: budgetErr(wire.CodeSlowDown,
				"the write names %d series this node does not know yet, past its budget of %g new series a second (new-series-per-second): retry in %v",
				len(fresh), float64(b.lim.Limit()), d.Round(time.Millisecond))}
		}
	}
	if b.admitted == nil || len(b.admitted)+len(fresh) > maxAdmitted {
		b.admitted = make(map[string]struct{}, len(fresh))
	}
	for _, k := range fresh {
		b.admitted[k] = struct{}{}
	}
	return nil
}

// budgetRefused fills every result of a write the budget refused.
func budgetRefused(res []SeriesResult, err error) []SeriesResult {
	for i := range res {
		res[i].Err = err
	}
	return res
}
