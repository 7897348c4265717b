package tsdb

import (
	"context"
	"errors"
	"runtime"
	"strings"
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
	lc, err := StartLocal(context.Background(), 3, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	n := lc.Nodes[0]
	q := int64(n.cfg.DHT.Quantum) * int64(time.Second)
	to := time.Now().UnixNano() / q * q
	from := to - (1<<16)*q
	var one series.Points
	one.AppendFloat(to-q/2, 42)
	if _, err := n.Coordinator().Put(context.Background(), "huge", one, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	n.Coordinator().longPace = newPacer(1, 0) // unpaced: this test is about memory (pacing: TestLongReadPaced)
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

// TestLongReadsTakeTurns: a read of more than a page of quanta waits while another runs
// (maxLongReads), and says so with CodeUnavailable when its deadline passes first; it
// holds nothing for its range meanwhile, and reads of a page or less go on beside it.
// Once the running one ends, the long read is served.
func TestLongReadsTakeTurns(t *testing.T) {
	lc, err := StartLocal(context.Background(), 3, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	n := lc.Nodes[0]
	q := int64(n.cfg.DHT.Quantum) * int64(time.Second)
	to := time.Now().UnixNano() / q * q
	var one series.Points
	one.AppendFloat(to-q/2, 42)
	if _, err := n.Coordinator().Put(context.Background(), "turns", one, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	cli := rpc.NewClient(rpc.NewTCPTransport(), rpc.Config{})
	defer cli.Close()
	get := func(quanta int64, timeout time.Duration) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		var resp wire.GetResp
		err := rpc.Invoke(ctx, cli, n.RPCAddr(), wire.MethodGet, &wire.GetReq{Key: "turns", From: to - quanta*q, To: to}, &resp)
		return resp.Points.Len(), err
	}

	c := n.Coordinator()
	for range maxLongReads { // long reads running
		c.longReads <- struct{}{}
	}
	_, err = get(4*readPageQuanta, 2*time.Second)
	var re *rpc.RemoteError
	if !errors.As(err, &re) || re.Code != CodeUnavailable || !strings.Contains(re.Msg, "shorter range") {
		t.Fatalf("a long read while another runs: %v, want %s saying to ask for a shorter range", err, CodeUnavailable)
	}
	if got, err := get(readPageQuanta, 30*time.Second); err != nil || got != 1 {
		t.Fatalf("a read of a page beside a long one: %d points, %v", got, err)
	}
	// Aggregates take their turn with the long reads.
	actx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	err = rpc.Invoke(actx, cli, n.RPCAddr(), wire.MethodAggregate, &wire.AggregateReq{Key: "turns", From: to - 4*readPageQuanta*q, To: to, Every: q}, &wire.AggregateResp{})
	cancel()
	if !errors.As(err, &re) || re.Code != CodeUnavailable {
		t.Fatalf("a long aggregate while a long read runs: %v, want %s", err, CodeUnavailable)
	}
	for range maxLongReads {
		<-c.longReads
	}
	if got, err := get(4*readPageQuanta, 30*time.Second); err != nil || got != 1 {
		t.Fatalf("a long read on its own: %d points, %v", got, err)
	}
	ares, err := n.Coordinator().Aggregate(context.Background(), "turns", to-4*readPageQuanta*q, to, 4*readPageQuanta*q, GetOptions{})
	if err != nil || len(ares.Windows) != 1 {
		t.Fatalf("a long aggregate on its own, paged: %d windows, %v", len(ares.Windows), err)
	}
}
