package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"runtime/debug"
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
	handlers atomic.Pointer[map[string]HandlerFunc] // copied on write: read without a lock per request
	ctx      context.Context                        // handlers' contexts derive from it; Close cancels it
	cancel   context.CancelFunc
	wg       sync.WaitGroup      // accept loops, connections and handlers, for Close
	budget   *semaphore.Weighted // Config.MaxInflightBytes over all connections

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	closed    bool
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
		conns:     make(map[net.Conn]struct{}),
	}
	s.budget = semaphore.NewWeighted(int64(s.cfg.MaxInflightBytes))
	s.handlers.Store(&map[string]HandlerFunc{})
	return s
}

// Handle registers h for method. Register methods before Listen, so that no
// early caller finds them missing. Registering a method twice panics.
func (s *Server) Handle(method string, h HandlerFunc) {
	if h == nil {
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
}

// Listen listens on addr and serves it in background goroutines until
// Close. It returns the address it listens on, which tells the port when
// addr asked for any (":0").
func (s *Server) Listen(addr string) (net.Addr, error) {
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
	s.wg.Add(1)
	go s.accept(l)
	return l.Addr(), nil
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
		s.conns[conn] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(conn)
	}
}

// serverConn is the state of one served connection that its handlers share.
type serverConn struct {
	s    *Server
	conn net.Conn
	wmu  sync.Mutex // one response at a time on the wire
}

func (s *Server) serveConn(conn net.Conn) {
	defer s.wg.Done()
	defer func() {
		conn.Close()
		s.mu.Lock()
		delete(s.conns, conn)
		s.mu.Unlock()
	}()
	if err := serverHandshake(conn, s.cfg.HandshakeTimeout); err != nil {
		s.cfg.Logger.Warn("rpc: refused connection", "from", conn.RemoteAddr().String(), "err", err)
		return
	}

	// When the connection ends nobody can receive the responses, so the
	// handlers still running for it are told to stop.
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	sc := &serverConn{s: s, conn: conn}
	inflight := make(chan struct{}, s.cfg.MaxInflightPerConn)
	work := make(chan *envelope) // to a worker waiting for its next request
	fr := newFrameReader(conn, s.cfg.MaxFrameSize)
	reserved := 0 // budget taken for the frame being read
	fr.reserve = func(n int) error {
		if err := s.budget.Acquire(ctx, int64(n)); err != nil {
			return err
		}
		reserved = n
		return nil
	}
	for {
		// Take a slot before reading the next request: with all slots busy
		// the connection is not read, and TCP slows the sender down.
		select {
		case inflight <- struct{}{}:
		case <-ctx.Done():
			return
		}
		reserved = 0
		b, err := fr.next()
		if err != nil {
			s.budget.Release(int64(reserved))
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && ctx.Err() == nil {
				s.cfg.Logger.Warn("rpc: dropping connection", "from", conn.RemoteAddr().String(), "err", err)
			}
			return
		}
		var req envelope
		if err := req.decode(b); err != nil || req.kind != kindRequest {
			s.budget.Release(int64(reserved))
			if err == nil {
				err = errors.New("response on a server connection")
			}
			s.cfg.Logger.Warn("rpc: dropping connection: bad request", "from", conn.RemoteAddr().String(), "err", err)
			return
		}
		req.held = reserved // the worker gives it back when the response is sent
		select {
		case work <- &req: // an idle worker takes it
		default:
			s.wg.Add(1)
			go sc.worker(ctx, &req, work, inflight)
		}
	}
}

// workerIdle is how long a connection's worker waits for another request before it
// ends. Workers are kept, not started per request, because a fresh goroutine grows
// its stack again for every request (12–20 % of a single-point write's CPU was
// runtime.morestack); an idle one costs its stack until then.
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
		sc.s.budget.Release(int64(req.held))
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
	if req.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.timeout)
		defer cancel()
	}
	resp := envelope{kind: kindResponse, id: req.id}
	body, err := sc.s.call(ctx, req.method, req.body)
	if ctx.Err() != nil {
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
	sc.write(frame)
}

// call runs the handler of method, turning a panic into an error so that one
// bad request does not take the node down.
func (s *Server) call(ctx context.Context, method string, req []byte) (resp []byte, err error) {
	h := (*s.handlers.Load())[method]
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

func (sc *serverConn) write(frame []byte) {
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	err := sc.conn.SetWriteDeadline(time.Now().Add(sc.s.cfg.WriteTimeout))
	if err == nil {
		_, err = sc.conn.Write(frame)
	}
	if err != nil {
		// A partial write leaves the stream out of step: drop the conn,
		// and the reader with it.
		sc.conn.Close()
	}
}
