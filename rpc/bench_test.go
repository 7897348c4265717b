package rpc

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/cputime"
	"github.com/tsdht/tsdht/internal/testutil"
)

// benchCall measures small calls to one peer over tr.
func benchCall(b *testing.B, server, client Transport, addr string, parallel bool) {
	_, bound := startServer(b, server, addr, DefaultConfig(), map[string]HandlerFunc{"echo": echo})
	c := newClient(b, client, DefaultConfig())
	req := make([]byte, 64)
	call := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := c.Call(ctx, bound, "echo", req); err != nil {
			b.Fatal(err)
		}
	}
	call() // dial outside the measurement
	b.ReportAllocs()
	b.ResetTimer()
	if !parallel {
		for b.Loop() {
			call()
		}
		return
	}
	b.SetParallelism(16) // many calls in flight, as a node fanning out reads has
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			call()
		}
	})
}

// BenchmarkCallTCP: sequential 64-byte calls to one peer over loopback TCP,
// the latency of one round trip.
func BenchmarkCallTCP(b *testing.B) {
	benchCall(b, NewTCPTransport(), NewTCPTransport(), "127.0.0.1:0", false)
}

// BenchmarkCallParallel: concurrent calls sharing one TCP connection, the
// throughput of multiplexing.
func BenchmarkCallParallel(b *testing.B) {
	benchCall(b, NewTCPTransport(), NewTCPTransport(), "127.0.0.1:0", true)
}

// BenchmarkCallMem: sequential calls over a MemNetwork, what one simulated
// hop costs.
func BenchmarkCallMem(b *testing.B) {
	n := NewMemNetwork()
	benchCall(b, n.Transport(), n.Transport(), "server", false)
}

func BenchmarkEnvelopeDecode(b *testing.B) {
	frame := envelopes[0].appendTo(nil)
	b.ReportAllocs()
	for b.Loop() {
		var e envelope
		if err := e.decode(frame); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidate(b *testing.B) {
	msg := mustEncode(b, target{Name: "pmu17/bus3/vang", Ints: make([]int64, 1000), Tags: map[string]string{"a": "b"}})
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		if err := Validate(msg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFanOut7: one round of a 16-byte request to seven peers in parallel over
// persistent loopback TCP and their answers — what a single-point write at rf 7 cannot
// beat. bare: plain Go echo servers (a goroutine per connection copying 16 bytes back),
// the client writing to all seven connections and then reading each answer, with no
// framing, no multiplexing and no goroutine per request. go: seven rpc.Client.Go
// calls to rpc echo servers (go-inline: the echo registered with HandleInline). call: seven rpc.Client.Call, each in a goroutine with its
// own context, as a fan-out without Go costs.
func BenchmarkFanOut7(b *testing.B) {
	const peers = 7
	req := make([]byte, 16)
	b.Run("bare", func(b *testing.B) {
		conns := make([]net.Conn, peers)
		for i := range conns {
			ln := testutil.Listen(b)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				buf := make([]byte, len(req))
				for {
					if _, err := io.ReadFull(c, buf); err != nil {
						return
					}
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
			var err error
			if conns[i], err = net.Dial("tcp", ln.Addr().String()); err != nil {
				b.Fatal(err)
			}
			defer conns[i].Close()
		}
		buf := make([]byte, len(req))
		b.ResetTimer()
		defer reportCPU(b, cputime.Process())
		for b.Loop() {
			for _, c := range conns {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
			}
			for _, c := range conns {
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	addrs := make([]string, peers)
	for i := range addrs {
		var s *Server
		s, addrs[i] = startServer(b, NewTCPTransport(), "127.0.0.1:0", DefaultConfig(), map[string]HandlerFunc{"echo": echo})
		s.HandleInline("echo-inline", nil, echo)
	}
	c := newClient(b, NewTCPTransport(), DefaultConfig())
	for _, a := range addrs { // dial outside the measurement
		if _, err := c.Call(context.Background(), a, "echo", req); err != nil {
			b.Fatal(err)
		}
	}
	goRound := func(method string) func(b *testing.B) {
		return func(b *testing.B) {
			done := make(chan error, peers)
			b.ReportAllocs()
			defer reportCPU(b, cputime.Process())
			for b.Loop() {
				for _, a := range addrs {
					c.Go(a, method, req, 5*time.Second, func(_ []byte, err error) { done <- err })
				}
				for range addrs {
					if err := <-done; err != nil {
						b.Fatal(err)
					}
				}
			}
		}
	}
	b.Run("go", goRound("echo"))
	// go-inline: the echo handler registered with HandleInline, as a replica's
	// write is: it runs on the connection's reader, no hand-off to a worker.
	b.Run("go-inline", goRound("echo-inline"))
	b.Run("call", func(b *testing.B) {
		done := make(chan error, peers)
		b.ReportAllocs()
		defer reportCPU(b, cputime.Process())
		for b.Loop() {
			for _, a := range addrs {
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					_, err := c.Call(ctx, a, "echo", req)
					cancel()
					done <- err
				}()
			}
			for range addrs {
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// reportCPU reports the process's CPU time since start per operation (cpu-µs/op):
// client, servers and the kernel's loopback work together, which is what a round
// costs a machine whose cores are all busy.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cputime.Process()-start)/1e3/float64(b.N), "cpu-µs/op")
}
