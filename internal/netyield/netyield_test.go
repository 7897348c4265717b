package netyield

import (
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
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
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var step, at atomic.Int64
		at.Store(-1)
		parked := make(chan struct{})
		go func() {
			close(parked)
			if _, err := s.Read(make([]byte, 1)); err == nil {
				at.Store(step.Load())
			}
		}()
		<-parked
		Yield() // the reader reaches its Read and parks in the poller
		for i := int64(0); i < steps; i++ {
			step.Store(i)
			if i == write {
				if _, err := c.Write([]byte{1}); err != nil {
					t.Fatal(err)
				}
			}
			for t0 := time.Now(); time.Since(t0) < 50*time.Microsecond; {
			}
			yield()
		}
		return at.Load()
	}
	if at := run(Yield); at < write || at > write+2 {
		t.Errorf("with Yield the reader ran at step %d, want %d–%d (-1: not within %d steps of 50 µs)", at, write, write+2, steps)
	}
	t.Logf("with runtime.Gosched the reader ran at step %d (-1: not within %d steps of 50 µs)", run(runtime.Gosched), steps)
}

// TestYieldConcurrent has many goroutines yield at once, on every P: each returns, and
// the pipe is written at most once per read.
func TestYieldConcurrent(t *testing.T) {
	done := make(chan struct{})
	const n, each = 16, 200
	for range n {
		go func() {
			for range each {
				Yield()
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

// TestYieldFallsBack checks that Yield returns when the pipe cannot be made.
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

func BenchmarkYield(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		Yield()
	}
}

func BenchmarkGosched(b *testing.B) {
	for b.Loop() {
		runtime.Gosched()
	}
}
