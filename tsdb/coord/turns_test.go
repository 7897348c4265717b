package coord

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// TestLongReadsTakeTurns: a read of more than a page of quanta waits while another runs
// (MaxLongReads), and says so with wire.CodeUnavailable when its deadline passes first; it
// holds nothing for its range meanwhile, and reads of a page or less go on beside it.
// Once the running one ends, the long read is served.
func TestLongReadsTakeTurns(t *testing.T) {
	c := oneNode(t, nil)
	q := int64(c.cfg.Quantum) * int64(time.Second)
	to := time.Now().UnixNano() / q * q
	var one series.Points
	one.AppendFloat(to-q/2, 42)
	if _, err := c.Put(context.Background(), "turns", one, wire.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	get := func(quanta int64, timeout time.Duration) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		res, err := c.Get(ctx, "turns", to-quanta*q, to, wire.GetOptions{})
		return res.Points.Len(), err
	}

	for range MaxLongReads { // long reads running
		c.longReads <- struct{}{}
	}
	_, err := get(4*ReadPageQuanta, 2*time.Second)
	var re *rpc.RemoteError
	if !errors.As(err, &re) || re.Code != wire.CodeUnavailable || !strings.Contains(re.Msg, "shorter range") {
		t.Fatalf("a long read while another runs: %v, want %s saying to ask for a shorter range", err, wire.CodeUnavailable)
	}
	if got, err := get(ReadPageQuanta, 30*time.Second); err != nil || got != 1 {
		t.Fatalf("a read of a page beside a long one: %d points, %v", got, err)
	}
	// Aggregates take their turn with the long reads.
	actx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err = c.Aggregate(actx, "turns", to-4*ReadPageQuanta*q, to, q, wire.GetOptions{})
	cancel()
	if !errors.As(err, &re) || re.Code != wire.CodeUnavailable {
		t.Fatalf("a long aggregate while a long read runs: %v, want %s", err, wire.CodeUnavailable)
	}
	for range MaxLongReads {
		<-c.longReads
	}
	if got, err := get(4*ReadPageQuanta, 30*time.Second); err != nil || got != 1 {
		t.Fatalf("a long read on its own: %d points, %v", got, err)
	}
	ares, err := c.Aggregate(context.Background(), "turns", to-4*ReadPageQuanta*q, to, 4*ReadPageQuanta*q, wire.GetOptions{})
	if err != nil || len(ares.Windows) != 1 {
		t.Fatalf("a long aggregate on its own, paged: %d windows, %v", len(ares.Windows), err)
	}
}
