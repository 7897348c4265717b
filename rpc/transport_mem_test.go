package rpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"golang.org/x/net/nettest"
)

// TestMemConn runs the standard net.Conn conformance tests (deadlines,
// concurrent use, close) on a MemNetwork connection.
func TestMemConn(t *testing.T) {
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		n := NewMemNetwork()
		l, err := n.Transport().Listen("server")
		if err != nil {
			return nil, nil, nil, err
		}
		c1, err = n.Transport().Dial(context.Background(), "server")
		if err != nil {
			return nil, nil, nil, err
		}
		c2, err = l.Accept()
		if err != nil {
			return nil, nil, nil, err
		}
		return c1, c2, func() { c1.Close(); c2.Close(); l.Close() }, nil
	})
}

// TestMemListener covers addresses in use, refused dials and closing.
func TestMemListener(t *testing.T) {
	n := NewMemNetwork()
	tr := n.Transport()
	l, err := tr.Listen("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Transport().Listen("a"); err == nil {
		t.Error("second Listen on one address succeeded")
	}
	if _, err := tr.Listen(""); err == nil {
		t.Error("Listen on an empty address succeeded")
	}
	if _, err := n.Transport().Dial(context.Background(), "nobody"); err == nil {
		t.Error("dial to an address nobody listens on succeeded")
	}
	queued, err := n.Transport().Dial(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
	}
	queued.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := queued.Read(make([]byte, 1)); err == nil {
		t.Error("a conn the closed listener never accepted still reads")
	}
	if _, err := tr.Listen("a"); err != nil {
		t.Errorf("Listen after Close: %v", err)
	}
}

// memCluster is a few nodes on a MemNetwork, each with one transport that
// its server and client share, as nodes of a simulation would.
type memCluster struct {
	net     *MemNetwork
	clients map[string]*Client
}

func newMemCluster(t *testing.T, names ...string) *memCluster {
	mc := &memCluster{net: NewMemNetwork(), clients: make(map[string]*Client)}
	for _, name := range names {
		tr := mc.net.Transport()
		startServer(t, tr, name, DefaultConfig(), map[string]HandlerFunc{"echo": echo})
		mc.clients[name] = newClient(t, tr, DefaultConfig())
	}
	return mc
}

// call calls from one node to another; a fault must make it fail at once,
// not at the deadline.
func (mc *memCluster) call(t *testing.T, from, to string) error {
	t.Helper()
	start := time.Now()
	_, err := mc.clients[from].Call(ctxTimeout(t, 10*time.Second), to, "echo", nil)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("%s → %s took %v: faults must fail fast", from, to, d)
	}
	return err
}

// check asserts which calls between nodes work.
func (mc *memCluster) check(t *testing.T, step string, want map[[2]string]bool) {
	t.Helper()
	for link, ok := range want {
		err := mc.call(t, link[0], link[1])
		switch {
		case ok && err != nil:
			t.Errorf("%s: %s → %s failed: %v", step, link[0], link[1], err)
		case !ok && !errors.Is(err, ErrUnreachable):
			t.Errorf("%s: %s → %s: got %v, want ErrUnreachable", step, link[0], link[1], err)
		}
	}
}

func TestMemNetworkFaults(t *testing.T) {
	mc := newMemCluster(t, "a", "b", "c")
	all := func(ok bool) map[[2]string]bool {
		m := make(map[[2]string]bool)
		for _, from := range []string{"a", "b", "c"} {
			for _, to := range []string{"a", "b", "c"} {
				if from != to {
					m[[2]string{from, to}] = ok
				}
			}
		}
		return m
	}
	mc.check(t, "healthy", all(true)) // leaves a connection open on every link

	mc.net.SetDown("b", true)
	mc.check(t, "b down", map[[2]string]bool{
		{"a", "b"}: false, {"b", "a"}: false, {"c", "b"}: false, {"b", "c"}: false,
		{"a", "c"}: true, {"c", "a"}: true,
	})
	mc.net.SetDown("b", false)
	mc.check(t, "b up again", all(true))

	mc.net.Partition([]string{"a"}, []string{"b", "c"})
	mc.check(t, "partitioned", map[[2]string]bool{
		{"a", "b"}: false, {"b", "a"}: false, {"a", "c"}: false, {"c", "a"}: false,
		{"b", "c"}: true, {"c", "b"}: true,
	})
	outsider := newClient(t, mc.net.Transport(), DefaultConfig())
	for _, to := range []string{"a", "b", "c"} {
		if _, err := outsider.Call(ctxTimeout(t, 5*time.Second), to, "echo", nil); err != nil {
			t.Errorf("a client named in no group cannot reach %s: %v", to, err)
		}
	}
	mc.net.Heal()
	mc.check(t, "healed", all(true))
}

// TestMemNetworkFaultClosesConns: taking a node down breaks the calls in
// flight on its connections at once.
func TestMemNetworkFaultClosesConns(t *testing.T) {
	for _, fault := range []string{"down", "partition"} {
		t.Run(fault, func(t *testing.T) {
			n := NewMemNetwork()
			started := make(chan struct{}, 1)
			startServer(t, n.Transport(), "server", DefaultConfig(), map[string]HandlerFunc{
				"block": func(ctx context.Context, _ []byte) ([]byte, error) {
					started <- struct{}{}
					<-ctx.Done()
					return nil, ctx.Err()
				},
			})
			tr := n.Transport()
			if _, err := tr.Listen("client"); err != nil { // names the client's end
				t.Fatal(err)
			}
			c := newClient(t, tr, DefaultConfig())
			errc := make(chan error, 1)
			go func() {
				_, err := c.Call(ctxTimeout(t, 10*time.Second), "server", "block", nil)
				errc <- err
			}()
			<-started
			start := time.Now()
			if fault == "down" {
				n.SetDown("server", true)
			} else {
				n.Partition([]string{"client"}, []string{"server"})
			}
			if err := <-errc; !errors.Is(err, ErrUnreachable) {
				t.Errorf("call in flight: got %v, want ErrUnreachable", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("call in flight took %v to fail", d)
			}
		})
	}
}

// TestMemNetworkMany: a thousand nodes in one process, each calling a few
// others, stay cheap.
func TestMemNetworkMany(t *testing.T) {
	const nodes = 1000
	n := NewMemNetwork()
	clients := make([]*Client, nodes)
	for i := range nodes {
		tr := n.Transport()
		startServer(t, tr, fmt.Sprint("node-", i), DefaultConfig(), map[string]HandlerFunc{"echo": echo})
		clients[i] = newClient(t, tr, DefaultConfig())
	}
	errs := make(chan error, nodes)
	for i, c := range clients {
		go func() {
			for k := 1; k <= 3; k++ {
				if _, err := c.Call(ctxTimeout(t, 10*time.Second), fmt.Sprint("node-", (i+k*k)%nodes), "echo", []byte("hi")); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range nodes {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
