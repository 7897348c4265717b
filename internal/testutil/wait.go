// Package testutil owns what the tests of every package share: waiting for a
// condition with a deadline, loopback addresses free to bind, real `tsdht node`
// processes started as a cluster from one build of the binary per test binary, and
// the InfluxDB 1.x that the HTTP API's answers are compared with.
//
// It imports only the standard library, so that any package's tests may use it,
// tsdb's included.
package testutil

import (
	"fmt"
	"testing"
	"time"
)

// The poll starts fast, for conditions a goroutine meets within a millisecond, and
// slows down to maxPoll, so that a condition that runs a CLI process or waits for
// gossip does not take the CPU from what it waits for.
const (
	firstPoll = time.Millisecond
	maxPoll   = 100 * time.Millisecond
)

// Poll calls cond until it returns true or within has passed, and reports whether it
// returned true. Its last call to cond starts after the deadline.
func Poll(within time.Duration, cond func() bool) bool {
	_, ok := poll(within, cond)
	return ok
}

func poll(within time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	deadline := start.Add(within)
	pause := firstPoll
	for {
		// Read before cond: its last call starts after the deadline, so a condition
		// that came true while the test slept is not reported as never met.
		late := time.Now().After(deadline)
		if cond() {
			return time.Since(start), true
		}
		if late {
			return time.Since(start), false
		}
		time.Sleep(min(pause, time.Until(deadline)+time.Millisecond))
		pause = min(2*pause, maxPoll)
	}
}

// WaitFor calls cond until it returns true and returns how long that took; when it
// has not after within, it fails the test with "timed out after <within> waiting for
// <what>", what formatted from format and args as fmt.Sprintf does. Like t.Fatal, it
// must be called from the goroutine running the test.
func WaitFor(t testing.TB, within time.Duration, cond func() bool, format string, args ...any) time.Duration {
	t.Helper()
	took, ok := poll(within, cond)
	if !ok {
		t.Fatalf("timed out after %v waiting for %s", within, fmt.Sprintf(format, args...))
	}
	return took
}

// WaitNoError calls f until it returns nil and returns how long that took; when it has
// not after within, it fails the test as WaitFor does, naming the last error f
// returned, which is usually what the test needs to know.
func WaitNoError(t testing.TB, within time.Duration, f func() error, format string, args ...any) time.Duration {
	t.Helper()
	var last error
	took, ok := poll(within, func() bool {
		last = f()
		return last == nil
	})
	if !ok {
		t.Fatalf("timed out after %v waiting for %s; last error: %v", within, fmt.Sprintf(format, args...), last)
	}
	return took
}
