package netyield

import (
	"testing"
	"time"
)

// TestYieldFallsBack: within retryAfter of failing to make the pipe, arm does not try
// again and reports that there is none, so that Yield falls back to runtime.Gosched.
func TestYieldFallsBack(t *testing.T) {
	var z yielder
	z.mu.Lock()
	z.failed = time.Now()
	ok := z.arm()
	z.mu.Unlock()
	if ok {
		t.Fatal("arm made a pipe within retryAfter of a failure")
	}
}
