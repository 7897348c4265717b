package rpc

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

// rawConn dials addr over TCP, bypassing the Client, to send what a broken
// or hostile peer would.
func rawConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	return conn
}

// handshake runs a valid client handshake on a raw conn.
func handshake(t *testing.T, conn net.Conn) {
	t.Helper()
	if err := clientHandshake(conn, 5*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(5 * time.Second))
}

// expectClosed reads until the server closes conn, failing on a timeout.
func expectClosed(t *testing.T, conn net.Conn) {
	t.Helper()
	if _, err := io.Copy(io.Discard, conn); err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		t.Fatalf("waiting for the server to close the connection: %v", err)
	}
}

func isReset(err error) bool { return strings.Contains(err.Error(), "connection reset") }

func helloBytes(version, min uint16) []byte {
	return hello{version: version, min: min}.append(nil)
}

// TestBadPeers: peers that break the protocol lose their own connection,
// with a log line that says why, and the server goes on serving others.
func TestBadPeers(t *testing.T) {
	frame := func(payload []byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(payload))), payload...)
	}
	request := func(id uint64, method string) []byte {
		e := envelope{kind: kindRequest, id: id, method: method, timeout: time.Second}
		return e.appendTo(nil)
	}
	tests := []struct {
		name      string
		handshake bool   // run a valid handshake first
		send      []byte // then send this
		wantReply []byte // the server answers this before closing
		wantLog   string
	}{
		{name: "garbage", send: []byte("GET / HTTP/1.1\r\n\r\n"), wantLog: "not a tsdht rpc peer"},
		{name: "wrong magic", send: append([]byte("XSDHT"), 0, 1, 0, 1), wantLog: "bad magic"},
		{name: "short hello", send: []byte("TSD"), wantLog: "handshake"},
		{
			name:      "newer version",
			send:      helloBytes(3, 3),
			wantReply: append(helloBytes(ProtocolVersion, minProtocolVersion), statusRefused),
			wantLog:   "peer speaks rpc protocol v3, we speak v2",
		},
		{name: "1 GiB frame", handshake: true, send: binary.BigEndian.AppendUint32(nil, 1<<30), wantLog: "peer declared 1073741824 bytes"},
		{name: "4 GiB frame", handshake: true, send: []byte{0xff, 0xff, 0xff, 0xff}, wantLog: "peer declared 4294967295 bytes"},
		{name: "garbage envelope", handshake: true, send: frame([]byte{0xdd, 0xff, 0xff, 0xff, 0xff}), wantLog: "bad request"},
		{name: "response envelope", handshake: true, send: frame((&envelope{kind: kindResponse, id: 1}).appendTo(nil)), wantLog: "response on a server connection"},
		{name: "trailing bytes", handshake: true, send: frame(append(request(1, "echo"), 0xc0)), wantLog: "trailing"},
		{name: "truncated frame", handshake: true, send: binary.BigEndian.AppendUint32(nil, 100)[:3]},
	}
	var logs logBuffer
	cfg := DefaultConfig()
	cfg.MaxFrameSize = 1 << 20
	cfg.HandshakeTimeout = 200 * time.Millisecond // for "short hello"
	cfg.Logger = logs.logger()
	_, addr := startServer(t, NewTCPTransport(), "127.0.0.1:0", cfg, map[string]HandlerFunc{"echo": echo})
	good := newClient(t, NewTCPTransport(), DefaultConfig())

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before runtime.MemStats
			runtime.ReadMemStats(&before)

			conn := rawConn(t, addr)
			if tt.handshake {
				handshake(t, conn)
			}
			if _, err := conn.Write(tt.send); err != nil {
				t.Fatal(err)
			}
			if tt.wantReply != nil {
				got := make([]byte, len(tt.wantReply))
				if _, err := io.ReadFull(conn, got); err != nil || string(got) != string(tt.wantReply) {
					t.Fatalf("reply %x, %v; want %x", got, err, tt.wantReply)
				}
			}
			if tt.name == "truncated frame" {
				conn.(*net.TCPConn).CloseWrite()
			}
			expectClosed(t, conn)

			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
				t.Errorf("serving a bad peer allocated %d bytes", grew)
			}
			if tt.wantLog != "" {
				testutil.WaitFor(t, 5*time.Second, func() bool { return strings.Contains(logs.String(), tt.wantLog) }, "log line %s", tt.wantLog)
			}
			if _, err := good.Call(ctxTimeout(t, 5*time.Second), addr, "echo", []byte("still here")); err != nil {
				t.Fatalf("server stopped serving others: %v", err)
			}
		})
	}
}

// TestVersionMismatchClient: a client that reaches a server speaking another
// protocol version fails with an error that says so, as unreachable.
func TestVersionMismatchClient(t *testing.T) {
	l := testutil.Listen(t)
	go func() { // a server from the future
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		io.ReadFull(conn, make([]byte, helloLen))
		conn.Write(append(helloBytes(3, 3), statusRefused))
		io.Copy(io.Discard, conn)
	}()
	c := newClient(t, NewTCPTransport(), DefaultConfig())
	_, err := c.Call(ctxTimeout(t, 5*time.Second), l.Addr().String(), "echo", nil)
	if !errors.Is(err, ErrUnreachable) || !errors.Is(err, ErrVersionMismatch) {
		t.Fatalf("got %v, want ErrUnreachable and ErrVersionMismatch", err)
	}
	if !strings.Contains(err.Error(), "peer speaks rpc protocol v3, we speak v2") {
		t.Errorf("error %q does not say which versions", err)
	}
}

// TestNotAServer: a client that reaches something other than a tsdht server
// says so.
func TestNotAServer(t *testing.T) {
	l := testutil.Listen(t)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		conn.Write([]byte("SSH-2.0-OpenSSH_9.2\r\n"))
		io.Copy(io.Discard, conn)
	}()
	c := newClient(t, NewTCPTransport(), DefaultConfig())
	_, err := c.Call(ctxTimeout(t, 5*time.Second), l.Addr().String(), "echo", nil)
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "not a tsdht rpc peer") {
		t.Fatalf("got %v", err)
	}
}

// TestSilentPeer: a peer that connects and says nothing is dropped after
// HandshakeTimeout; a client whose server says nothing gives up likewise.
func TestSilentPeer(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HandshakeTimeout = 50 * time.Millisecond
	_, addr := startServer(t, NewTCPTransport(), "127.0.0.1:0", cfg, nil)
	expectClosed(t, rawConn(t, addr))

	l := testutil.Listen(t)
	accepted := make(chan net.Conn, 1)
	go func() {
		if conn, err := l.Accept(); err == nil {
			accepted <- conn
		}
	}()
	c := newClient(t, NewTCPTransport(), cfg)
	_, err := c.Call(context.Background(), l.Addr().String(), "echo", nil)
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("got %v, want ErrUnreachable", err)
	}
	(<-accepted).Close()
}

// TestServerByteBudget: requests over all connections hold at most MaxInflightBytes.
// A second large request waits for the first to finish before it is even read; when
// both are done the whole budget is back.
func TestServerByteBudget(t *testing.T) {
	nw := networks()[0]
	cfg := DefaultConfig()
	cfg.MaxFrameSize = 1 << 20
	cfg.MaxInflightBytes = 1 << 20
	started := make(chan int, 4)
	release := make(chan struct{})
	_, addr := startServer(t, nw.server, nw.addr, cfg, map[string]HandlerFunc{
		"hold": func(ctx context.Context, req []byte) ([]byte, error) {
			started <- len(req)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil, nil
		},
		"echo": echo,
	})
	big := make([]byte, 600<<10)
	errs := make(chan error, 2)
	for range 2 { // two connections: the budget is the server's, not a connection's
		c := newClient(t, nw.client, cfg)
		go func() {
			_, err := c.Call(ctxTimeout(t, 20*time.Second), addr, "hold", big)
			errs <- err
		}()
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("no large request started")
	}
	select {
	case <-started:
		t.Fatal("a second 600 KiB request ran beside the first within a 1 MiB budget")
	case <-time.After(200 * time.Millisecond): // absence cannot be awaited; this only bounds the check
	}
	release <- struct{}{} // the first finishes; the second may now be read
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the second large request never started after the first finished")
	}
	release <- struct{}{}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// The whole budget is back: a request of nearly the frame limit is read at once.
	small := newClient(t, nw.client, cfg)
	if _, err := small.Call(ctxTimeout(t, 10*time.Second), addr, "echo", make([]byte, 1<<20-64)); err != nil {
		t.Fatalf("request of the full budget afterwards: %v", err)
	}
}

// TestBindThenServe: a call that reaches a bound server before Serve waits for it
// and then finds the handler registered in between, instead of "unknown method".
func TestBindThenServe(t *testing.T) {
	for _, nw := range networks() {
		t.Run(nw.name, func(t *testing.T) {
			s := NewServer(nw.server, Config{})
			defer s.Close()
			addr, err := s.Bind(nw.addr)
			if err != nil {
				t.Fatal(err)
			}
			c := NewClient(nw.client, Config{})
			defer c.Close()
			type result struct {
				resp []byte
				err  error
			}
			done := make(chan result, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				resp, err := c.Call(ctx, addr.String(), "late", []byte("hi"))
				done <- result{resp, err}
			}()
			s.Handle("late", echo)
			s.Serve()
			r := <-done
			if r.err != nil || string(r.resp) != "hi" {
				t.Fatalf("call made before Serve: %q, %v; want the handler registered after Bind to answer", r.resp, r.err)
			}
		})
	}
}
