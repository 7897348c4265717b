package tsdb

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsdht/tsdht/dht"
)

func TestGroupByPeerKeepsOrderAndCutsBatches(t *testing.T) {
	a, b := dht.Peer{ID: "a"}, dht.Peer{ID: "b"}
	work := []struct {
		p dht.Peer
		i int
	}{{a, 0}, {b, 1}, {a, 2}, {a, 3}, {b, 4}}
	batches := groupByPeer(func(yield func(dht.Peer, int) bool) {
		for _, w := range work {
			if !yield(w.p, w.i) {
				return
			}
		}
	}, 2, nil)
	got := ""
	for _, bt := range batches {
		got += fmt.Sprintf("%s%v ", bt.peer.ID, bt.items)
	}
	if want := "a[0 2] b[1 4] a[3] "; got != want {
		t.Fatalf("batches %q; want %q", got, want)
	}
}

func TestFanOutBoundsConcurrencyAndDeadlines(t *testing.T) {
	var batches []*peerBatch[int]
	for i := range 12 {
		batches = append(batches, &peerBatch[int]{peer: dht.Peer{ID: fmt.Sprint(i)}, items: []int{i}})
	}
	var running, peak atomic.Int32
	results := fanOut(context.Background(), batches, 3, 50*time.Millisecond, func(ctx context.Context, b *peerBatch[int]) (int, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		if b.items[0]%4 == 0 { // a replica that never answers
			<-ctx.Done()
			return 0, ctx.Err()
		}
		if _, ok := ctx.Deadline(); !ok {
			return 0, fmt.Errorf("no per-peer deadline")
		}
		return b.items[0] * 10, nil
	})
	failed := 0
	for range batches {
		r := <-results
		switch {
		case r.err == nil && r.resp != r.batch.items[0]*10:
			t.Errorf("batch %d answered %d", r.batch.items[0], r.resp)
		case r.err != nil && r.batch.items[0]%4 != 0:
			t.Errorf("batch %d: %v", r.batch.items[0], r.err)
		case r.err != nil:
			if !unanswered(r.err) {
				t.Errorf("a deadline is not taken as unanswered: %v", r.err)
			}
			failed++
		}
	}
	if failed != 3 {
		t.Errorf("%d calls hit their deadline; want 3", failed)
	}
	if p := peak.Load(); p > 3 || p < 1 {
		t.Errorf("%d calls ran at once; the limit is 3", p)
	}
}
