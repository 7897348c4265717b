package cluster

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
	batches := GroupByPeer(func(yield func(dht.Peer, int) bool) {
		for _, w := range work {
			if !yield(w.p, w.i) {
				return
			}
		}
	}, 2, nil)
	got := ""
	for _, bt := range batches {
		got += fmt.Sprintf("%s%v ", bt.Peer.ID, bt.Items)
	}
	if want := "a[0 2] b[1 4] a[3] "; got != want {
		t.Fatalf("batches %q; want %q", got, want)
	}
}

func TestFanOutBoundsConcurrencyAndDeadlines(t *testing.T) {
	var batches []*PeerBatch[int]
	for i := range 12 {
		batches = append(batches, &PeerBatch[int]{Peer: dht.Peer{ID: fmt.Sprint(i)}, Items: []int{i}})
	}
	var running, peak atomic.Int32
	results := FanOut(context.Background(), batches, 3, 50*time.Millisecond, func(ctx context.Context, b *PeerBatch[int]) (int, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		if b.Items[0]%4 == 0 { // a replica that never answers
			<-ctx.Done()
			return 0, ctx.Err()
		}
		if _, ok := ctx.Deadline(); !ok {
			return 0, fmt.Errorf("no per-peer deadline")
		}
		return b.Items[0] * 10, nil
	})
	failed := 0
	for range batches {
		r := <-results
		switch {
		case r.Err == nil && r.Resp != r.Batch.Items[0]*10:
			t.Errorf("batch %d answered %d", r.Batch.Items[0], r.Resp)
		case r.Err != nil && r.Batch.Items[0]%4 != 0:
			t.Errorf("batch %d: %v", r.Batch.Items[0], r.Err)
		case r.Err != nil:
			if !Unanswered(r.Err) {
				t.Errorf("a deadline is not taken as unanswered: %v", r.Err)
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
