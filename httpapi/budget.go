package httpapi

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/tsdht/tsdht/tsdb"
)

// SeriesAdmitter is an Engine with a budget for new series (the coordinator's:
// tsdb/coord/newseries.go). A write request's series are admitted, or the request
// refused whole, before anything of it is stored: 413 when it names more new series than
// one write may, 429 with Retry-After when the node's budget per second is spent.
type SeriesAdmitter interface {
	// AdmitSeries charges the budget for the series of keys the node does not know
	// yet, or refuses them all with an error carrying code tsdb.CodeTooManySeries or
	// tsdb.CodeSlowDown (and, for the latter, a *tsdb.BudgetError saying when to retry).
	AdmitSeries(keys []string) error
}

// AdmitSeries implements SeriesAdmitter with the node's coordinator's budget.
func (e *NodeEngine) AdmitSeries(keys []string) error { return e.node.Coordinator().AdmitSeries(keys) }

// admit asks the engine's budget to admit the series of batches; when it refuses, the
// request is answered (413 or 429) and admit returns false.
func (h *Handler) admit(w http.ResponseWriter, batches []*seriesBatch) bool {
	err := h.admitErr(batches)
	if err == nil {
		return true
	}
	h.refuseNewSeries(w, err)
	return false
}

// admitErr asks the engine's budget of new series, when it has one, to admit the
// batches' series.
func (h *Handler) admitErr(batches []*seriesBatch) error {
	a, ok := h.eng.(SeriesAdmitter)
	if !ok || len(batches) == 0 {
		return nil
	}
	keys := make([]string, len(batches))
	for i, b := range batches {
		keys[i] = b.key
	}
	return a.AdmitSeries(keys)
}

// refuseNewSeries answers a write the engine's budget of new series refused (err).
func (h *Handler) refuseNewSeries(w http.ResponseWriter, err error) {
	h.m.refused.WithLabelValues("new_series").Inc()
	if !RefuseBudget(w, err) {
		httpError(w, http.StatusServiceUnavailable, err.Error())
	}
}

// NewSeriesLimiter is a SeriesAdmitter that says how many new series one write may name
// (tsdb.Config.NewSeriesPerRequest): /write's parse then stops once it has built one
// more series than that and the budget refuses those named so far, instead of parsing
// the rest of a body that is refused whole.
type NewSeriesLimiter interface {
	SeriesAdmitter
	NewSeriesPerRequest() int // 0: no limit
}

// NewSeriesPerRequest implements NewSeriesLimiter with the node's coordinator's limit.
func (e *NodeEngine) NewSeriesPerRequest() int { return e.node.Coordinator().NewSeriesPerRequest() }

// newSeriesCheck returns the parseLimits fields of the engine's new-series limit (0, nil
// when it has none).
func (h *Handler) newSeriesCheck() (int, func(keys []string) error) {
	l, ok := h.eng.(NewSeriesLimiter)
	if !ok || l.NewSeriesPerRequest() <= 0 {
		return 0, nil
	}
	return l.NewSeriesPerRequest(), l.AdmitSeries
}

// RefuseBudget answers a write that the node's budget of new series refused — 429 with
// Retry-After when the budget per second is spent (tsdb.CodeSlowDown), else 413 (too
// many new series for one write: tsdb.CodeTooManySeries) — and reports whether err was
// such a refusal; when not, it writes nothing.
func RefuseBudget(w http.ResponseWriter, err error) bool {
	switch errorCode(err) {
	case tsdb.CodeSlowDown:
		wait := time.Second
		var be *tsdb.BudgetError
		if errors.As(err, &be) && be.RetryAfter > 0 {
			wait = be.RetryAfter
		}
		w.Header().Set("Retry-After", retryAfterSeconds(wait))
		httpError(w, http.StatusTooManyRequests, err.Error())
		return true
	case tsdb.CodeTooManySeries:
		httpError(w, http.StatusRequestEntityTooLarge, err.Error())
		return true
	}
	return false
}

// tooManySeries answers a write request that names more series than MaxSeriesPerWrite.
func (h *Handler) tooManySeries(w http.ResponseWriter) {
	h.m.refused.WithLabelValues("series").Inc()
	httpError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf(
		"the request names more than %d series (MaxSeriesPerWrite); nothing was stored: split it into smaller batches", h.cfg.MaxSeriesPerWrite))
}

// retryAfterSeconds is a Retry-After value of at least one second for d.
func retryAfterSeconds(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}
