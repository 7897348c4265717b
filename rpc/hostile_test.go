package rpc

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

// TestHeaderFlood: 16 connections that each send the handshake and a frame
// header declaring 4 MiB, then nothing, used to pin the whole 64 MiB budget
// (208 bytes stopped a node). Frames are now charged as their bytes arrive:
// a normal call, with a body of nearly a full frame, still completes at once.
func TestHeaderFlood(t *testing.T) {
	cfg := DefaultConfig() // 4 MiB frames, 64 MiB budget, 16 MiB a connection
	_, addr := startServer(t, NewTCPTransport(), "127.0.0.1:0", cfg, map[string]HandlerFunc{"echo": echo})
	for range 16 {
		conn := rawConn(t, addr)
		handshake(t, conn)
		if _, err := conn.Write(binary.BigEndian.AppendUint32(nil, uint32(cfg.MaxFrameSize))); err != nil {
			t.Fatal(err)
		}
	}
	c := newClient(t, NewTCPTransport(), DefaultConfig())
	for _, size := range []int{64, 4<<20 - 1024} {
		if _, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", make([]byte, size)); err != nil {
			t.Fatalf("a %d-byte call beside 16 stalled 4 MiB frames: %v", size, err)
		}
	}
}

// TestFrameTimeout: a frame whose bytes trickle in (slowloris), or stop after
// its header, closes its connection when FrameTimeout passes, with a log
// line that says so, and gives its bytes back.
func TestFrameTimeout(t *testing.T) {
	var logs logBuffer
	cfg := DefaultConfig()
	cfg.FrameTimeout = 300 * time.Millisecond
	cfg.MaxInflightBytes = cfg.MaxFrameSize // no room but the reserve: a held byte would show
	cfg.Logger = logs.logger()
	_, addr := startServer(t, NewTCPTransport(), "127.0.0.1:0", cfg, map[string]HandlerFunc{"echo": echo})

	trickle := func(conn net.Conn, b []byte) {
		for _, c := range b {
			if _, err := conn.Write([]byte{c}); err != nil {
				return // closed by the server
			}
			time.Sleep(50 * time.Millisecond) // the trickle's pace, not a wait for a condition
		}
	}
	for _, tt := range []struct {
		name string
		send func(net.Conn)
	}{
		{"header trickled", func(c net.Conn) { trickle(c, []byte{0, 0x10, 0, 0}) }},
		{"body trickled", func(c net.Conn) {
			c.Write(binary.BigEndian.AppendUint32(nil, 100<<10))
			c.Write(make([]byte, 80<<10)) // past the first chunk: the frame waits for budget it then holds
			trickle(c, make([]byte, 100))
		}},
		{"stalled after the header", func(c net.Conn) { c.Write([]byte{0, 0x40, 0, 0}) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conn := rawConn(t, addr)
			handshake(t, conn)
			start := time.Now()
			go tt.send(conn)
			expectClosed(t, conn)
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("closed after %v, FrameTimeout is %v", took, cfg.FrameTimeout)
			}
			testutil.WaitFor(t, 5*time.Second, func() bool { return strings.Contains(logs.String(), "FrameTimeout") }, "the log line")
			// The whole budget is back: a frame of the full size is read.
			c := newClient(t, NewTCPTransport(), DefaultConfig())
			if _, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", make([]byte, cfg.MaxFrameSize-1024)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestByteBudgetNoDeadlock: frames that are all part-read cannot hold the
// whole budget waiting for each other: the reserve lets one complete at a
// time. Eight connections send 3 MiB frames into a 8 MiB budget at once.
func TestByteBudgetNoDeadlock(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxInflightBytes = 8 << 20
	cfg.FrameTimeout = time.Minute // a deadlock must show as one, not be cut short
	_, addr := startServer(t, NewTCPTransport(), "127.0.0.1:0", cfg, map[string]HandlerFunc{"echo": func(_ context.Context, req []byte) ([]byte, error) {
		return nil, nil
	}})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		c := newClient(t, NewTCPTransport(), cfg)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				if _, err := c.Call(ctxTimeout(t, 30*time.Second), addr, "echo", make([]byte, 3<<20)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestServerIdleTimeout: the server closes a connection idle for
// ServerIdleTimeout with a goodbye, and the client's next call reconnects
// without an error.
func TestServerIdleTimeout(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ServerIdleTimeout = 100 * time.Millisecond
	s, addr := startServer(t, NewTCPTransport(), "127.0.0.1:0", cfg, map[string]HandlerFunc{"echo": echo})
	tr := &countingTransport{Transport: NewTCPTransport()}
	ccfg := DefaultConfig()
	ccfg.IdleTimeout = time.Hour // the client does not close it: the server must
	c := newClient(t, tr, ccfg)
	if _, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", nil); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return serverConns(s) == 0 }, "the server to close the idle connection")
	testutil.WaitFor(t, 5*time.Second, func() bool { return clientConns(c) == 0 }, "the client to hear the goodbye")
	if _, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", nil); err != nil {
		t.Fatalf("call after the server closed the idle connection: %v", err)
	}
	if n := tr.dials.Load(); n != 2 {
		t.Errorf("%d dials, want 2", n)
	}

	// A connection with a request running is not idle, however long it runs.
	release := make(chan struct{})
	s.Handle("wait", func(context.Context, []byte) ([]byte, error) { <-release; return []byte("ok"), nil })
	errc := make(chan error, 1)
	go func() {
		_, err := c.Call(ctxTimeout(t, 10*time.Second), addr, "wait", nil)
		errc <- err
	}()
	time.Sleep(5 * cfg.ServerIdleTimeout) // lets the idle timer misbehave; correctness does not depend on it
	close(release)
	if err := <-errc; err != nil {
		t.Fatalf("a busy connection was closed as idle: %v", err)
	}
}

// TestGoingAwayRetry: a call whose request reached a connection the server
// was closing as idle is sent again on a new connection, once, without the
// caller seeing an error.
func TestGoingAwayRetry(t *testing.T) {
	l := testutil.Listen(t)
	go func() {
		for i := 0; ; i++ {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				if serverHandshake(conn, 5*time.Second, nil) != nil {
					return
				}
				fr := newFrameReader(conn, 1<<20)
				b, err := fr.next()
				if err != nil {
					return
				}
				var req envelope
				if req.decode(b) != nil {
					return
				}
				resp := envelope{kind: kindResponse, id: req.id, body: []byte("second")}
				if i == 0 { // the first connection says goodbye instead
					resp = envelope{kind: kindResponse, code: CodeGoingAway}
				}
				frame := resp.appendTo(beginFrame(nil))
				finishFrame(frame, 1<<20)
				conn.Write(frame)
				io.Copy(io.Discard, conn)
			}()
		}
	}()
	c := newClient(t, NewTCPTransport(), DefaultConfig())
	got, err := c.Call(ctxTimeout(t, 5*time.Second), l.Addr().String(), "echo", nil)
	if err != nil || string(got) != "second" {
		t.Fatalf("got %q, %v; want the answer of the second connection", got, err)
	}
}

// TestConnCap: at MaxConns a new connection takes the place of the one idle
// the longest (its client reconnects on its next call without an error);
// when every connection is busy, the new one is refused.
func TestConnCap(t *testing.T) {
	var logs logBuffer
	cfg := DefaultConfig()
	cfg.MaxConns = 4
	cfg.Logger = logs.logger()
	release := make(chan struct{})
	s, addr := startServer(t, NewTCPTransport(), "127.0.0.1:0", cfg, map[string]HandlerFunc{
		"echo": echo,
		"wait": func(ctx context.Context, _ []byte) ([]byte, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil, nil
		},
	})
	clients := make([]*Client, 4)
	for i := range clients {
		clients[i] = newClient(t, NewTCPTransport(), DefaultConfig())
		if _, err := clients[i].Call(ctxTimeout(t, 5*time.Second), addr, "echo", nil); err != nil {
			t.Fatal(err)
		}
	}
	idle := func(n int) func() bool {
		return func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			k := 0
			for _, sc := range s.conns {
				sc.mu.Lock()
				if !sc.reaped && sc.waiting && sc.running.Load() == 0 {
					k++
				}
				sc.mu.Unlock()
			}
			return k == n && len(s.conns) == n
		}
	}
	testutil.WaitFor(t, 5*time.Second, idle(4), "4 idle connections")
	// A fifth client: the oldest idle one, client 0, makes room.
	fifth := newClient(t, NewTCPTransport(), DefaultConfig())
	if _, err := fifth.Call(ctxTimeout(t, 5*time.Second), addr, "echo", nil); err != nil {
		t.Fatalf("a connection at the cap with idle ones to reap: %v", err)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return clientConns(clients[0]) == 0 }, "client 0 to lose its connection")
	s.mu.Lock()
	if s.live > cfg.MaxConns {
		t.Errorf("%d connections, cap %d", s.live, cfg.MaxConns)
	}
	s.mu.Unlock()
	// Client 0 calls again as if nothing happened, reaping another.
	if _, err := clients[0].Call(ctxTimeout(t, 5*time.Second), addr, "echo", nil); err != nil {
		t.Fatalf("call on a reaped client: %v", err)
	}

	testutil.WaitFor(t, 5*time.Second, idle(4), "4 idle connections")
	defer func() {
		if t.Failed() {
			s.mu.Lock()
			for _, sc := range s.conns {
				t.Logf("conn %s handshaking %v running %d reaped %v", sc.conn.RemoteAddr(), sc.handshaking, sc.running.Load(), sc.reaped)
			}
			s.mu.Unlock()
			t.Log(logs.String())
		}
	}()

	// Every connection busy: a new one is refused, and says so in the log. The busy
	// clients come one at a time, each once the one before is running, so that none is
	// between its handshake and its first request when another's accept reaps (it is
	// spared only for handshakeGrace: TestReapClass).
	busy := make([]*Client, 4)
	var wg sync.WaitGroup
	for i := range busy {
		busy[i] = newClient(t, NewTCPTransport(), DefaultConfig())
	}
	for i, c := range busy {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Call(ctxTimeout(t, 20*time.Second), addr, "wait", nil); err != nil {
				t.Logf("busy call: %v", err)
			}
		}()
		testutil.WaitFor(t, 5*time.Second, func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			n := 0
			for _, sc := range s.conns {
				if sc.running.Load() > 0 {
					n++
				}
			}
			return n == i+1
		}, "%d busy connections", i+1)
	}
	late := newClient(t, NewTCPTransport(), DefaultConfig())
	_, err := late.Call(ctxTimeout(t, 5*time.Second), addr, "echo", nil)
	if !errors.Is(err, ErrUnreachable) {
		t.Errorf("a connection over the cap with none idle: got %v, want ErrUnreachable", err)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return strings.Contains(logs.String(), "Config.MaxConns") }, "the log line")
	close(release)
	wg.Wait()
}

// TestHandshakeFloodReaped: connections that never finish their handshake
// are the first to make room at the cap.
func TestHandshakeFloodReaped(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxConns = 8
	cfg.HandshakeTimeout = time.Minute
	_, addr := startServer(t, NewTCPTransport(), "127.0.0.1:0", cfg, map[string]HandlerFunc{"echo": echo})
	c := newClient(t, NewTCPTransport(), DefaultConfig())
	if _, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", nil); err != nil {
		t.Fatal(err)
	}
	for range 64 {
		rawConn(t, addr) // connects, says nothing
	}
	if _, err := NewClient(NewTCPTransport(), DefaultConfig()).Call(ctxTimeout(t, 5*time.Second), addr, "echo", nil); err != nil {
		t.Fatalf("a new client behind 64 silent connections: %v", err)
	}
	if _, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", nil); err != nil {
		t.Fatalf("the established client behind 64 silent connections: %v", err)
	}
}

// TestHandshakeTrickle: a hello trickled a byte at a time is cut by
// HandshakeTimeout, which bounds the whole handshake, not each read.
func TestHandshakeTrickle(t *testing.T) {
	var logs logBuffer
	cfg := DefaultConfig()
	cfg.HandshakeTimeout = 300 * time.Millisecond
	cfg.Logger = logs.logger()
	_, addr := startServer(t, NewTCPTransport(), "127.0.0.1:0", cfg, nil)
	conn := rawConn(t, addr)
	start := time.Now()
	go func() {
		for _, c := range helloBytes(ProtocolVersion, minProtocolVersion) {
			if _, err := conn.Write([]byte{c}); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond) // the trickle's pace, not a wait for a condition
		}
	}()
	expectClosed(t, conn)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("closed after %v, HandshakeTimeout is %v", took, cfg.HandshakeTimeout)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return strings.Contains(logs.String(), "handshake") }, "the log line")
}

// TestConnCapReapsStalledFrames: at MaxConns, connections whose frame stalled part-way
// are idle since their last byte, so they make room before a live client that is
// merely between calls: the live client keeps its connection (they used to be out of
// the reaper's reach until FrameTimeout, and a flood of them left only live clients
// to reap).
func TestConnCapReapsStalledFrames(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxConns = 3
	s, addr := startServer(t, NewTCPTransport(), "127.0.0.1:0", cfg, map[string]HandlerFunc{"echo": echo})
	var stalled []net.Conn
	for range 2 {
		conn := rawConn(t, addr)
		handshake(t, conn)
		sent := time.Now()
		if _, err := conn.Write(binary.BigEndian.AppendUint32(nil, 1<<20)); err != nil {
			t.Fatal(err)
		}
		// The server has read the header before the next stalls: on a busy machine
		// its readers could otherwise take the two in either order, and the second
		// would be the one idle the longest.
		testutil.WaitFor(t, 5*time.Second, func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			for _, sc := range s.conns {
				if sc.conn.RemoteAddr().String() == conn.LocalAddr().String() {
					return sc.lastRead.Load() >= sent.UnixNano()
				}
			}
			return false
		}, "the server to read the stalled frame's header")
		stalled = append(stalled, conn)
	}
	live := &countingTransport{Transport: NewTCPTransport()}
	c := newClient(t, live, DefaultConfig())
	newcomer := newClient(t, NewTCPTransport(), DefaultConfig())
	for i := range 3 {
		if _, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", []byte("live")); err != nil {
			t.Fatalf("the live client's call %d: %v", i, err)
		}
		if i == 1 { // at the cap, a newcomer after the live client's call
			if _, err := newcomer.Call(ctxTimeout(t, 5*time.Second), addr, "echo", nil); err != nil {
				t.Fatalf("a newcomer at the cap: %v", err)
			}
		}
	}
	if n := live.dials.Load(); n != 1 {
		t.Errorf("the live client dialed %d times: its connection was reaped before a stalled frame", n)
	}
	expectClosed(t, stalled[0]) // the stalled frame idle the longest made room
}

// TestConnCapSparesLiveClients: at MaxConns, a connection in its handshake for longer
// than handshakeGrace goes before a client that was answered less than reapGrace ago,
// even when the handshake began after the client's last call but one: under a flood
// of new connections a live client between two calls is otherwise the oldest and
// loses its connection.
func TestConnCapSparesLiveClients(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxConns = 3
	s, addr := startServer(t, NewTCPTransport(), "127.0.0.1:0", cfg, map[string]HandlerFunc{"echo": echo})
	live := &countingTransport{Transport: NewTCPTransport()}
	c := newClient(t, live, DefaultConfig())
	if _, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", nil); err != nil {
		t.Fatal(err)
	}
	silent := rawConn(t, addr) // accepted after the live client's call; says nothing
	other := newClient(t, NewTCPTransport(), DefaultConfig())
	if _, err := other.Call(ctxTimeout(t, 5*time.Second), addr, "echo", nil); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, sc := range s.conns {
			if sc.handshaking && time.Since(sc.accepted) > handshakeGrace {
				return true
			}
		}
		return false
	}, "the silent connection to be in its handshake for longer than handshakeGrace")
	newcomer := newClient(t, NewTCPTransport(), DefaultConfig())
	if _, err := newcomer.Call(ctxTimeout(t, 5*time.Second), addr, "echo", nil); err != nil {
		t.Fatalf("a newcomer at the cap: %v", err)
	}
	expectClosed(t, silent)
	if _, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", nil); err != nil {
		t.Fatal(err)
	}
	if n := live.dials.Load(); n != 1 {
		t.Errorf("the live client dialed %d times: it was reaped before a silent handshake", n)
	}
}

// TestConnCapSparesSettledClients: at the cap, a flood of connections that each
// make one call (live, as answered in the last second) takes the places of one
// another, not that of a client that has made many calls, however recent they are.
func TestConnCapSparesSettledClients(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxConns = 3
	_, addr := startServer(t, NewTCPTransport(), "127.0.0.1:0", cfg, map[string]HandlerFunc{"echo": echo})
	settled := &countingTransport{Transport: NewTCPTransport()}
	c := newClient(t, settled, DefaultConfig())
	for range settledCalls {
		if _, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 * cfg.MaxConns {
		flood := newClient(t, NewTCPTransport(), DefaultConfig())
		if _, err := flood.Call(ctxTimeout(t, 5*time.Second), addr, "echo", nil); err != nil {
			t.Fatalf("flooding connection %d: %v", i, err)
		}
	}
	if _, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", nil); err != nil {
		t.Fatal(err)
	}
	if n := settled.dials.Load(); n != 1 {
		t.Errorf("the settled client dialed %d times: a flood of one-call connections pushed it out", n)
	}
}
