package rpc

import (
	"context"
	"testing"
	"time"
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
