package coord

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// TestLongReadsOnePageAtATime sends twelve long reads and aggregates at once over
// separate requests, as a flood from many clients would: the node runs at most one
// long-read page at a time, whichever connection it came from, so one core stays free
// for the small requests beside them; every read is served whole or refused
// wire.CodeUnavailable (told to retry, not failed), and a small write beside them is served.
func TestLongReadsOnePageAtATime(t *testing.T) {
	c := oneNode(t, nil)
	q := int64(c.cfg.Quantum) * int64(time.Second)
	to := time.Now().UnixNano() / q * q
	var pts series.Points
	for i := range int64(4) {
		pts.AppendFloat(to-i*ReadPageQuanta*q-q/2, float64(i))
	}
	if _, err := c.Put(context.Background(), "flood", pts, wire.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	c.longPace = newPacer(1, 0) // unpaced: pages back to back, the most overlap there could be
	from := to - 6*ReadPageQuanta*q
	var wg sync.WaitGroup
	var served, refused atomic.Int32
	errs := make(chan error, 12)
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var err error
			if i%2 == 0 {
				var res wire.Result
				if res, err = c.Get(ctx, "flood", from, to, wire.GetOptions{}); err == nil && res.Points.Len() != 4 {
					err = fmt.Errorf("get: %d points, want 4", res.Points.Len())
				}
			} else {
				_, err = c.Aggregate(ctx, "flood", from, to, ReadPageQuanta*q, wire.GetOptions{})
			}
			var re *rpc.RemoteError
			switch {
			case err == nil:
				served.Add(1)
			case errors.As(err, &re) && re.Code == wire.CodeUnavailable:
				refused.Add(1)
			default:
				errs <- err
			}
		}()
	}
	var one series.Points
	one.AppendFloat(to-q/3, 1)
	if _, err := c.Put(context.Background(), "beside", one, wire.PutOptions{}); err != nil {
		t.Fatalf("a write beside the long reads: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if most := c.longPace.most.Load(); most != 1 {
		t.Fatalf("%d long-read pages ran at once, want 1", most)
	}
	if served.Load() == 0 {
		t.Fatalf("none of 12 long reads was served (%d refused)", refused.Load())
	}
	t.Logf("12 long reads: %d served, %d refused; at most %d page at a time", served.Load(), refused.Load(), c.longPace.most.Load())
}
