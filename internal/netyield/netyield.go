// Package netyield gives up the CPU in a way that lets the Go runtime look for
// network events before the caller goes on.
//
// runtime.Gosched puts the caller back in the run queue, and the scheduler polls the
// network only when a P has nothing queued (or every 10 ms, from its monitor thread).
// So a goroutine that computes for a long time and calls Gosched now and then lets the
// goroutines that are already runnable go first, but not one whose request has just
// arrived on a socket: on a node with one core that request waits for the loop to end,
// or for the monitor, up to 10 ms. (Under the hostile soak's huge reads the writer's
// p99 was 8.5 ms against 0.4 ms quiet, with the node 12 % busy: docs/security.md.)
//
// Yield parks the caller until the runtime has polled the network: it writes a byte
// to a pipe that a helper goroutine reads through the runtime's poller, and waits for
// the helper. Parked, the caller leaves its P with what else is queued; once that has
// run, the P polls the network, which returns the helper together with every
// goroutine whose socket became readable meanwhile, and they run before the caller
// does again. Unlike a sleep it costs no time when nothing else is waiting: the pipe
// is ready at once, and a sleep shorter than a millisecond lasts one when the P has
// nothing else to do (the poller waits in whole milliseconds).
//
// One helper and one pipe serve the whole process, started on the first Yield. If the
// pipe cannot be made (no file descriptors left) or breaks, Yield falls back to
// runtime.Gosched and tries again later: it never blocks for longer than a poll.
package netyield

import (
	"os"
	"runtime"
	"sync"
	"time"
)

// retryAfter is how long Yield falls back to runtime.Gosched after the pipe could not
// be made, before it tries again.
const retryAfter = time.Second

var y yielder

type yielder struct {
	mu     sync.Mutex
	done   sync.Cond // signalled by the helper each time it has read the pipe (on mu)
	w      *os.File  // the pipe's write end; nil until made, or after it broke
	reads  uint64    // how many times the helper has read the pipe
	armed  bool      // a byte is in the pipe, for read number reads+1
	failed time.Time // when making the pipe last failed
}

// Yield lets the goroutines that are runnable, and those whose network events are
// ready, run before the caller goes on. It is a runtime.Gosched that also polls the
// network; it costs two system calls and two switches of goroutine.
func Yield() {
	y.mu.Lock()
	if !y.arm() {
		y.mu.Unlock()
		runtime.Gosched()
		return
	}
	// The helper reads once per byte written; waiting for that read does not allocate.
	for n := y.reads; y.reads == n; {
		y.done.Wait()
	}
	y.mu.Unlock()
}

// arm writes the byte that wakes the helper, unless one is already in the pipe. It
// reports false if there is no pipe. It runs under y.mu.
func (y *yielder) arm() bool {
	if y.w == nil && !y.start() {
		return false
	}
	if !y.armed {
		if _, err := y.w.Write([]byte{0}); err != nil {
			return false // a full pipe cannot happen: one byte at a time
		}
		y.armed = true
	}
	return true
}

// start makes the pipe and its helper. It runs under y.mu.
func (y *yielder) start() bool {
	if !y.failed.IsZero() && time.Since(y.failed) < retryAfter {
		return false
	}
	r, w, err := os.Pipe() // non-blocking, read through the runtime's poller
	if err != nil {
		y.failed = time.Now()
		return false
	}
	y.done.L = &y.mu
	y.w, y.armed, y.failed = w, false, time.Time{}
	go y.helper(r, w)
	return true
}

// helper reads the pipe: each read parks it in the runtime's poller until a Yield
// has written, and then it releases that Yield's waiters.
func (y *yielder) helper(r, w *os.File) {
	buf := make([]byte, 16)
	for {
		_, err := r.Read(buf)
		y.mu.Lock()
		y.reads++
		y.armed = false
		y.done.Broadcast()
		if err != nil {
			// Not expected of a pipe this package owns; the next Yield makes another.
			y.w = nil
			y.mu.Unlock()
			r.Close()
			w.Close()
			return
		}
		y.mu.Unlock()
	}
}
