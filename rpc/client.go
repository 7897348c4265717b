package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Client calls methods on Servers. It keeps one persistent connection per
// address and multiplexes concurrent calls over it by request ID. It is safe
// for concurrent use. Close it when done: its connections hold goroutines.
type Client struct {
	nextID atomic.Uint64 // request IDs, unique across the client's conns
	t      Transport
	cfg    Config
	epoch  time.Time       // idle times are measured from it, on the monotonic clock
	ctx    context.Context // cancelled by Close; dials run under it
	cancel context.CancelFunc
	wg     sync.WaitGroup // dials and conn goroutines, for Close

	mu     sync.Mutex
	conns  map[string]*clientConn
	dials  map[string]*dial // in progress, shared by the calls that wait for them
	closed bool
}

// dial is one connection attempt, which every call to its address waits for.
type dial struct {
	done chan struct{} // closed when cc or err is set
	cc   *clientConn
	err  error
}

// NewClient returns a Client that connects through t.
func NewClient(t Transport, cfg Config) *Client {
	ctx, cancel := context.WithCancel(context.Background())
	return &Client{
		t:      t,
		cfg:    cfg.withDefaults(),
		epoch:  time.Now(),
		ctx:    ctx,
		cancel: cancel,
		conns:  make(map[string]*clientConn),
		dials:  make(map[string]*dial),
	}
}

// Call sends req to the handler of method at addr and returns its response.
//
// It returns the handler's error as a *RemoteError, unwrapped, so that its
// message can be shown as it is. Other errors are wrapped: with
// ErrUnreachable when the peer could not be reached or the connection broke
// (fail over to another replica), with ctx's error when ctx ended first, with
// ErrFrameTooLarge when req does not fit in a frame (it is not sent). A ctx
// without a deadline gets one of 10s: no call waits forever. The handler
// sees the remaining time as its own deadline.
func (c *Client) Call(ctx context.Context, addr, method string, req []byte) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultCallTimeout)
		defer cancel()
	}
	resp, err := c.call(ctx, addr, method, req)
	if err != nil {
		err = wrapCallError(method, addr, err)
	}
	return resp, err
}

func (c *Client) call(ctx context.Context, addr, method string, req []byte) ([]byte, error) {
	deadline, _ := ctx.Deadline()
	timeout := time.Until(deadline)
	if timeout <= 0 {
		return nil, context.DeadlineExceeded
	}
	id := c.nextID.Add(1)
	env := envelope{kind: kindRequest, id: id, method: method, timeout: timeout, body: req}
	frame := env.appendTo(beginFrame(make([]byte, 0, frameHeaderLen+32+len(method)+len(req))))
	if err := finishFrame(frame, c.cfg.MaxFrameSize); err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		cc, err := c.conn(ctx, addr)
		if err != nil {
			return nil, err
		}
		resp, err := cc.roundTrip(ctx, id, frame)
		c.release(cc)
		// A connection that the server closed as idle, or that broke before
		// the request went out, never ran it: once, try a new connection,
		// so that callers never see an idle close.
		if attempt == 0 && err != nil && ctx.Err() == nil && (errors.Is(err, errGoingAway) || errors.Is(err, errNotSent)) {
			continue
		}
		return resp, err
	}
}

var (
	// errGoingAway breaks a connection whose server said goodbye (see
	// CodeGoingAway): the calls in flight on it were not read.
	errGoingAway = errors.New("the server closed the idle connection")
	// errNotSent marks a call that found its connection broken before it
	// sent anything.
	errNotSent = errors.New("request not sent")
)

// conn returns the connection to addr, dialing it if there is none, and
// counts the caller as one of its users until release. Calls that arrive
// while a dial is in progress wait for that dial rather than start another.
func (c *Client) conn(ctx context.Context, addr string) (*clientConn, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if cc := c.conns[addr]; cc != nil {
		cc.refs.Add(1)
		c.mu.Unlock()
		return cc, nil
	}
	d := c.dials[addr]
	if d == nil {
		d = &dial{done: make(chan struct{})}
		c.dials[addr] = d
		c.wg.Add(1)
		// The dial runs on its own, under the client's context: one caller
		// giving up must not fail the others that wait for the same dial.
		go c.dial(addr, d)
	}
	c.mu.Unlock()

	select {
	case <-d.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if d.err != nil {
		return nil, d.err
	}
	c.mu.Lock()
	d.cc.refs.Add(1)
	c.mu.Unlock()
	return d.cc, nil
}

func (c *Client) release(cc *clientConn) {
	cc.lastUsed.Store(int64(time.Since(c.epoch))) // before refs: checkIdle reads them in the other order
	cc.refs.Add(-1)
}

func (c *Client) dial(addr string, d *dial) {
	defer c.wg.Done()
	conn, err := c.connect(addr)

	c.mu.Lock()
	delete(c.dials, addr)
	if err == nil && c.closed {
		conn.Close()
		err = ErrClosed
	}
	if err == nil {
		d.cc = c.newConn(addr, conn)
		c.conns[addr] = d.cc
	}
	d.err = err
	c.mu.Unlock()
	close(d.done)
}

// connect dials addr and runs the handshake.
func (c *Client) connect(addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.DialTimeout)
	defer cancel()
	conn, err := c.t.Dial(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	stop := context.AfterFunc(c.ctx, func() { conn.Close() }) // Close must not wait for the handshake
	err = clientHandshake(conn, c.cfg.HandshakeTimeout, c.cfg.ClusterKey)
	if !stop() {
		err = ErrClosed
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	return conn, nil
}

// Close closes every connection, failing the calls in flight, and waits for
// the client's goroutines to end. Later calls return ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	conns := make([]*clientConn, 0, len(c.conns))
	for _, cc := range c.conns {
		conns = append(conns, cc)
	}
	c.mu.Unlock()

	c.cancel()
	for _, cc := range conns {
		cc.fail(ErrClosed)
	}
	c.wg.Wait()
	return nil
}

// clientConn is one connection of a Client: calls queue their requests on
// its sender, and a reader goroutine hands each response to the call waiting
// for its ID.
type clientConn struct {
	c    *Client
	addr string
	conn net.Conn
	out  *sender
	idle *time.Timer // closes the conn when unused; nil if IdleTimeout is 0

	// refs counts the calls using the conn. It is only incremented under
	// c.mu while the conn is in c.conns, so checkIdle, also under c.mu, can
	// retire the conn without racing a new call.
	refs     atomic.Int32
	lastUsed atomic.Int64 // when the last call ended, as time since c.epoch

	mu      sync.Mutex
	pending map[uint64]waiter // calls waiting for a response, by request ID
	err     error             // why the conn broke; nil while it works
	done    chan struct{}     // closed when it broke
	// expiry fails the pending Go calls whose deadline passed. One timer per
	// connection, armed for the earliest deadline among them (expiryAt; zero
	// while unarmed), instead of one per call: a timer per call was an
	// allocation and two timer-heap operations for every replica of a write.
	expiry   *time.Timer
	expiryAt time.Time
}

type result struct {
	body []byte
	err  error
}

// waiter is how a pending call hears its result: a Call waits on ch; a Go
// call has its deliver run (ch is nil).
type waiter struct {
	ch   chan result
	call *goCall
}

// deliver hands r to the waiter. It never blocks: ch has room for the one
// result, and a Go call's done must not block.
func (w waiter) deliver(r result) {
	if w.call != nil {
		w.call.deliver(r)
		return
	}
	w.ch <- r
}

// newConn starts the goroutines of a new connection. Called with c.mu held.
func (c *Client) newConn(addr string, conn net.Conn) *clientConn {
	cc := &clientConn{
		c:       c,
		addr:    addr,
		conn:    conn,
		pending: make(map[uint64]waiter),
		done:    make(chan struct{}),
	}
	cc.out = newSender(conn, c.cfg.WriteTimeout, cc.done, cc.fail)
	cc.lastUsed.Store(int64(time.Since(c.epoch)))
	if c.cfg.IdleTimeout > 0 {
		cc.idle = time.AfterFunc(c.cfg.IdleTimeout, cc.checkIdle)
	}
	c.wg.Add(2)
	go cc.readLoop()
	go func() {
		defer c.wg.Done()
		cc.out.run()
	}()
	return cc
}

// roundTrip sends frame, the request with the given id, and waits for its
// response.
func (cc *clientConn) roundTrip(ctx context.Context, id uint64, frame []byte) ([]byte, error) {
	ch := make(chan result, 1)
	if err := cc.register(id, waiter{ch: ch}); err != nil {
		return nil, err
	}
	if !cc.out.trySend(frame) && !cc.out.send(ctx, frame) && ctx.Err() != nil {
		cc.forget(id)
		return nil, ctx.Err()
	}
	// Queued, or the conn broke and fail tells every pending call so.
	select {
	case r := <-ch:
		return r.body, r.err
	case <-ctx.Done():
		cc.forget(id)
		return nil, ctx.Err()
	}
}

// register records a call waiting for the response to id.
func (cc *clientConn) register(id uint64, w waiter) error {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.err != nil {
		return fmt.Errorf("%w (%w)", cc.err, errNotSent)
	}
	cc.pending[id] = w
	if w.call != nil {
		cc.armExpiry(w.call.deadline)
	}
	return nil
}

// armExpiry makes the expiry fire at deadline d at the latest. Called with cc.mu
// held. While calls with later deadlines follow one another (the usual case: one
// timeout for all), it costs a comparison.
func (cc *clientConn) armExpiry(d time.Time) {
	if !cc.expiryAt.IsZero() && !cc.expiryAt.After(d) {
		return
	}
	cc.expiryAt = d
	if cc.expiry == nil {
		cc.expiry = time.AfterFunc(time.Until(d), cc.expire)
	} else {
		cc.expiry.Reset(time.Until(d))
	}
}

// expire runs from the expiry timer: it fails every pending Go call whose
// deadline has passed with context.DeadlineExceeded and arms the timer for the
// earliest deadline left. It scans the pending calls once per firing, and the
// timer fires about once per call timeout while calls are under way.
func (cc *clientConn) expire() {
	now := time.Now()
	var late []waiter
	cc.mu.Lock()
	if cc.pending == nil || now.Before(cc.expiryAt) {
		// The conn broke (fail told every call), or a Reset to a later time
		// overtook this run: the timer fires again when it is due.
		cc.mu.Unlock()
		return
	}
	cc.expiryAt = time.Time{}
	var next time.Time
	for id, w := range cc.pending {
		switch {
		case w.call == nil: // a Call waits on its own context
		case !now.Before(w.call.deadline):
			delete(cc.pending, id)
			late = append(late, w)
		case next.IsZero() || w.call.deadline.Before(next):
			next = w.call.deadline
		}
	}
	if !next.IsZero() {
		cc.armExpiry(next)
	}
	cc.mu.Unlock()
	for _, w := range late {
		w.deliver(result{err: context.DeadlineExceeded})
	}
}

// take removes and returns the waiter of id, if it still waits: whoever takes
// it — the reader with the response, fail, or an async call's timer — is the
// only one to deliver its result.
func (cc *clientConn) take(id uint64) (waiter, bool) {
	cc.mu.Lock()
	w, ok := cc.pending[id]
	delete(cc.pending, id)
	cc.mu.Unlock()
	return w, ok
}

// forget drops a call that stopped waiting; its response, if it comes, is
// discarded.
func (cc *clientConn) forget(id uint64) {
	cc.mu.Lock()
	delete(cc.pending, id)
	cc.mu.Unlock()
}

func (cc *clientConn) readLoop() {
	defer cc.c.wg.Done()
	fr := newFrameReader(cc.conn, cc.c.cfg.MaxFrameSize)
	for {
		b, err := fr.next()
		if err != nil {
			if errors.Is(err, ErrFrameTooLarge) {
				cc.c.cfg.Logger.Warn("rpc: dropping connection", "peer", cc.addr, "err", err)
			}
			cc.fail(err)
			return
		}
		var env envelope
		if err := env.decode(b); err != nil || env.kind != kindResponse {
			if err == nil {
				err = errors.New("peer sent a request on a client connection")
			}
			cc.c.cfg.Logger.Warn("rpc: dropping connection: bad response", "peer", cc.addr, "err", err)
			cc.fail(fmt.Errorf("bad response: %w", err))
			return
		}
		if env.id == 0 && env.code == CodeGoingAway {
			cc.fail(errGoingAway)
			return
		}
		w, ok := cc.take(env.id)
		switch {
		case !ok: // the caller gave up
		case env.code != "":
			w.deliver(result{err: &RemoteError{Code: env.code, Msg: env.msg}})
		default:
			w.deliver(result{body: env.body})
		}
	}
}

// fail breaks the connection for the given reason: it leaves the pool, so
// the next call to its address dials again, the pending calls get
// ErrUnreachable, and it is closed. Only the first reason counts.
func (cc *clientConn) fail(reason error) {
	// Out of the pool before anyone can see the error: a caller that hears
	// of the failure and retries at once must dial afresh, not find this
	// conn again.
	c := cc.c
	c.mu.Lock()
	if c.conns[cc.addr] == cc {
		delete(c.conns, cc.addr)
	}
	c.mu.Unlock()

	cc.mu.Lock()
	if cc.err != nil {
		cc.mu.Unlock()
		return
	}
	if errors.Is(reason, io.EOF) {
		reason = errors.New("connection closed by peer")
	}
	cc.err = fmt.Errorf("%w: %w", ErrUnreachable, reason)
	pending := cc.pending
	cc.pending = nil
	close(cc.done)
	if cc.expiry != nil {
		cc.expiry.Stop()
	}
	cc.mu.Unlock()

	for _, w := range pending {
		w.deliver(result{err: cc.err})
	}
	cc.conn.Close()
	if cc.idle != nil {
		cc.idle.Stop()
	}
}

// checkIdle runs from the idle timer: it closes the conn if no call used it
// for IdleTimeout, and otherwise looks again when that may be the case.
func (cc *clientConn) checkIdle() {
	c := cc.c
	c.mu.Lock()
	if c.conns[cc.addr] != cc { // it broke, and fail stopped the timer
		c.mu.Unlock()
		return
	}
	unused := time.Since(c.epoch) - time.Duration(cc.lastUsed.Load())
	if cc.refs.Load() > 0 {
		unused = 0
	} else if unused >= c.cfg.IdleTimeout {
		delete(c.conns, cc.addr) // no new call can take it now
		c.mu.Unlock()
		cc.fail(errors.New("idle connection closed"))
		return
	}
	c.mu.Unlock()
	cc.idle.Reset(c.cfg.IdleTimeout - unused)
}
