package rpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

// TestRoundTrip runs 200 concurrent calls through one client over each
// transport: every call gets its own answer back, and all share one dial.
func TestRoundTrip(t *testing.T) {
	for _, nw := range networks() {
		t.Run(nw.name, func(t *testing.T) {
			_, addr := startServer(t, nw.server, nw.addr, DefaultConfig(), map[string]HandlerFunc{"echo": echo})
			tr := &countingTransport{Transport: nw.client}
			c := newClient(t, tr, DefaultConfig())

			const calls = 200
			var wg sync.WaitGroup
			errs := make(chan error, calls)
			for i := range calls {
				wg.Go(func() {
					req := fmt.Appendf(nil, "request %d %s", i, strings.Repeat("x", i*50))
					resp, err := c.Call(ctxTimeout(t, 10*time.Second), addr, "echo", req)
					switch {
					case err != nil:
						errs <- err
					case !bytes.Equal(resp, req):
						errs <- fmt.Errorf("call %d: got %.40q, want %.40q", i, resp, req)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if n := tr.dials.Load(); n != 1 {
				t.Errorf("%d dials for %d concurrent calls to one address, want 1", n, calls)
			}
		})
	}
}

// TestDeadline: a call to a handler that never answers ends at its deadline;
// the handler's context ends too, and the connection serves the next call.
func TestDeadline(t *testing.T) {
	for _, nw := range networks() {
		t.Run(nw.name, func(t *testing.T) {
			handlerDone := make(chan error, 1)
			_, addr := startServer(t, nw.server, nw.addr, DefaultConfig(), map[string]HandlerFunc{
				"echo": echo,
				"block": func(ctx context.Context, _ []byte) ([]byte, error) {
					<-ctx.Done()
					handlerDone <- ctx.Err()
					return nil, ctx.Err()
				},
			})
			tr := &countingTransport{Transport: nw.client}
			c := newClient(t, tr, DefaultConfig())

			start := time.Now()
			_, err := c.Call(ctxTimeout(t, 50*time.Millisecond), addr, "block", nil)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("got %v, want DeadlineExceeded", err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("call with a 50ms deadline took %v", d)
			}
			// The deadline travelled with the request: the handler stops by
			// itself, long before the server closes.
			select {
			case err := <-handlerDone:
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("handler's context ended with %v, want DeadlineExceeded", err)
				}
			case <-time.After(5 * time.Second):
				t.Error("handler's context did not end after the caller's deadline")
			}

			if _, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", []byte("after")); err != nil {
				t.Fatalf("call after a timed-out one: %v", err)
			}
			if n := tr.dials.Load(); n != 1 {
				t.Errorf("%d dials, want 1: the timed-out call must not cost the connection", n)
			}
			c.mu.Lock()
			cc := c.conns[addr]
			c.mu.Unlock()
			cc.mu.Lock()
			defer cc.mu.Unlock()
			if n := len(cc.pending); n != 0 {
				t.Errorf("%d calls left pending after all returned", n)
			}
		})
	}
}

// TestCanceled: cancelling the context ends a call with context.Canceled.
func TestCanceled(t *testing.T) {
	nw := networks()[1]
	_, addr := startServer(t, nw.server, nw.addr, DefaultConfig(), map[string]HandlerFunc{"block": block})
	c := newClient(t, nw.client, DefaultConfig())
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Call(ctx, addr, "block", nil)
		errc <- err
	}()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// TestDefaultDeadline: a call whose context has no deadline gets one, which
// the handler sees.
func TestDefaultDeadline(t *testing.T) {
	nw := networks()[1]
	_, addr := startServer(t, nw.server, nw.addr, DefaultConfig(), map[string]HandlerFunc{
		"deadline": func(ctx context.Context, _ []byte) ([]byte, error) {
			d, ok := ctx.Deadline()
			if !ok {
				return nil, errors.New("no deadline")
			}
			return []byte(time.Until(d).Round(time.Second).String()), nil
		},
	})
	c := newClient(t, nw.client, DefaultConfig())
	resp, err := c.Call(context.Background(), addr, "deadline", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(resp), defaultCallTimeout.String(); got != want {
		t.Errorf("handler's deadline is %s away, want %s", got, want)
	}
}

// TestHandlerErrors: what a handler returns or does reaches the caller as a
// RemoteError with the right code, and the connection survives it.
func TestHandlerErrors(t *testing.T) {
	tests := []struct {
		name     string
		handler  HandlerFunc
		method   string // default: the test's name
		wantCode string
		wantMsg  string
	}{
		{
			name:     "panic",
			handler:  func(context.Context, []byte) ([]byte, error) { panic("boom") },
			wantCode: CodeInternal,
			wantMsg:  "boom",
		},
		{
			name: "errorf",
			handler: func(context.Context, []byte) ([]byte, error) {
				return nil, Errorf("bad_input", "series %q unknown", "s1")
			},
			wantCode: "bad_input",
			wantMsg:  `series "s1" unknown`,
		},
		{
			name: "wrapped",
			handler: func(context.Context, []byte) ([]byte, error) {
				return nil, fmt.Errorf("writing: %w", Errorf("type_mismatch", "float64 series"))
			},
			wantCode: "type_mismatch",
			wantMsg:  "writing: float64 series",
		},
		{
			name:     "plain",
			handler:  func(context.Context, []byte) ([]byte, error) { return nil, errors.New("disk full") },
			wantCode: CodeInternal,
			wantMsg:  "disk full",
		},
		{
			name: "decode",
			handler: func(_ context.Context, req []byte) ([]byte, error) {
				var v struct{ A []int }
				return nil, Decode(req, &v)
			},
			wantCode: CodeBadRequest,
			wantMsg:  "offset",
		},
		{
			name:     "unknown",
			method:   "no.such.method",
			wantCode: CodeUnknownMethod,
			wantMsg:  "no.such.method",
		},
	}
	nw := networks()[0]
	handlers := map[string]HandlerFunc{"echo": echo}
	for _, tt := range tests {
		if tt.handler != nil {
			handlers[tt.name] = tt.handler
		}
	}
	var logs logBuffer
	cfg := DefaultConfig()
	cfg.Logger = logs.logger()
	_, addr := startServer(t, nw.server, nw.addr, cfg, handlers)
	tr := &countingTransport{Transport: nw.client}
	c := newClient(t, tr, DefaultConfig())

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := tt.method
			if method == "" {
				method = tt.name
			}
			_, err := c.Call(ctxTimeout(t, 5*time.Second), addr, method, []byte{0xdd, 0xff, 0xff, 0xff, 0xff})
			var re *RemoteError
			if !errors.As(err, &re) {
				t.Fatalf("got %T %v, want *RemoteError", err, err)
			}
			if re.Code != tt.wantCode || !strings.Contains(re.Msg, tt.wantMsg) {
				t.Errorf("got code %q msg %q, want code %q msg containing %q", re.Code, re.Msg, tt.wantCode, tt.wantMsg)
			}
			if err.Error() != re.Msg {
				t.Errorf("Error() = %q, want the handler's message %q", err.Error(), re.Msg)
			}
			if errors.Is(err, ErrUnreachable) {
				t.Error("a handler's error must not look like an unreachable peer")
			}
		})
	}
	if _, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", nil); err != nil {
		t.Fatal(err)
	}
	if n := tr.dials.Load(); n != 1 {
		t.Errorf("%d dials, want 1: handler errors and panics must not cost the connection", n)
	}
	if !strings.Contains(logs.String(), "panicked: boom") {
		t.Errorf("the panic was not logged; log:\n%s", logs.String())
	}
}

// TestFrameTooLarge: a request over the limit fails before anything is
// dialed or sent; a response over the limit arrives as an error that
// matches ErrFrameTooLarge, and the connection survives.
func TestFrameTooLarge(t *testing.T) {
	nw := networks()[0]
	cfg := DefaultConfig()
	cfg.MaxFrameSize = 1 << 20
	_, addr := startServer(t, nw.server, nw.addr, cfg, map[string]HandlerFunc{
		"echo": echo,
		"big":  func(context.Context, []byte) ([]byte, error) { return make([]byte, 2<<20), nil },
	})
	tr := &countingTransport{Transport: nw.client}
	c := newClient(t, tr, cfg)

	_, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", make([]byte, 1<<20))
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversize request: got %v, want ErrFrameTooLarge", err)
	}
	if n := tr.dials.Load(); n != 0 {
		t.Errorf("oversize request dialed %d times, want 0", n)
	}

	_, err = c.Call(ctxTimeout(t, 5*time.Second), addr, "big", nil)
	var re *RemoteError
	if !errors.Is(err, ErrFrameTooLarge) || !errors.As(err, &re) || re.Code != CodeFrameTooLarge {
		t.Fatalf("oversize response: got %v, want a RemoteError %q", err, CodeFrameTooLarge)
	}
	if _, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", make([]byte, 1<<20-64)); err != nil {
		t.Fatalf("request just under the limit: %v", err)
	}
	if n := tr.dials.Load(); n != 1 {
		t.Errorf("%d dials, want 1", n)
	}
}

// TestServerRestart: calls to a server that went away fail with
// ErrUnreachable; once it is back the next call dials again and succeeds.
func TestServerRestart(t *testing.T) {
	for _, nw := range networks() {
		t.Run(nw.name, func(t *testing.T) {
			s, addr := startServer(t, nw.server, nw.addr, DefaultConfig(), map[string]HandlerFunc{"echo": echo})
			tr := &countingTransport{Transport: nw.client}
			c := newClient(t, tr, DefaultConfig())
			if _, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", []byte("1")); err != nil {
				t.Fatal(err)
			}

			s.Close()
			for range 2 { // on the broken connection, then on a refused dial
				_, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", []byte("2"))
				if !errors.Is(err, ErrUnreachable) {
					t.Fatalf("call to a stopped server: got %v, want ErrUnreachable", err)
				}
			}

			startServer(t, nw.server, addr, DefaultConfig(), map[string]HandlerFunc{"echo": echo})
			resp, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", []byte("3"))
			if err != nil || string(resp) != "3" {
				t.Fatalf("call after restart: %q, %v", resp, err)
			}
			if n := tr.dials.Load(); n < 2 {
				t.Errorf("%d dials, want a new one after the restart", n)
			}
		})
	}
}

// TestServerClose: closing a server ends its handlers' contexts, waits for
// them, and the calls in flight fail with ErrUnreachable.
func TestServerClose(t *testing.T) {
	nw := networks()[1]
	started := make(chan struct{})
	var finished atomic.Bool
	s, addr := startServer(t, nw.server, nw.addr, DefaultConfig(), map[string]HandlerFunc{
		"block": func(ctx context.Context, _ []byte) ([]byte, error) {
			close(started)
			<-ctx.Done()
			finished.Store(true)
			return nil, ctx.Err()
		},
	})
	c := newClient(t, nw.client, DefaultConfig())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Call(ctxTimeout(t, 10*time.Second), addr, "block", nil)
		errc <- err
	}()
	<-started
	s.Close()
	if !finished.Load() {
		t.Error("Close returned before the handler did")
	}
	if err := <-errc; !errors.Is(err, ErrUnreachable) {
		t.Errorf("call in flight: got %v, want ErrUnreachable", err)
	}
	if _, err := s.Listen("again"); !errors.Is(err, ErrClosed) {
		t.Errorf("Listen after Close: got %v, want ErrClosed", err)
	}
}

// TestServerQuiesce: Quiesce returns once the response of a call in flight is sent,
// so that a Close after it does not cut the caller off; with a handler that does not
// return it gives up when its context ends.
func TestServerQuiesce(t *testing.T) {
	nw := networks()[1]
	started, release := make(chan struct{}), make(chan struct{})
	s, addr := startServer(t, nw.server, nw.addr, DefaultConfig(), map[string]HandlerFunc{
		"slow": func(ctx context.Context, _ []byte) ([]byte, error) {
			close(started)
			<-release
			return []byte("done"), nil
		},
	})
	c := newClient(t, nw.client, DefaultConfig())
	type result struct {
		resp []byte
		err  error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := c.Call(ctxTimeout(t, 10*time.Second), addr, "slow", nil)
		res <- result{resp, err}
	}()
	<-started
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.Quiesce(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Quiesce with a handler running: %v, want its context's deadline", err)
	}
	quiet := make(chan error, 1)
	go func() { quiet <- s.Quiesce(ctxTimeout(t, 10*time.Second)) }()
	close(release)
	if err := <-quiet; err != nil {
		t.Fatalf("Quiesce after the handler returned: %v", err)
	}
	s.Close()
	if r := <-res; r.err != nil || string(r.resp) != "done" {
		t.Fatalf("the call answered before Close: %q, %v; want \"done\"", r.resp, r.err)
	}
}

// TestClientClose: closing a client fails the calls in flight; later calls
// return ErrClosed.
func TestClientClose(t *testing.T) {
	nw := networks()[1]
	started := make(chan struct{})
	_, addr := startServer(t, nw.server, nw.addr, DefaultConfig(), map[string]HandlerFunc{
		"block": func(ctx context.Context, _ []byte) ([]byte, error) {
			close(started)
			<-ctx.Done()
			return nil, ctx.Err()
		},
	})
	c := NewClient(nw.client, DefaultConfig())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Call(ctxTimeout(t, 10*time.Second), addr, "block", nil)
		errc <- err
	}()
	<-started
	c.Close()
	if err := <-errc; !errors.Is(err, ErrUnreachable) || !errors.Is(err, ErrClosed) {
		t.Errorf("call in flight: got %v, want ErrUnreachable and ErrClosed", err)
	}
	if _, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "block", nil); !errors.Is(err, ErrClosed) {
		t.Errorf("call after Close: got %v, want ErrClosed", err)
	}
}

// TestIdleTimeout: a connection unused for IdleTimeout is closed, and the
// next call dials again.
func TestIdleTimeout(t *testing.T) {
	nw := networks()[1]
	_, addr := startServer(t, nw.server, nw.addr, DefaultConfig(), map[string]HandlerFunc{"echo": echo})
	tr := &countingTransport{Transport: nw.client}
	cfg := DefaultConfig()
	cfg.IdleTimeout = 20 * time.Millisecond
	c := newClient(t, tr, cfg)
	if _, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", nil); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return clientConns(c) == 0 }, "the idle connection to close")
	if _, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", nil); err != nil {
		t.Fatal(err)
	}
	if n := tr.dials.Load(); n != 2 {
		t.Errorf("%d dials, want 2", n)
	}
}

// TestIdleTimeoutBusy: a connection with a call in flight is not idle, however
// long the call takes.
func TestIdleTimeoutBusy(t *testing.T) {
	nw := networks()[1]
	release := make(chan struct{})
	_, addr := startServer(t, nw.server, nw.addr, DefaultConfig(), map[string]HandlerFunc{
		"wait": func(context.Context, []byte) ([]byte, error) {
			<-release
			return []byte("ok"), nil
		},
	})
	cfg := DefaultConfig()
	cfg.IdleTimeout = time.Millisecond
	c := newClient(t, nw.client, cfg)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "wait", nil)
		errc <- err
	}()
	// Let the idle timer fire a few times while the call waits.
	testutil.WaitFor(t, 5*time.Second, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		cc := c.conns[addr]
		return cc != nil && cc.refs.Load() == 1
	}, "the call to be pending")
	time.Sleep(20 * time.Millisecond) // gives the timer the chance to misbehave; correctness does not depend on it
	close(release)
	if err := <-errc; err != nil {
		t.Fatalf("a busy connection was closed as idle: %v", err)
	}
}

// TestBackpressure: a server runs at most MaxInflightPerConn requests of one
// connection at once.
func TestBackpressure(t *testing.T) {
	nw := networks()[1]
	const limit, calls = 2, 6
	var running, peak atomic.Int32
	release := make(chan struct{})
	cfg := DefaultConfig()
	cfg.MaxInflightPerConn = limit
	_, addr := startServer(t, nw.server, nw.addr, cfg, map[string]HandlerFunc{
		"wait": func(context.Context, []byte) ([]byte, error) {
			n := running.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			<-release
			running.Add(-1)
			return nil, nil
		},
	})
	c := newClient(t, nw.client, DefaultConfig())
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			if _, err := c.Call(ctxTimeout(t, 10*time.Second), addr, "wait", nil); err != nil {
				t.Error(err)
			}
		})
	}
	// Each handler is released only once as many run as the limit lets (fewer at the
	// end): releasing the first as soon as it ran left the peak at 1 now and then.
	for released := range calls {
		want := int32(min(limit, calls-released))
		testutil.WaitFor(t, 5*time.Second, func() bool { return running.Load() >= want }, "handlers to run")
		release <- struct{}{}
	}
	wg.Wait()
	if p := peak.Load(); p != limit {
		t.Errorf("at most %d handlers ran at once, want %d", p, limit)
	}
}

// TestHandleTwice: registering a method twice is a programming error.
func TestHandleTwice(t *testing.T) {
	s := NewServer(NewMemNetwork().Transport(), DefaultConfig())
	s.Handle("m", echo)
	defer func() {
		if recover() == nil {
			t.Error("second Handle of one method did not panic")
		}
	}()
	s.Handle("m", echo)
}

// TestInvoke: typed calls round-trip structs through msgpack.
func TestInvoke(t *testing.T) {
	type point struct {
		T int64
		V float64
	}
	type req struct {
		Series string
		Points []point
	}
	type resp struct{ Stored int }
	nw := networks()[1]
	_, addr := startServer(t, nw.server, nw.addr, DefaultConfig(), map[string]HandlerFunc{
		"put": func(_ context.Context, b []byte) ([]byte, error) {
			var r req
			if err := Decode(b, &r); err != nil {
				return nil, err
			}
			if r.Series != "pmu17/bus3/vang" {
				return nil, Errorf("bad_input", "unexpected series %q", r.Series)
			}
			return Encode(resp{Stored: len(r.Points)})
		},
	})
	c := newClient(t, nw.client, DefaultConfig())
	in := req{Series: "pmu17/bus3/vang", Points: []point{{1, 0.5}, {2, -1e300}, {-3, 0}}}
	var out resp
	if err := Invoke(ctxTimeout(t, 5*time.Second), c, addr, "put", in, &out); err != nil {
		t.Fatal(err)
	}
	if out.Stored != 3 {
		t.Errorf("stored %d, want 3", out.Stored)
	}
	if err := Invoke(ctxTimeout(t, 5*time.Second), c, addr, "put", req{Series: "x"}, nil); err == nil || err.Error() != `unexpected series "x"` {
		t.Errorf("got %v, want the handler's error", err)
	}
}
