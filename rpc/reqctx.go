package rpc

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// reqContext is the context a handler runs under: its parent's, bounded by the
// deadline the caller said it waits for. Most handlers (a replica's write) never
// wait on Done, so the timer behind it is made only when Done is first asked for:
// until then Err compares the clock with the deadline, and a request costs no
// timer and no cancel context.
type reqContext struct {
	parent   context.Context
	deadline time.Time

	once  sync.Once
	made  atomic.Bool // inner is set
	inner context.Context
	stop  context.CancelFunc
}

func newReqContext(parent context.Context, deadline time.Time) *reqContext {
	return &reqContext{parent: parent, deadline: deadline}
}

func (r *reqContext) Deadline() (time.Time, bool) {
	if d, ok := r.parent.Deadline(); ok && d.Before(r.deadline) {
		return d, true
	}
	return r.deadline, true
}

// Done makes the deadline's timer, once.
func (r *reqContext) Done() <-chan struct{} {
	r.once.Do(func() {
		r.inner, r.stop = context.WithDeadline(r.parent, r.deadline)
		r.made.Store(true)
	})
	return r.inner.Done()
}

func (r *reqContext) Err() error { return r.errAt(time.Now()) }

// errAt is Err with the clock read already (now).
func (r *reqContext) errAt(now time.Time) error {
	if r.made.Load() {
		return r.inner.Err()
	}
	if err := r.parent.Err(); err != nil {
		return err
	}
	if !now.Before(r.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// Value answers through the inner context once it exists, so that a context
// derived from this one after Done finds the inner one's cancellation (as
// context.WithCancel looks it up) instead of starting a goroutine to watch it.
func (r *reqContext) Value(key any) any {
	if r.made.Load() {
		return r.inner.Value(key)
	}
	return r.parent.Value(key)
}

// release frees the timer, if Done made one.
func (r *reqContext) release() {
	if r.made.Load() {
		r.stop()
	}
}
