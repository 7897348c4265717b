package rpc

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/clusterkey"
	"github.com/tsdht/tsdht/internal/testutil"
)

// newKey returns a random cluster key.
func newKey(t testing.TB) clusterkey.Key {
	t.Helper()
	r, err := clusterkey.Parse([]byte(clusterkey.Generate()))
	if err != nil {
		t.Fatal(err)
	}
	return r[0]
}

// TestClusterKey: with a cluster key, a connection is served only when both
// sides prove they hold a key the other accepts; every refusal says "cluster
// key" to the caller, and the server logs it.
func TestClusterKey(t *testing.T) {
	k1, k2 := newKey(t), newKey(t)
	tests := []struct {
		name           string
		server, client clusterkey.Ring
		want           string // in the caller's error; "" for success
	}{
		{"no key anywhere", nil, nil, ""},
		{"same key", clusterkey.Ring{k1}, clusterkey.Ring{k1}, ""},
		{"client without a key", clusterkey.Ring{k1}, nil, "the peer requires one and none is configured"},
		{"server without a key", nil, clusterkey.Ring{k1}, "the peer has none configured"},
		{"wrong key", clusterkey.Ring{k1}, clusterkey.Ring{k2}, "the peer accepts none of our keys"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs logBuffer
			scfg := DefaultConfig()
			scfg.ClusterKey = tt.server
			scfg.Logger = logs.logger()
			_, addr := startServer(t, NewTCPTransport(), "127.0.0.1:0", scfg, map[string]HandlerFunc{"echo": echo})
			ccfg := DefaultConfig()
			ccfg.ClusterKey = tt.client
			c := newClient(t, NewTCPTransport(), ccfg)
			got, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", []byte("secret"))
			if tt.want == "" {
				if err != nil || string(got) != "secret" {
					t.Fatalf("got %q, %v", got, err)
				}
				return
			}
			if err == nil {
				t.Fatal("call succeeded")
			}
			if !errors.Is(err, ErrClusterKey) || !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "cluster key") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v; want ErrClusterKey saying %q", err, tt.want)
			}
			if tt.server != nil {
				testutil.WaitFor(t, 5*time.Second, func() bool {
					return strings.Contains(logs.String(), "level=WARN msg=\"rpc: refused connection: cluster key\"")
				}, "the server's warning")
			}
		})
	}
}

// TestClusterKeyRotation: the key files of a rotation — [k1], then [k1,k2]
// everywhere, then [k2,k1], then [k2] — let every two stages that can meet
// during it talk, both ways; [k1] and [k2] share nothing and are refused.
func TestClusterKeyRotation(t *testing.T) {
	k1, k2 := newKey(t), newKey(t)
	stages := []clusterkey.Ring{{k1}, {k1, k2}, {k2, k1}, {k2}}
	for i, srv := range stages {
		scfg := DefaultConfig()
		scfg.ClusterKey = srv
		_, addr := startServer(t, NewTCPTransport(), "127.0.0.1:0", scfg, map[string]HandlerFunc{"echo": echo})
		for j, cli := range stages {
			ccfg := DefaultConfig()
			ccfg.ClusterKey = cli
			c := newClient(t, NewTCPTransport(), ccfg)
			_, err := c.Call(ctxTimeout(t, 5*time.Second), addr, "echo", nil)
			disjoint := (i == 0 && j == 3) || (i == 3 && j == 0)
			switch {
			case disjoint && !errors.Is(err, ErrClusterKey):
				t.Errorf("server at stage %d, client at stage %d: got %v, want ErrClusterKey", i, j, err)
			case !disjoint && err != nil:
				t.Errorf("server at stage %d, client at stage %d: %v", i, j, err)
			}
		}
	}
}

// proxy forwards connections on a new listener to addr, recording what the
// client side sends, and returns the listener's address.
func proxy(t *testing.T, addr string, rec *testutil.SyncBuffer) string {
	l := testutil.Listen(t)
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", addr)
			if err != nil {
				in.Close()
				continue
			}
			go func() { io.Copy(io.MultiWriter(out, rec), in); out.Close() }()
			go func() { io.Copy(in, out); in.Close() }()
		}
	}()
	return l.Addr().String()
}

// TestClusterKeyReplay: a client's proof, recorded on the wire, does not open
// another connection: it covers the server's nonce of the connection it was
// made for.
func TestClusterKeyReplay(t *testing.T) {
	key := clusterkey.Ring{newKey(t)}
	cfg := DefaultConfig()
	cfg.ClusterKey = key
	_, addr := startServer(t, NewTCPTransport(), "127.0.0.1:0", cfg, map[string]HandlerFunc{"echo": echo})
	var rec testutil.SyncBuffer
	c := newClient(t, NewTCPTransport(), cfg)
	if _, err := c.Call(ctxTimeout(t, 5*time.Second), proxy(t, addr, &rec), "echo", nil); err != nil {
		t.Fatal(err)
	}
	recorded := rec.Bytes()[:helloLen+authLen]

	conn := rawConn(t, addr)
	if _, err := conn.Write(recorded); err != nil {
		t.Fatal(err)
	}
	reply := make([]byte, helloLen+1+nonceLen+1+clusterkey.IDSize+1+macLen)
	if _, err := io.ReadFull(conn, reply); err != nil {
		t.Fatal(err)
	}
	if status := reply[helloLen+1+nonceLen+1+clusterkey.IDSize]; status != statusBadKey {
		t.Fatalf("replayed proof: status %d, want %d (refused)", status, statusBadKey)
	}
	expectClosed(t, conn)
}

// TestClusterKeyBeforeFrames: a peer without the key cannot get a single
// frame read: the server closes the connection after the handshake.
func TestClusterKeyBeforeFrames(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ClusterKey = clusterkey.Ring{newKey(t)}
	called := make(chan struct{}, 1)
	_, addr := startServer(t, NewTCPTransport(), "127.0.0.1:0", cfg, map[string]HandlerFunc{"echo": func(_ context.Context, b []byte) ([]byte, error) {
		called <- struct{}{}
		return b, nil
	}})
	conn := rawConn(t, addr)
	if err := clientHandshake(conn, 5*time.Second, nil); !errors.Is(err, ErrClusterKey) {
		t.Fatalf("handshake without a key: %v", err)
	}
	e := envelope{kind: kindRequest, id: 1, method: "echo", timeout: time.Second}
	frame := e.appendTo(beginFrame(nil))
	finishFrame(frame, cfg.MaxFrameSize)
	conn.Write(frame) // may fail: the server closed the conn
	expectClosed(t, conn)
	select {
	case <-called:
		t.Fatal("the handler ran for a peer without the key")
	default:
	}
}

// BenchmarkHandshake: dial, handshake and one call over loopback TCP, with
// and without a cluster key: what the proof adds to a new connection.
func BenchmarkHandshake(b *testing.B) {
	for _, tt := range []struct {
		name string
		keys clusterkey.Ring
	}{{"nokey", nil}, {"key", clusterkey.Ring{newKey(b)}}} {
		b.Run(tt.name, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.ClusterKey = tt.keys
			_, addr := startServer(b, NewTCPTransport(), "127.0.0.1:0", cfg, nil)
			b.ReportAllocs()
			for b.Loop() {
				conn, err := net.Dial("tcp", addr)
				if err != nil {
					b.Fatal(err)
				}
				if err := clientHandshake(conn, 5*time.Second, tt.keys); err != nil {
					b.Fatal(err)
				}
				conn.Close()
			}
		})
	}
}

// BenchmarkProof: the CPU cost of the proof alone, one side's MAC.
func BenchmarkProof(b *testing.B) {
	k := newKey(b)
	tr := transcript(make([]byte, helloLen), make([]byte, helloLen), make([]byte, nonceLen), make([]byte, nonceLen), k.ID())
	for b.Loop() {
		mac(k, 'C', tr)
	}
}
