package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"reflect"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// HandlerFunc serves one method. req is the request body, which the handler
// may keep. ctx ends when the caller's deadline passes, the connection
// closes or the Server closes; what the handler returns after that is not
// sent, since nobody waits for it. An error the handler returns reaches the
// caller as a *RemoteError carrying the error's message and code (see
// Errorf).
type HandlerFunc func(ctx context.Context, req []byte) ([]byte, error)

// Server serves the methods registered with Handle on the listeners opened
// with Listen.
type Server struct {
	t        Transport
	cfg      Config
	handlers atomic.Pointer[map[string]handler] // copied on write: read without a lock per request
	ctx      context.Context                    // handlers' contexts derive from it; Close cancels it
	cancel   context.CancelFunc
	wg       sync.WaitGroup // accept loops, connections and handlers, for Close
	budget   *byteBudget    // Config.MaxInflightBytes over all connections

	keyLog  rateLog // refused cluster keys: at most one line per rateLogEvery
	capLog  rateLog // connections refused at MaxConns
	dropLog rateLog // connections refused or dropped for any other reason: dropLogBurst per rateLogEvery
	reapLog rateLog // connections closed to make room at MaxConns
	costLog rateLog // requests refused from their first bytes (HandleDecoded)

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	pending   []net.Listener // bound, not yet served (Bind, Serve)
	conns     map[net.Conn]*serverConn
	live      int // conns not marked for reaping: what MaxConns counts
	closed    bool

	reapKept    []reapCand // idle connections the reaper's last scan found, to take next (oldest last)
	reapScanned time.Time  // when that scan ran
	reapScans   int        // scans so far (for tests)
}

// NewServer returns a Server that listens through t.
func NewServer(t Transport, cfg Config) *Server {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		t:         t,
		cfg:       cfg.withDefaults(),
		ctx:       ctx,
		cancel:    cancel,
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[net.Conn]*serverConn),
	}
	s.budget = newByteBudget(s.cfg.MaxInflightBytes, s.cfg.MaxFrameSize)
	s.handlers.Store(&map[string]handler{})
	return s
}

// handler is a registered method.
type handler struct {
	h      HandlerFunc
	req    *plan  // HandleDecoded: the plan of the type the body is decoded into; else nil
	name   string // that type's name, for errors
	inline bool   // HandleInline: runs on the connection's reader
}

// Handle registers h for method. Register methods before Listen, so that no
// early caller finds them missing. Registering a method twice panics.
func (s *Server) Handle(method string, h HandlerFunc) {
	s.handle(method, handler{h: h})
}

// HandleDecoded is Handle for a handler that decodes its request body with
// Decode into a value of req's type (a pointer, as Decode takes it: a nil
// one will do, e.g. (*Req)(nil)). The server then applies Decode's cost
// bound (DecodeCostFactor) to the request's first bytes as they arrive: a
// request that already declares more than its whole body may cost, such as
// an array of a million nils to be decoded into a million structs, is
// refused before the rest of its frame is buffered or walked, and its bytes
// are read past unbuffered, so it costs the server next to nothing. The
// caller gets a *RemoteError with CodeBadRequest naming DecodeCostFactor;
// the connection stays open. A request that passes is served as by Handle,
// and Decode checks it whole.
func (s *Server) HandleDecoded(method string, req any, h HandlerFunc) {
	t := reflect.TypeOf(req)
	if t == nil || t.Kind() != reflect.Pointer {
		panic(fmt.Sprintf("rpc: HandleDecoded(%s): request type %T is not a pointer", method, req))
	}
	s.handle(method, handler{h: h, req: planFor(t), name: t.String()})
}

// HandleInline is HandleDecoded for a handler that finishes quickly and never
// waits on the network, such as a store append: a request of at most
// maxInlineRequest bytes runs on the connection's reader goroutine instead of
// being handed to a worker, which spares a goroutine hand-off per request (on
// a 1 GHz ARM core, a good part of a small request's cost); a larger one (a
// repair's push of many points) goes to a worker as any other, so that it does
// not hold up the small ones behind it. While an inline request runs, the
// connection reads no further request (other connections are not held up).
// req is as for HandleDecoded; nil means no type, and no cost bound on the
// first bytes.
func (s *Server) HandleInline(method string, req any, h HandlerFunc) {
	hd := handler{h: h, inline: true}
	if req != nil {
		t := reflect.TypeOf(req)
		if t.Kind() != reflect.Pointer {
			panic(fmt.Sprintf("rpc: HandleInline(%s): request type %T is not a pointer", method, req))
		}
		hd.req, hd.name = planFor(t), t.String()
	}
	s.handle(method, hd)
}

// maxInlineRequest is the largest request body an inline handler runs on the
// connection's reader: a single-point write is a few hundred bytes.
const maxInlineRequest = 4 << 10

func (s *Server) handle(method string, h handler) {
	if h.h == nil {
		panic("rpc: nil handler for " + method)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	handlers := maps.Clone(*s.handlers.Load())
	if _, dup := handlers[method]; dup {
		panic("rpc: method " + method + " registered twice")
	}
	handlers[method] = h
	s.handlers.Store(&handlers)
	internName(method)
}

// Listen listens on addr and serves it in background goroutines until
// Close. It returns the address it listens on, which tells the port when
// addr asked for any (":0"). It is Bind then Serve.
func (s *Server) Listen(addr string) (net.Addr, error) {
	a, err := s.Bind(addr)
	if err != nil {
		return nil, err
	}
	s.Serve()
	return a, nil
}

// Bind listens on addr without accepting connections yet, and returns the
// address it listens on: a caller that must know its own address before it can
// register its handlers (a node advertises it) binds, registers, then calls
// Serve, so that no caller ever finds a method missing. Connections that arrive
// in between wait in the kernel's backlog.
func (s *Server) Bind(addr string) (net.Addr, error) {
	l, err := s.t.Listen(addr)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		l.Close()
		return nil, ErrClosed
	}
	s.listeners[l] = struct{}{}
	s.pending = append(s.pending, l)
	return l.Addr(), nil
}

// Serve starts accepting on every address bound and not yet served. It does
// nothing after Close.
func (s *Server) Serve() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	for _, l := range s.pending {
		s.wg.Add(1)
		go s.accept(l)
	}
	s.pending = nil
}

// Quiesce waits until no connection has a request whose response is not sent yet, or
// until ctx ends (it then returns ctx's error). A process about to Close calls it so
// that the answers being made reach their callers — a decommission's own answer, whose
// handler tells the process to leave before it returns. Requests keep being served
// meanwhile: on a busy server it waits until ctx ends.
func (s *Server) Quiesce(ctx context.Context) error {
	tick := time.NewTicker(quiescePoll)
	defer tick.Stop()
	for {
		if s.idle() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// quiescePoll is how often Quiesce looks at the connections.
const quiescePoll = 2 * time.Millisecond

// idle reports whether no connection has a response still to send.
func (s *Server) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sc := range s.conns {
		if sc.running.Load() > 0 {
			return false
		}
	}
	return true
}

// Close stops listening, closes every connection, cancels the handlers'
// contexts and waits for the handlers to return.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for l := range s.listeners {
		l.Close()
	}
	for conn := range s.conns {
		conn.Close()
	}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	return nil
}

func (s *Server) accept(l net.Listener) {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		conn, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || s.ctx.Err() != nil {
				return
			}
			// Out of file descriptors and the like: wait and retry, as
			// net/http does, rather than spin or stop serving.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.cfg.Logger.Warn("rpc: accept failed; retrying", "addr", l.Addr().String(), "err", err, "backoff", backoff)
			select {
			case <-time.After(backoff):
			case <-s.ctx.Done():
				return
			}
			continue
		}
		backoff = 0
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			conn.Close()
			return
		}
		if s.live >= s.cfg.MaxConns && !s.reapLocked() {
			s.mu.Unlock()
			s.capLog.warn(s.cfg.Logger, "rpc: refused connection: all connections busy (Config.MaxConns)", "from", conn.RemoteAddr().String(), "max_conns", s.cfg.MaxConns)
			conn.Close()
			continue
		}
		sc := &serverConn{s: s, conn: conn, accepted: time.Now(), handshaking: true}
		s.conns[conn] = sc
		s.live++
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(sc)
	}
}

// reapLocked makes room for one connection at MaxConns: of the connections
// that run no request, it takes the one idle the longest (one still in its
// handshake counts as idle since it was accepted; one part-way through a
// frame, since its last byte arrived, so that stalled and trickling frames go
// before live clients). A connection that answered a request less than
// reapGrace ago, or began its handshake less than handshakeGrace ago, is
// taken only when no other is left (so is one whose handshake ended less than
// handshakeGrace ago and that has sent no request yet): under a flood of new connections, each
// as young as the last, a live client between two calls would otherwise be
// the oldest. Of those, one that answered settledCalls requests or more goes
// last: a flood of connections that make one cheap call each is live too,
// and would otherwise push out a client that calls 60 times a second. One in its handshake or part-way through a
// frame is closed; one waiting for its next frame is marked, and its reader
// says goodbye and closes it. It reports whether it found one. Called with
// s.mu held.
//
// A scan of every connection costs MaxConns lock-and-look steps, and under a
// flood every accept reaps: so a scan keeps the reapKeep oldest idle
// connections it found besides the one it takes, and the accepts of the next
// reapKeepFor take those, each checked again (still open, idle since the same
// time, running nothing), before scanning anew. A connection that only became idle
// enough to reap in that short time may thus go after those the scan found.
func (s *Server) reapLocked() bool {
	now := time.Now()
	if now.Sub(s.reapScanned) < reapKeepFor {
		for len(s.reapKept) > 0 {
			c := s.reapKept[len(s.reapKept)-1]
			s.reapKept[len(s.reapKept)-1] = reapCand{}
			s.reapKept = s.reapKept[:len(s.reapKept)-1]
			if s.conns[c.sc.conn] != c.sc {
				continue // closed since the scan
			}
			if since, class := c.sc.reapClass(now); class == reapIdle && since.Equal(c.since) {
				s.reapOne(c.sc, c.since)
				return true
			}
		}
	}
	s.reapScans++
	clear(s.reapKept)
	kept := s.reapKept[:0] // the oldest idle ones, oldest first, at most reapKeep+1
	var live, settled *serverConn
	var liveSince, settledSince time.Time
	for _, sc := range s.conns {
		t, class := sc.reapClass(now)
		switch class {
		case reapSettled:
			if settled == nil || t.Before(settledSince) {
				settled, settledSince = sc, t
			}
		case reapLive:
			if live == nil || t.Before(liveSince) {
				live, liveSince = sc, t
			}
		case reapIdle:
			if len(kept) <= reapKeep || t.Before(kept[len(kept)-1].since) {
				i, _ := slices.BinarySearchFunc(kept, t, func(c reapCand, t time.Time) int { return c.since.Compare(t) })
				kept = slices.Insert(kept, i, reapCand{sc, t})
				if len(kept) > reapKeep+1 {
					kept[len(kept)-1] = reapCand{}
					kept = kept[:len(kept)-1]
				}
			}
		}
	}
	if len(kept) > 0 {
		victim := kept[0]
		slices.Reverse(kept[1:]) // popped from the end: oldest first
		s.reapKept, s.reapScanned = kept[1:], now
		s.reapOne(victim.sc, victim.since)
		return true
	}
	s.reapKept = kept
	switch {
	case live != nil:
		s.reapOne(live, liveSince)
	case settled != nil:
		s.reapOne(settled, settledSince)
	default:
		return false
	}
	return true
}

// reapCand is a connection a reaper's scan found idle, and since when.
type reapCand struct {
	sc    *serverConn
	since time.Time
}

// The reaper's classes of connections, in the order it takes them.
const (
	reapNone    = iota // reaped already, or running a request: never taken
	reapIdle           // taken first, the one idle the longest
	reapLive           // answered lately or handshaking since just now: when no idle one is left
	reapSettled        // live, and answered settledCalls requests or more: last
)

// reapClass returns sc's class for the reaper and since when it is idle.
func (sc *serverConn) reapClass(now time.Time) (since time.Time, class int) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	switch {
	case sc.reaped:
		return time.Time{}, reapNone
	case sc.handshaking:
		since = sc.accepted
	case sc.running.Load() == 0:
		since = time.Unix(0, max(sc.lastActive.Load(), sc.lastRead.Load()))
	default:
		return time.Time{}, reapNone
	}
	// Live: answered a request lately, or handshaking since just now (an
	// honest handshake takes a round trip or two), or through its handshake
	// since just now and yet to send its first request (an honest client sends
	// it at once; without this grace a flood would reap it between the two, and
	// its first call would fail with the request not sent).
	var served bool
	switch last := sc.lastServed.Load(); {
	case sc.handshaking:
		served = now.Sub(sc.accepted) < handshakeGrace
	case last == 0:
		served = now.Sub(time.Unix(0, sc.lastActive.Load())) < handshakeGrace
	default:
		served = now.Sub(time.Unix(0, last)) < reapGrace
	}
	switch {
	case served && sc.answered.Load() >= settledCalls:
		return since, reapSettled
	case served:
		return since, reapLive
	}
	return since, reapIdle
}

// reapOne closes victim, idle since since, to make room at MaxConns. Called
// with s.mu held.
func (s *Server) reapOne(victim *serverConn, since time.Time) {
	victim.mu.Lock()
	s.reapLog.warn(s.cfg.Logger, "rpc: at Config.MaxConns: closing the connection idle the longest to make room",
		"max_conns", s.cfg.MaxConns, "from", victim.conn.RemoteAddr().String(), "idle", time.Since(since).Round(time.Millisecond))
	victim.reaped = true
	if victim.handshaking || !victim.waiting {
		victim.conn.Close()
	} else {
		// Wake the reader from its wait for the next frame.
		_ = victim.conn.SetReadDeadline(time.Unix(1, 0))
	}
	victim.mu.Unlock()
	s.live--
}

// reapKeep is how many idle connections a reaper's scan keeps to take next,
// besides the one it takes; reapKeepFor is how long they are taken before a
// new scan. A flood that reaps at every accept then scans once per reapKeep+1
// accepts.
const reapKeep = 15

var reapKeepFor = 50 * time.Millisecond // a var for TestReapKeepsOldestIdle

// serverConn is the state of one served connection that its handlers share.
type serverConn struct {
	s        *Server
	conn     net.Conn
	accepted time.Time
	budget   *semaphore.Weighted // Config.MaxInflightBytesPerConn
	wmu      sync.Mutex          // one response at a time on the wire
	wdl      time.Time           // the write deadline conn holds; under wmu
	running  atomic.Int32        // requests handed to workers whose response is not sent yet
	// lastActive is when the connection last read a request or sent a
	// response, in UNIX nanoseconds: the reaper takes the oldest.
	lastActive atomic.Int64
	// lastServed is when the connection last sent a response, in UNIX
	// nanoseconds (0: never).
	lastServed atomic.Int64
	// answered counts the responses the connection sent.
	answered atomic.Int64
	// lastRead is when the connection's reader last received bytes, in UNIX
	// nanoseconds: a frame that stalls part-way is idle since then.
	lastRead atomic.Int64

	// readDeadline is the read deadline conn holds as the reader last set it:
	// the idle deadline while it waits for frames, moved only once half of it
	// is used up (a timer update per request is dear on a small core), or a
	// frame's. Zero: to be set before the next wait. Only the reader uses it.
	readDeadline time.Time

	mu          sync.Mutex // guards the fields below, which the reaper reads
	handshaking bool       // the handshake is not complete
	waiting     bool       // the reader waits for a frame's first byte
	reaped      bool       // closed, or to be closed, to make room at MaxConns
}

// readActivity is a connection's reading side that notes when bytes last
// arrived.
type readActivity struct {
	net.Conn
	last *atomic.Int64
}

func (r readActivity) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	if n > 0 {
		r.last.Store(time.Now().UnixNano())
	}
	return n, err
}

// reapGrace is how long after answering a request a connection counts as
// live, to be reaped at MaxConns only when no other connection can be.
const reapGrace = time.Second

// handshakeGrace is how long a connection in its handshake, or through it and
// yet to send its first request, counts as live for the reaper; past it, it
// goes before live ones.
const handshakeGrace = 100 * time.Millisecond

// settledCalls is how many requests a live connection must have answered to
// be reaped after the other live ones.
const settledCalls = 8

// errIdle ends a connection that the server closed as idle or reaped.
var errIdle = errors.New("idle connection closed")

func (s *Server) serveConn(sc *serverConn) {
	conn := sc.conn
	defer s.wg.Done()
	defer func() {
		conn.Close()
		s.mu.Lock()
		delete(s.conns, conn)
		sc.mu.Lock()
		if !sc.reaped {
			s.live--
		}
		sc.mu.Unlock()
		s.mu.Unlock()
	}()
	if err := serverHandshake(conn, s.cfg.HandshakeTimeout, s.cfg.ClusterKey); err != nil {
		if errors.Is(err, ErrClusterKey) {
			s.keyLog.warn(s.cfg.Logger, "rpc: refused connection: cluster key", "from", conn.RemoteAddr().String(), "err", err)
		} else {
			s.dropLog.warnBurst(s.cfg.Logger, dropLogBurst, "rpc: refused connection", "from", conn.RemoteAddr().String(), "err", err)
		}
		return
	}
	sc.lastActive.Store(time.Now().UnixNano())
	sc.mu.Lock()
	sc.handshaking = false
	reaped := sc.reaped
	sc.mu.Unlock()
	if reaped {
		return
	}

	// When the connection ends nobody can receive the responses, so the
	// handlers still running for it are told to stop.
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	inflight := make(chan struct{}, s.cfg.MaxInflightPerConn)
	work := make(chan *envelope) // to a worker waiting for its next request
	fr := newFrameReader(readActivity{conn, &sc.lastRead}, s.cfg.MaxFrameSize)
	defer fr.release() // read only here: its buffer goes to the next connection
	sc.budget = semaphore.NewWeighted(int64(s.cfg.MaxInflightBytesPerConn))
	var held hold               // budget taken for the frame being read
	var frameDeadline time.Time // zero while the frame being read is buffered whole
	fr.check = s.checkRequest
	fr.reserve = func(n int) error {
		waited, err := s.budget.take(ctx, sc.budget, &held, n)
		if waited > 0 && err == nil && !frameDeadline.IsZero() {
			// Time spent waiting for the budget is not the sender's.
			frameDeadline = frameDeadline.Add(waited)
			sc.readDeadline = frameDeadline
			err = conn.SetReadDeadline(frameDeadline)
		}
		return err
	}
	for {
		// Take a slot before reading the next request: with all slots busy
		// the connection is not read, and TCP slows the sender down.
		select {
		case inflight <- struct{}{}:
		case <-ctx.Done():
			return
		}
		if err := sc.awaitFrame(fr); err != nil {
			if err != errIdle && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && ctx.Err() == nil {
				s.dropLog.warnBurst(s.cfg.Logger, dropLogBurst, "rpc: dropping connection", "from", conn.RemoteAddr().String(), "err", err)
			}
			return
		}
		// A frame already buffered whole (a small request, the usual case) needs
		// no deadline: its bytes are here.
		frameDeadline = time.Time{}
		if !fr.buffered() {
			frameDeadline = time.Now().Add(s.cfg.FrameTimeout)
			sc.readDeadline = frameDeadline
			if err := conn.SetReadDeadline(frameDeadline); err != nil {
				return
			}
		}
		b, err := fr.next()
		var refused *refusal
		if errors.As(err, &refused) {
			// Read past, nothing kept: answer it and read on.
			s.budget.give(sc.budget, &held)
			s.costLog.warn(s.cfg.Logger, "rpc: refused request from its first bytes: decode cost", "from", conn.RemoteAddr().String(),
				"method", refused.method, "err", refused.err)
			resp := envelope{kind: kindResponse, id: refused.id, code: CodeBadRequest, msg: refused.Error()}
			frame := resp.appendTo(beginFrame(nil))
			if finishFrame(frame, s.cfg.MaxFrameSize) == nil {
				sc.write(frame)
			}
			sc.lastActive.Store(time.Now().UnixNano())
			<-inflight
			continue
		}
		if err != nil {
			s.budget.give(sc.budget, &held)
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("frame not complete within %v (Config.FrameTimeout)", s.cfg.FrameTimeout)
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && ctx.Err() == nil {
				s.dropLog.warnBurst(s.cfg.Logger, dropLogBurst, "rpc: dropping connection", "from", conn.RemoteAddr().String(), "err", err)
			}
			return
		}
		var req envelope
		if err := req.decode(b); err != nil || req.kind != kindRequest {
			s.budget.give(sc.budget, &held)
			if err == nil {
				err = errors.New("response on a server connection")
			}
			s.dropLog.warnBurst(s.cfg.Logger, dropLogBurst, "rpc: dropping connection: bad request", "from", conn.RemoteAddr().String(), "err", err)
			return
		}
		req.held, held = held, hold{}    // given back when the response is sent
		req.arrived = sc.lastRead.Load() // when its last bytes were read
		sc.lastActive.Store(req.arrived)
		sc.running.Add(1)
		if len(b) <= maxInlineRequest && (*s.handlers.Load())[req.method].inline {
			sc.serve(ctx, &req)
			s.budget.give(sc.budget, &req.held)
			sc.running.Add(-1)
			<-inflight
			continue
		}
		r := new(envelope)
		*r = req
		select {
		case work <- r: // an idle worker takes it
		default:
			s.wg.Add(1)
			go sc.worker(ctx, r, work, inflight)
		}
	}
}

// refusal is the error with which Server.checkRequest refuses a request
// from its first bytes.
type refusal struct {
	id     uint64
	method string
	err    error
}

func (r *refusal) Error() string { return r.method + ": " + r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// checkRequest is the frame reader's check (see frameReader.check): it
// refuses a request to a method registered with HandleDecoded whose body's
// first bytes already declare more than Decode's cost bound allows the
// whole body.
func (s *Server) checkRequest(prefix []byte, n int) error {
	id, method, at, size, ok := requestHead(prefix)
	if !ok || at+size > n {
		return nil // not a request, or its head is cut off: the frame's decode will say
	}
	h, found := (*s.handlers.Load())[method]
	if !found || h.req == nil {
		return nil
	}
	body := prefix[at:min(len(prefix), at+size)]
	if err := checkDecodeCostPrefix(body, size, h.req, h.name); err != nil {
		return &refusal{id: id, method: method, err: err}
	}
	return nil
}

// awaitFrame waits for the first byte of the next frame, for at most
// ServerIdleTimeout while no request of the connection is running. It
// returns errIdle after it said goodbye to a connection that stayed idle, or
// that the server reaped to make room.
func (sc *serverConn) awaitFrame(fr *frameReader) error {
	idle := sc.s.cfg.ServerIdleTimeout
	for fr.r.Buffered() == 0 {
		sc.mu.Lock()
		if sc.reaped {
			sc.mu.Unlock()
			return sc.goodbye()
		}
		sc.waiting = true
		var err error
		switch {
		case idle <= 0:
			err = sc.conn.SetReadDeadline(time.Time{})
		case sc.readDeadline.IsZero() || sc.readDeadline.Sub(time.Unix(0, sc.lastRead.Load())) < idle/2:
			// Moved once half used up (the last read is a recent enough
			// clock): the wait below checks, when it fires, that the
			// connection really was idle for the whole timeout.
			sc.readDeadline = time.Now().Add(idle)
			err = sc.conn.SetReadDeadline(sc.readDeadline)
		}
		sc.mu.Unlock()
		if err != nil {
			return err
		}
		_, err = fr.r.Peek(1)
		sc.mu.Lock()
		sc.waiting = false
		reaped := sc.reaped
		sc.mu.Unlock()
		switch {
		case reaped:
			return sc.goodbye()
		case err == nil:
			return nil
		case !errors.Is(err, os.ErrDeadlineExceeded):
			return err
		case sc.running.Load() == 0 && time.Since(time.Unix(0, max(sc.lastActive.Load(), sc.lastRead.Load()))) >= idle:
			return sc.goodbye()
		}
		// Requests are still running, or the deadline was set before the
		// last request: the connection is not idle. Wait again.
		sc.readDeadline = time.Time{}
	}
	return nil
}

// goodbye tells the client that the server closes the connection without
// having read anything it sent after the responses it received, so it may
// send those calls again on a new connection, and returns errIdle.
func (sc *serverConn) goodbye() error {
	resp := envelope{kind: kindResponse, code: CodeGoingAway, msg: "rpc: idle connection closed by the server"}
	frame := resp.appendTo(beginFrame(nil))
	if finishFrame(frame, sc.s.cfg.MaxFrameSize) == nil {
		sc.write(frame)
	}
	return errIdle
}

// workerIdle is how long a connection's worker waits for another request before it
// ends. Workers are kept, not started per request, because a fresh goroutine grows
// its stack again for every request (runtime.morestack, a large share of a small
// request's CPU); an idle one costs its stack until then.
const workerIdle = 10 * time.Second

// worker serves req, then whatever requests the connection hands it, until the
// connection ends or none comes for workerIdle. Each request's in-flight slot is
// freed when its response is sent.
func (sc *serverConn) worker(ctx context.Context, req *envelope, work <-chan *envelope, inflight <-chan struct{}) {
	defer sc.s.wg.Done()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		sc.serve(ctx, req)
		sc.s.budget.give(sc.budget, &req.held)
		sc.running.Add(-1)
		<-inflight
		idle.Reset(workerIdle)
		select {
		case req = <-work:
		case <-idle.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// serve runs the handler of req and sends its response.
func (sc *serverConn) serve(ctx context.Context, req *envelope) {
	var rc *reqContext
	if req.timeout > 0 {
		// No timer unless the handler waits on it; the caller's time counts
		// from when the request arrived.
		rc = newReqContext(ctx, time.Unix(0, req.arrived).Add(req.timeout))
		defer rc.release()
		ctx = rc
	}
	resp := envelope{kind: kindResponse, id: req.id}
	body, err := sc.s.call(ctx, req.method, req.body)
	now := time.Now() // one clock reading for the checks and stamps below
	if rc != nil && rc.errAt(now) != nil || rc == nil && ctx.Err() != nil {
		// The caller stopped waiting (its deadline is a little earlier than
		// ours), or the conn or server is closing. A reply now would only
		// race the caller's own timer and turn its DeadlineExceeded into a
		// RemoteError.
		return
	}
	if err != nil {
		resp.code, resp.msg = errorCode(err), err.Error()
	} else {
		resp.body = body
	}
	limit := sc.s.cfg.MaxFrameSize
	frame := resp.appendTo(beginFrame(make([]byte, 0, frameHeaderLen+32+len(resp.msg)+len(resp.body))))
	if err := finishFrame(frame, limit); err != nil {
		resp = envelope{kind: kindResponse, id: req.id, code: CodeFrameTooLarge,
			msg: fmt.Sprintf("rpc: response of %s is %d bytes, the limit is %d", req.method, len(frame)-frameHeaderLen, limit)}
		frame = resp.appendTo(beginFrame(nil))
		if err := finishFrame(frame, limit); err != nil { // only with an absurdly small MaxFrameSize
			sc.s.cfg.Logger.Error("rpc: cannot send response", "method", req.method, "to", sc.conn.RemoteAddr().String(), "err", err)
			return
		}
	}
	sc.lastServed.Store(now.UnixNano())
	sc.answered.Add(1)
	sc.writeAt(frame, now)
}

// call runs the handler of method, turning a panic into an error so that one
// bad request does not take the node down.
func (s *Server) call(ctx context.Context, method string, req []byte) (resp []byte, err error) {
	h := (*s.handlers.Load())[method].h
	if h == nil {
		return nil, &RemoteError{Code: CodeUnknownMethod, Msg: fmt.Sprintf("rpc: unknown method %q", method)}
	}
	defer func() {
		if r := recover(); r != nil {
			s.cfg.Logger.Error(fmt.Sprintf("rpc: handler of %s panicked: %v", method, r), "stack", string(debug.Stack()))
			resp, err = nil, &RemoteError{Code: CodeInternal, Msg: fmt.Sprintf("rpc: handler of %s panicked: %v", method, r)}
		}
	}()
	return h(ctx, req)
}

func (sc *serverConn) write(frame []byte) { sc.writeAt(frame, time.Now()) }

// writeAt is write with the clock read already (now).
func (sc *serverConn) writeAt(frame []byte, now time.Time) {
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	sc.lastActive.Store(now.UnixNano()) // before the peer can see the response
	var err error
	if wt := sc.s.cfg.WriteTimeout; sc.wdl.Sub(now) < wt/2 { // moved when half used up: no timer update per response
		sc.wdl = now.Add(wt)
		err = sc.conn.SetWriteDeadline(sc.wdl)
	}
	if err == nil {
		_, err = sc.conn.Write(frame)
	}
	if err != nil {
		// A partial write leaves the stream out of step: drop the conn,
		// and the reader with it.
		sc.conn.Close()
	}
}
