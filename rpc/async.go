package rpc

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Go starts a call of method at addr with req and returns at once; done
// receives the call's outcome exactly once, as Call would have returned it
// under a deadline of timeout (0 or less: Call's default of 10s).
//
// While a connection to addr is up, a Go call costs no goroutine and no
// context: the request is queued on the connection's sender, the response is
// handed to done by the connection's reader, and a timer fails the call with
// context.DeadlineExceeded when timeout passes. A coordinator that writes to
// seven replicas at once pays seven of these instead of seven goroutines and
// fourteen contexts. When there is no connection yet (it must be dialed), or
// its send queue is full, the call runs as a Call in a goroutine of its own.
//
// done runs on the connection's reader goroutine, a timer's goroutine or a
// call's own goroutine, never on the caller's: it must not block (hand the
// outcome to a buffered channel) and must not call the Client synchronously
// in a way that waits for another response.
func (c *Client) Go(addr, method string, req []byte, timeout time.Duration, done func(resp []byte, err error)) {
	if timeout <= 0 {
		timeout = defaultCallTimeout
	}
	deadline := time.Now().Add(timeout)
	finish := func(resp []byte, err error) {
		var remote *RemoteError
		if err != nil && !errors.As(err, &remote) {
			err = fmt.Errorf("rpc call %s to %s: %w", method, addr, err)
		}
		done(resp, err)
	}
	slow := func() {
		go func() {
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			resp, err := c.call(ctx, addr, method, req)
			cancel()
			finish(resp, err)
		}()
	}
	cc := c.ready(addr)
	if cc == nil {
		slow() // dial (or report the client closed) as Call does
		return
	}
	id := c.nextID.Add(1)
	env := envelope{kind: kindRequest, id: id, method: method, timeout: timeout, body: req}
	frame := env.appendTo(beginFrame(make([]byte, 0, frameHeaderLen+32+len(method)+len(req))))
	if err := finishFrame(frame, c.cfg.MaxFrameSize); err != nil {
		c.release(cc)
		go finish(nil, err) // done never runs on the caller's goroutine
		return
	}
	var timer atomic.Pointer[time.Timer]
	w := waiter{fn: func(r result) {
		if t := timer.Load(); t != nil {
			t.Stop()
		}
		c.release(cc)
		// As in call: a connection the server closed as idle, or that broke
		// before the request went out, never ran it; try once more.
		if r.err != nil && (errors.Is(r.err, errGoingAway) || errors.Is(r.err, errNotSent)) && time.Now().Before(deadline) {
			slow()
			return
		}
		finish(r.body, r.err)
	}}
	if err := cc.register(id, w); err != nil {
		c.release(cc)
		slow() // the connection broke before anything was sent: redial
		return
	}
	// The timer first: on the direct path the response may arrive (and take
	// the waiter) before trySend returns.
	timer.Store(time.AfterFunc(time.Until(deadline), func() {
		if w, ok := cc.take(id); ok {
			w.deliver(result{err: context.DeadlineExceeded})
		}
	}))
	if cc.out.trySend(frame) {
		return
	}
	select {
	case cc.out.queue <- frame:
	default:
		// The sender is behind: wait for room as Call does, in a goroutine.
		if _, ok := cc.take(id); ok {
			timer.Load().Stop()
			c.release(cc)
			slow()
		}
		return
	}
}

// ready returns the connection to addr, counted as used until release, if
// there is one; nil if it must be dialed first or the client is closed.
func (c *Client) ready(addr string) *clientConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	cc := c.conns[addr]
	if cc != nil {
		cc.refs.Add(1)
	}
	return cc
}
