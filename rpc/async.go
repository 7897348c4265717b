package rpc

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Go starts a call of method at addr with req and returns at once; done
// receives the call's outcome exactly once, as Call would have returned it
// under a deadline of timeout (0 or less: Call's default of 10s).
//
// While a connection to addr is up, a Go call costs no goroutine and no
// context: the request is queued on the connection's sender, the response is
// handed to done by the connection's reader, and the connection's one expiry
// timer (armed for the earliest deadline of its pending Go calls, not one timer
// per call) fails the call with context.DeadlineExceeded when timeout passes. A coordinator that writes to
// seven replicas at once pays seven of these instead of seven goroutines and
// fourteen contexts. When there is no connection yet (it must be dialed), or
// its send queue is full, the call runs as a Call in a goroutine of its own.
//
// done runs on the connection's reader goroutine, the timer's goroutine or a
// call's own goroutine, never on the caller's: it must not block (hand the
// outcome to a buffered channel) and must not call the Client synchronously
// in a way that waits for another response.
func (c *Client) Go(addr, method string, req []byte, timeout time.Duration, done func(resp []byte, err error)) {
	if timeout <= 0 {
		timeout = defaultCallTimeout
	}
	now := time.Now() // the one clock reading of a call that finds its connection
	g := &goCall{c: c, addr: addr, method: method, req: req, deadline: now.Add(timeout), done: done}
	cc := c.ready(addr)
	if cc == nil {
		g.slow() // dial (or report the client closed) as Call does
		return
	}
	g.cc, g.id = cc, c.nextID.Add(1)
	env := envelope{kind: kindRequest, id: g.id, method: method, timeout: timeout, body: req}
	frame := env.appendTo(beginFrame(make([]byte, 0, frameHeaderLen+32+len(method)+len(req))))
	if err := finishFrame(frame, c.cfg.MaxFrameSize); err != nil {
		c.release(cc)
		go g.finish(nil, err) // done never runs on the caller's goroutine
		return
	}
	// Registering arms the connection's expiry for the deadline: on the direct
	// path the response may arrive (and take the waiter) before trySend returns.
	if err := cc.register(g.id, waiter{call: g}); err != nil {
		c.release(cc)
		g.slow() // the connection broke before anything was sent: redial
		return
	}
	// The connection counts as used from now on (see release).
	cc.lastUsed.Store(int64(now.Sub(c.epoch)))
	if cc.out.trySendAt(frame, now) {
		return
	}
	select {
	case cc.out.queue <- frame:
	default:
		// The sender is behind: wait for room as Call does, in a goroutine.
		if _, ok := cc.take(g.id); ok {
			c.release(cc)
			g.slow()
		}
	}
}

// goCall is one call started by Go: one allocation holds what its callbacks
// need, instead of a closure each.
type goCall struct {
	c        *Client
	addr     string
	method   string
	req      []byte
	deadline time.Time
	done     func(resp []byte, err error)

	cc *clientConn // the connection it went out on; nil on the slow path
	id uint64
}

// finish hands done the outcome, errors other than the peer's own wrapped
// with the method and address, as Call does.
func (g *goCall) finish(resp []byte, err error) {
	if err != nil {
		err = wrapCallError(g.method, g.addr, err)
	}
	g.done(resp, err)
}

// wrapCallError wraps err, unless it is the peer's own *RemoteError, with the
// method and address. A function of its own: the *RemoteError that errors.As
// fills escapes, and declared in the caller it cost every successful call an
// allocation.
func wrapCallError(method, addr string, err error) error {
	var remote *RemoteError
	if errors.As(err, &remote) {
		return err
	}
	return fmt.Errorf("rpc call %s to %s: %w", method, addr, err)
}

// slow runs the call as a Call in a goroutine of its own, bounded by the
// same deadline.
func (g *goCall) slow() {
	go func() {
		ctx, cancel := context.WithDeadline(context.Background(), g.deadline)
		resp, err := g.c.call(ctx, g.addr, g.method, g.req)
		cancel()
		g.finish(resp, err)
	}()
}

// deliver receives the call's result from the connection: its reader, fail,
// or its expiry.
func (g *goCall) deliver(r result) {
	// Go stamped the connection used when the call went out: a call ends
	// within its timeout, far inside IdleTimeout, so no second clock reading.
	g.cc.refs.Add(-1)
	// As in call: a connection the server closed as idle, or that broke
	// before the request went out, never ran it; try once more.
	if r.err != nil && (errors.Is(r.err, errGoingAway) || errors.Is(r.err, errNotSent)) && time.Now().Before(g.deadline) {
		g.slow()
		return
	}
	g.finish(r.body, r.err)
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
