package tsdb

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// TestHugeGetHonoursCallerDeadline sends a raw get over 2^20 quanta of a series whose
// points lie at both ends of the range (so no catalog bound shortens it), with a caller
// deadline of 2 s: the answer (an error naming the deadline) must come within the
// deadline and a second, not after the whole range was read (issue #31).
func TestHugeGetHonoursCallerDeadline(t *testing.T) {
	n, q, from, to := startHugeRange(t, 1<<20, nil)
	var ends series.Points
	ends.AppendFloat(from+1, 1)
	ends.AppendFloat(to-1, 2)
	_, err := n.Coordinator().Put(context.Background(), "ends", ends, PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cli := rpc.NewClient(rpc.NewTCPTransport(), rpc.Config{})
	defer cli.Close()
	const deadline = 2 * time.Second
	for _, m := range []struct {
		method string
		req    any
	}{
		{wire.MethodGet, &wire.GetReq{Key: "ends", From: from, To: to, Packed: true}},
		{wire.MethodGet, &wire.GetReq{Key: "ends", From: from, To: to, Packed: true, Parts: true, PackedVersion: series.PackedVersion}},
	} {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		var resp wire.GetResp
		err = rpc.Invoke(ctx, cli, n.RPCAddr(), m.method, m.req, &resp)
		cancel()
		took := time.Since(start)
		t.Logf("%s over 2^20 quanta with a %v deadline: %v after %v", m.method, deadline, err, took.Round(time.Millisecond))
		if err == nil || !strings.Contains(err.Error(), "deadline") {
			t.Errorf("the error does not name the deadline: %v", err)
		}
		if took > deadline+time.Second {
			t.Fatalf("the answer took %v, past the caller's deadline of %v", took, deadline)
		}
		// The node must have stopped reading too, within a second of the deadline.
		for stop := time.Now().Add(time.Second); ; {
			buf := make([]byte, 8<<20)
			stacks := string(buf[:runtime.Stack(buf, true)])
			if !strings.Contains(stacks, "coord.(*Coordinator).GetParts") {
				break
			}
			if time.Now().After(stop) {
				t.Fatalf("a second after the caller's deadline, the node still reads:\n%s", stacks)
			}
			time.Sleep(20 * time.Millisecond)
		}
		// And a new small read is answered at once.
		ctx, cancel = context.WithTimeout(context.Background(), time.Second)
		err = rpc.Invoke(ctx, cli, n.RPCAddr(), wire.MethodGet, &wire.GetReq{Key: "ends", From: to - q, To: to, Packed: true}, &resp)
		cancel()
		if err != nil {
			t.Fatalf("a short read after the long one: %v", err)
		}
	}
}
