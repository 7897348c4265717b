package rpc

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestHandleInline: a handler registered with HandleInline answers small
// requests (buffered whole, run inline) and large ones (read in pieces, under
// a frame deadline, run on a worker), sequential and concurrent, sees the caller's deadline, survives a
// panic, and gives its byte budget back: many more requests than the
// connection's budget holds go through one after another.
func TestHandleInline(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxFrameSize = 256 << 10
	cfg.MaxInflightBytes = 1 << 20
	cfg.MaxInflightBytesPerConn = 256 << 10
	s := NewServer(NewTCPTransport(), cfg)
	s.HandleInline("echo", nil, echo)
	s.HandleInline("deadline", nil, func(ctx context.Context, _ []byte) ([]byte, error) {
		d, ok := ctx.Deadline()
		if !ok {
			return nil, errors.New("no deadline")
		}
		return []byte(time.Until(d).Round(time.Second).String()), nil
	})
	s.HandleInline("panic", nil, func(context.Context, []byte) ([]byte, error) { panic("boom") })
	bound, err := s.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	addr := bound.String()
	c := newClient(t, NewTCPTransport(), cfg)

	for _, size := range []int{0, 16, 3 << 10, 200 << 10} {
		req := bytes.Repeat([]byte{byte(size)}, size)
		for range 20 {
			resp, err := c.Call(ctxTimeout(t, 10*time.Second), addr, "echo", req)
			if err != nil {
				t.Fatalf("%d bytes: %v", size, err)
			}
			if !bytes.Equal(resp, req) {
				t.Fatalf("%d bytes: echo returned %d bytes, not the request", size, len(resp))
			}
		}
	}
	// More request bytes, one after another, than the connection's budget:
	// each request must give its bytes back (these large ones on a worker).
	big := make([]byte, 200<<10)
	for i := range 3 * cfg.MaxInflightBytes / len(big) {
		if _, err := c.Call(ctxTimeout(t, 10*time.Second), addr, "echo", big); err != nil {
			t.Fatalf("request %d of 200 KiB: %v (budget not given back?)", i, err)
		}
	}

	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := bytes.Repeat([]byte{byte(i)}, 1+i*97)
			resp, err := c.Call(ctxTimeout(t, 10*time.Second), addr, "echo", req)
			if err == nil && !bytes.Equal(resp, req) {
				err = errors.New("wrong answer")
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent call: %v", err)
		}
	}

	resp, err := c.Call(ctxTimeout(t, 7*time.Second), addr, "deadline", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(resp); got != "7s" {
		t.Errorf("inline handler's deadline is %s away, want the caller's 7s", got)
	}

	var re *RemoteError
	if _, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "panic", nil); !errors.As(err, &re) || re.Code != CodeInternal {
		t.Fatalf("panicking inline handler: %v, want a RemoteError %s", err, CodeInternal)
	}
	if _, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", []byte("after")); err != nil {
		t.Fatalf("call after a panic: %v", err)
	}
}

// TestHandleInlineHoldsItsConnection: while an inline handler runs, its
// connection reads no further request (the documented price), while a request
// to a worker-served method on another connection is answered.
func TestHandleInlineHoldsItsConnection(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	s, addr := startServer(t, NewTCPTransport(), "127.0.0.1:0", DefaultConfig(), map[string]HandlerFunc{"echo": echo})
	s.HandleInline("block", nil, func(context.Context, []byte) ([]byte, error) {
		close(started) // called once
		<-release
		return []byte("done"), nil
	})
	c := newClient(t, NewTCPTransport(), DefaultConfig())
	if _, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", nil); err != nil { // dial first
		t.Fatal(err)
	}
	blocked := callInBackground(t, c, addr, "block", nil)
	waitStarted(t, started, "the inline handler to run")
	// Behind it on the same connection: no answer while it runs.
	if _, err := c.Call(ctxTimeout(t, 200*time.Millisecond), addr, "echo", []byte("behind")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("call behind a running inline handler on its connection: %v, want a deadline exceeded", err)
	}
	// Another connection is served meanwhile.
	other := newClient(t, NewTCPTransport(), DefaultConfig())
	if _, err := other.Call(ctxTimeout(t, 5*time.Second), addr, "echo", []byte("other")); err != nil {
		t.Errorf("call on another connection while an inline handler runs: %v", err)
	}
	close(release)
	if err := <-blocked; err != nil {
		t.Fatalf("inline call: %v", err)
	}
	if _, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", []byte("after")); err != nil {
		t.Fatalf("call after the inline handler returned: %v", err)
	}
}

// TestHandleInlineLargeGoesToWorker: a request to an inline method larger than
// maxInlineRequest runs on a worker, so it does not hold up the small ones
// behind it on the same connection.
func TestHandleInlineLargeGoesToWorker(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	s, addr := startServer(t, NewTCPTransport(), "127.0.0.1:0", DefaultConfig(), nil)
	s.HandleInline("write", nil, func(_ context.Context, req []byte) ([]byte, error) {
		if len(req) > maxInlineRequest {
			close(started) // the one big request
			<-release      // takes long
		}
		return []byte("ok"), nil
	})
	c := newClient(t, NewTCPTransport(), DefaultConfig())
	if _, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "write", nil); err != nil { // dial first
		t.Fatal(err)
	}
	big := callInBackground(t, c, addr, "write", make([]byte, maxInlineRequest+1))
	waitStarted(t, started, "the big request to run")
	if _, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "write", []byte("small")); err != nil {
		t.Errorf("small inline request behind a big one on the same connection: %v", err)
	}
	close(release)
	if err := <-big; err != nil {
		t.Fatal(err)
	}
}

// TestServerIdleDeadlineMovedLazily: the server moves a connection's idle
// deadline only once half of it is used up, so a deadline can fire while the
// connection has been busy since it was set; a connection called more often
// than its ServerIdleTimeout must never be closed as idle for it.
func TestServerIdleDeadlineMovedLazily(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ServerIdleTimeout = 400 * time.Millisecond
	_, addr := startServer(t, NewTCPTransport(), "127.0.0.1:0", cfg, map[string]HandlerFunc{"echo": echo})
	tr := &countingTransport{Transport: NewTCPTransport()}
	c := newClient(t, tr, DefaultConfig())
	tick := time.NewTicker(cfg.ServerIdleTimeout / 8)
	defer tick.Stop()
	var maxGap time.Duration
	last := time.Now()
	for end := last.Add(4 * cfg.ServerIdleTimeout); time.Now().Before(end); {
		<-tick.C // pacing the client, not waiting for a condition
		if _, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", nil); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		maxGap, last = max(maxGap, now.Sub(last)), now
	}
	if maxGap >= cfg.ServerIdleTimeout/2 {
		t.Skipf("the machine is too busy to judge: calls %v apart at worst, the idle timeout is %v", maxGap, cfg.ServerIdleTimeout)
	}
	if n := tr.dials.Load(); n != 1 {
		t.Errorf("%d dials for calls at most %v apart, want 1: a busy connection was closed as idle", n, maxGap)
	}
}

// callInBackground makes a call (10 s deadline) in the background; its error arrives on the
// channel.
func callInBackground(t *testing.T, c *Client, addr, method string, req []byte) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := c.Call(ctxTimeout(t, 10*time.Second), addr, method, req)
		done <- err
	}()
	return done
}

// waitStarted waits until a handler closes started. (A scan of the server's
// connections for a running request could see the request before, whose count
// the server drops only after its answer has reached the client.)
func waitStarted(t *testing.T, started <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatalf("waited 10 s for %s", what)
	}
}
