package rpc

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// goResult is what one Go call delivered, and how often done ran.
type goResult struct {
	resp  []byte
	err   error
	calls atomic.Int32
	done  chan struct{}
}

func startGo(c *Client, addr, method string, req []byte, timeout time.Duration) *goResult {
	r := &goResult{done: make(chan struct{})}
	c.Go(addr, method, req, timeout, func(resp []byte, err error) {
		if r.calls.Add(1) == 1 {
			r.resp, r.err = resp, err
			close(r.done)
		}
	})
	return r
}

func (r *goResult) wait(t *testing.T) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatal("Go never called done")
	}
}

func TestGo(t *testing.T) {
	for _, nw := range networks() {
		t.Run(nw.name, func(t *testing.T) {
			_, addr := startServer(t, nw.server, nw.addr, Config{}, map[string]HandlerFunc{"echo": echo, "block": block,
				"fail": func(context.Context, []byte) ([]byte, error) { return nil, Errorf("nope", "refused") }})
			ct := &countingTransport{Transport: nw.client}
			c := newClient(t, ct, Config{})

			// The first call dials; the many after it share the connection.
			first := startGo(c, addr, "echo", []byte("first"), 0)
			first.wait(t)
			if first.err != nil || string(first.resp) != "first" {
				t.Fatalf("first Go: %q, %v", first.resp, first.err)
			}
			rs := make([]*goResult, 200)
			for i := range rs {
				rs[i] = startGo(c, addr, "echo", []byte(fmt.Sprint(i)), 5*time.Second)
			}
			for i, r := range rs {
				r.wait(t)
				if r.err != nil || string(r.resp) != fmt.Sprint(i) {
					t.Fatalf("Go %d: %q, %v", i, r.resp, r.err)
				}
			}
			if n := ct.dials.Load(); n != 1 {
				t.Errorf("%d dials, want 1", n)
			}

			// A handler's error arrives as Call returns it.
			r := startGo(c, addr, "fail", nil, 0)
			r.wait(t)
			var re *RemoteError
			if !errors.As(r.err, &re) || re.Code != "nope" {
				t.Errorf("failing handler: %v, want a RemoteError with code nope", r.err)
			}

			// A call past its timeout fails with DeadlineExceeded, once.
			r = startGo(c, addr, "block", nil, 50*time.Millisecond)
			r.wait(t)
			if !errors.Is(r.err, context.DeadlineExceeded) {
				t.Errorf("blocked call: %v, want DeadlineExceeded", r.err)
			}

			// Every done ran exactly once (a late response after a timeout
			// must not run it again).
			for _, r := range append(rs, first, r) {
				if n := r.calls.Load(); n != 1 {
					t.Fatalf("done ran %d times", n)
				}
			}
		})
	}
}

func TestGoUnreachable(t *testing.T) {
	tr := NewTCPTransport()
	_, addr := startServer(t, tr, "127.0.0.1:0", Config{}, map[string]HandlerFunc{"echo": echo})
	s2, addr2 := startServer(t, tr, "127.0.0.1:0", Config{}, map[string]HandlerFunc{"echo": echo})
	c := newClient(t, tr, Config{})
	r := startGo(c, addr2, "echo", []byte("x"), time.Second)
	r.wait(t)
	if r.err != nil {
		t.Fatalf("Go before the server closed: %v", r.err)
	}
	s2.Close()
	// The broken connection is noticed by the next call, or the one after
	// (a call may race the close): either fails as unreachable.
	r = startGo(c, addr2, "echo", []byte("x"), time.Second)
	r.wait(t)
	if r.err == nil {
		r = startGo(c, addr2, "echo", []byte("x"), time.Second)
		r.wait(t)
	}
	if !errors.Is(r.err, ErrUnreachable) {
		t.Errorf("Go to a closed server: %v, want ErrUnreachable", r.err)
	}
	// The other server still answers.
	r = startGo(c, addr, "echo", []byte("y"), time.Second)
	r.wait(t)
	if r.err != nil || string(r.resp) != "y" {
		t.Errorf("Go to the live server: %q, %v", r.resp, r.err)
	}
	// A closed client fails calls with ErrClosed.
	c.Close()
	r = startGo(c, addr, "echo", nil, time.Second)
	r.wait(t)
	if !errors.Is(r.err, ErrClosed) {
		t.Errorf("Go on a closed client: %v, want ErrClosed", r.err)
	}
}

func TestGoFrameTooLarge(t *testing.T) {
	tr := NewMemNetwork().Transport()
	_, addr := startServer(t, tr, "s", Config{}, map[string]HandlerFunc{"echo": echo})
	c := newClient(t, tr, Config{MaxFrameSize: 1024})
	startGo(c, addr, "echo", nil, 0).wait(t) // connect, so that the fast path checks the size
	r := startGo(c, addr, "echo", make([]byte, 2048), 0)
	r.wait(t)
	if !errors.Is(r.err, ErrFrameTooLarge) {
		t.Errorf("oversized request: %v, want ErrFrameTooLarge", r.err)
	}
}

// One expiry timer serves every Go call of a connection: a call with a short
// timeout started after one with a long timeout still fails at its own deadline
// (the timer is brought forward), the timer re-arms for calls still pending after
// it fired, and no call fails before its deadline.
func TestGoExpiryPerConnection(t *testing.T) {
	for _, nw := range networks() {
		t.Run(nw.name, func(t *testing.T) {
			_, addr := startServer(t, nw.server, nw.addr, Config{}, map[string]HandlerFunc{"echo": echo, "block": block})
			c := newClient(t, nw.client, Config{})
			startGo(c, addr, "echo", nil, 0).wait(t) // connected: the calls below take the direct path

			const long, short = 3 * time.Second, 50 * time.Millisecond
			start := time.Now()
			slow := startGo(c, addr, "block", nil, long)
			quick := startGo(c, addr, "block", nil, short)
			quick.wait(t)
			if !errors.Is(quick.err, context.DeadlineExceeded) {
				t.Fatalf("short call: %v, want DeadlineExceeded", quick.err)
			}
			if took := time.Since(start); took < short || took >= long {
				t.Fatalf("short call failed after %v: want its own deadline (%v), not before it nor at the long call's (%v)", took, short, long)
			}
			select {
			case <-slow.done:
				t.Fatalf("the long call ended with the short one: %v", slow.err)
			default:
			}
			// The timer fired for the short call: it must come back for a
			// later short call, and answered calls are unaffected.
			second := time.Now()
			again := startGo(c, addr, "block", nil, short)
			ok := startGo(c, addr, "echo", []byte("still"), long)
			ok.wait(t)
			if ok.err != nil || string(ok.resp) != "still" {
				t.Fatalf("echo beside blocked calls: %q, %v", ok.resp, ok.err)
			}
			again.wait(t)
			if !errors.Is(again.err, context.DeadlineExceeded) || time.Since(second) >= long {
				t.Fatalf("second short call: %v after %v", again.err, time.Since(second))
			}
			slow.wait(t)
			if !errors.Is(slow.err, context.DeadlineExceeded) {
				t.Fatalf("long call: %v, want DeadlineExceeded", slow.err)
			}
			if took := time.Since(start); took < long {
				t.Fatalf("long call failed after %v, before its deadline (%v)", took, long)
			}
			for _, r := range []*goResult{slow, quick, again, ok} {
				if n := r.calls.Load(); n != 1 {
					t.Fatalf("done ran %d times", n)
				}
			}
		})
	}
}
