package rpc

import (
	"context"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

// countingTransport counts dials, so tests can tell that connections are
// reused.
type countingTransport struct {
	Transport
	dials atomic.Int32
}

func (t *countingTransport) Dial(ctx context.Context, addr string) (net.Conn, error) {
	t.dials.Add(1)
	return t.Transport.Dial(ctx, addr)
}

// network is a transport under test: one to serve on, another to dial from,
// and an address to listen on.
type network struct {
	name           string
	server, client Transport
	addr           string
}

func networks() []network {
	mem := NewMemNetwork()
	return []network{
		{name: "tcp", server: NewTCPTransport(), client: NewTCPTransport(), addr: "127.0.0.1:0"},
		{name: "mem", server: mem.Transport(), client: mem.Transport(), addr: "server"},
	}
}

// handlers used across the tests.
var (
	echo HandlerFunc = func(_ context.Context, req []byte) ([]byte, error) { return req, nil }

	// block waits for its context to end.
	block HandlerFunc = func(ctx context.Context, _ []byte) ([]byte, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
)

// startServer serves handlers on addr until the test ends and returns the
// bound address.
func startServer(t testing.TB, tr Transport, addr string, cfg Config, handlers map[string]HandlerFunc) (*Server, string) {
	t.Helper()
	s := NewServer(tr, cfg)
	for method, h := range handlers {
		s.Handle(method, h)
	}
	bound, err := s.Listen(addr)
	if err != nil {
		t.Fatalf("Listen(%q): %v", addr, err)
	}
	t.Cleanup(func() { s.Close() })
	return s, bound.String()
}

// newClient returns a client that is closed when the test ends.
func newClient(t testing.TB, tr Transport, cfg Config) *Client {
	c := NewClient(tr, cfg)
	t.Cleanup(func() { c.Close() })
	return c
}

// clientConns counts a client's open connections.
func clientConns(c *Client) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.conns)
}

// serverConns counts a server's open connections.
func serverConns(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// logBuffer collects a Config.Logger's output, safely for concurrent use.
type logBuffer struct{ testutil.SyncBuffer }

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// ctxTimeout returns a context that ends after d, cancelled when the test ends.
func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
