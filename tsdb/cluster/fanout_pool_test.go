package cluster

import (
	"bytes"
	"context"
	"runtime"
	"testing"

	"github.com/tsdht/tsdht/dht"
)

// goroutineID is the number runtime.Stack prints for the calling goroutine.
func goroutineID() string {
	var b [64]byte
	s := b[:runtime.Stack(b[:], false)]
	s = bytes.TrimPrefix(s, []byte("goroutine "))
	return string(s[:bytes.IndexByte(s, ' ')])
}

// A FanOut's calls run on pooled goroutines, which keep the stacks a call into the
// store grew: one call after another is served by the same few goroutines, not by a
// new one each time.
func TestFanOutReusesGoroutines(t *testing.T) {
	batches := []*PeerBatch[int]{{Peer: dht.Peer{ID: "a"}, Items: []int{1}}}
	seen := map[string]bool{}
	const calls = 50
	for range calls {
		out := FanOut(context.Background(), batches, 0, 0, func(ctx context.Context, b *PeerBatch[int]) (string, error) {
			return goroutineID(), nil
		})
		r := <-out
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		seen[r.Resp] = true
	}
	// The pool takes a job only once its goroutine is back waiting, so a few goroutines
	// may share the calls; a goroutine per call is what must not happen.
	if len(seen) > calls/5 {
		t.Fatalf("%d calls of FanOut ran on %d goroutines: want them pooled (StoreWorkers), a few at most", calls, len(seen))
	}
}
