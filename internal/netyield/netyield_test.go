package netyield_test

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/netyield"
	"github.com/tsdht/tsdht/internal/netyield/netyieldtest"
)

// TestYieldLetsTheNetworkIn runs a busy loop on one P that yields after every step
// and, at step 10, writes to a TCP connection whose other end a goroutine is reading:
// that goroutine is runnable only once the runtime has polled the network. With Yield
// it runs within two steps of the write. (With runtime.Gosched the runtime polls only
// from its monitor, every 10 ms: the test logs where it ran then, for comparison.)
func TestYieldLetsTheNetworkIn(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const steps, write = 100, 10
	run := func(yield func()) int64 {
		var step atomic.Int64
		probe := netyieldtest.NewProbe(t, step.Load)
		for i := int64(0); i < steps; i++ {
			step.Store(i)
			if i == write {
				probe.Send(t)
			}
			for t0 := time.Now(); time.Since(t0) < 50*time.Microsecond; {
			}
			yield()
		}
		return probe.RanAt()
	}
	if at := run(netyield.Yield); at < write || at > write+2 {
		t.Errorf("with Yield the reader ran at step %d, want %d–%d (-1: not within %d steps of 50 µs)", at, write, write+2, steps)
	}
	t.Logf("with runtime.Gosched the reader ran at step %d (-1: not within %d steps of 50 µs)", run(runtime.Gosched), steps)
}

// TestYieldConcurrent has many goroutines yield at once, on every P: each of their
// yields returns (one byte in the pipe serves all the yields waiting for it).
func TestYieldConcurrent(t *testing.T) {
	done := make(chan struct{})
	const n, each = 16, 200
	for range n {
		go func() {
			for range each {
				netyield.Yield()
			}
			done <- struct{}{}
		}()
	}
	deadline := time.After(30 * time.Second)
	for range n {
		select {
		case <-done:
		case <-deadline:
			t.Fatal("yields still waiting after 30 s")
		}
	}
}

func BenchmarkYield(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		netyield.Yield()
	}
}

func BenchmarkGosched(b *testing.B) {
	for b.Loop() {
		runtime.Gosched()
	}
}
