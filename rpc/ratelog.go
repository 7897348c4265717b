package rpc

import (
	"log/slog"
	"sync"
	"time"
)

// rateLogEvery is the window a rateLog counts records in.
const rateLogEvery = 10 * time.Second

// dropLogBurst is how many per-connection records ("dropping connection", "refused
// connection") a server logs per rateLogEvery before it counts them instead: each
// names its peer and reason, and tens of thousands a minute from a flood would wear
// a board's flash through the journal.
const dropLogBurst = 32

// rateLog passes at most a burst of records per rateLogEvery to a logger and counts
// the ones it held back, so a flood of hostile connections cannot flood the log too.
// The zero value is ready to use.
type rateLog struct {
	mu         sync.Mutex
	start      time.Time // the current window's first record
	passed     int       // records let through in the current window
	suppressed int       // records held back since the last one let through
}

// warn logs msg with args at Warn unless one went out less than rateLogEvery ago.
func (r *rateLog) warn(l *slog.Logger, msg string, args ...any) { r.warnBurst(l, 1, msg, args...) }

// warnBurst logs msg with args at Warn unless burst records went out in the current
// window of rateLogEvery; the record says how many were held back before it.
func (r *rateLog) warnBurst(l *slog.Logger, burst int, msg string, args ...any) {
	r.mu.Lock()
	now := time.Now()
	if r.start.IsZero() || now.Sub(r.start) >= rateLogEvery {
		r.start, r.passed = now, 0
	}
	if r.passed >= max(burst, 1) {
		r.suppressed++
		r.mu.Unlock()
		return
	}
	r.passed++
	n := r.suppressed
	r.suppressed = 0
	r.mu.Unlock()
	if n > 0 {
		args = append(args, "suppressed", n, "suppressed_over", rateLogEvery)
	}
	l.Warn(msg, args...)
}
