package tsdb

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// TestHugeRangeCostsTimeNotMemory sends a raw get over 2^16 quanta (7.6 days of 10 s
// quanta) of a series holding one point, as any client may: the node pages through the
// quanta, so the heap of the whole cluster (three nodes in this process) grows by a
// bounded amount, not by a struct per quantum and replica at once (it grew by 120 MiB
// before), and the answer is that one point.
func TestHugeRangeCostsTimeNotMemory(t *testing.T) {
	// Unpaced: this test is about memory (pacing: TestLongReadPaced).
	n, q, from, to := startHugeRange(t, 1<<16, func(_ int, cfg *Config) { cfg.LongReadShare = 1 })
	var one series.Points
	one.AppendFloat(to-q/2, 42)
	_, err := n.Coordinator().Put(context.Background(), "huge", one, PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cli := rpc.NewClient(rpc.NewTCPTransport(), rpc.Config{})
	defer cli.Close()

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	var resp wire.GetResp
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	err = rpc.Invoke(ctx, cli, n.RPCAddr(), wire.MethodGet, &wire.GetReq{Key: "huge", From: from, To: to, Packed: true}, &resp)
	cancel()
	close(stop)
	<-sampled
	if err != nil {
		t.Fatal(err)
	}
	pts, err := series.DecodePacked(resp.Packed)
	if err != nil || pts.Len() != 1 {
		t.Fatalf("answer: %d points, %v", pts.Len(), err)
	}
	grew := int64(peak.Load()) - int64(before.HeapInuse)
	t.Logf("heap in use grew by at most %.1f MiB during a read of 2^16 quanta", float64(grew)/(1<<20))
	if grew > 48<<20 {
		t.Fatalf("a read of 2^16 quanta grew the heap by %.1f MiB", float64(grew)/(1<<20))
	}
}

// startHugeRange starts a cluster of three nodes (tweak as StartLocal's), closed when the
// test ends, and returns its first node, the quantum length in ns and the range of the
// given number of whole quanta ending where the current quantum starts.
func startHugeRange(t *testing.T, quanta int64, tweak func(int, *Config)) (n *Node, q, from, to int64) {
	t.Helper()
	lc, err := StartLocal(context.Background(), 3, "", tweak)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	n = lc.Nodes[0]
	q = int64(n.cfg.DHT.Quantum) * int64(time.Second)
	to = time.Now().UnixNano() / q * q
	return n, q, to - quanta*q, to
}
