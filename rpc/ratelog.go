package rpc

import (
	"log/slog"
	"sync"
	"time"
)

// rateLogEvery is how often a rateLog lets a record through.
const rateLogEvery = 10 * time.Second

// rateLog passes at most one record per rateLogEvery to a logger and counts
// the ones it held back, so a flood of hostile connections cannot flood the
// log too. The zero value is ready to use.
type rateLog struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// warn logs msg with args at Warn unless one went out less than rateLogEvery
// ago; the record says how many were held back since the last one.
func (r *rateLog) warn(l *slog.Logger, msg string, args ...any) {
	r.mu.Lock()
	now := time.Now()
	if !r.last.IsZero() && now.Sub(r.last) < rateLogEvery {
		r.suppressed++
		r.mu.Unlock()
		return
	}
	r.last = now
	n := r.suppressed
	r.suppressed = 0
	r.mu.Unlock()
	if n > 0 {
		args = append(args, "suppressed", n, "suppressed_over", rateLogEvery)
	}
	l.Warn(msg, args...)
}
