package cluster

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"time"

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
	for i := range calls {
		// The goroutine that delivered the last outcome goes back to wait for the next
		// job a moment later; a call made before it is back gets a new goroutine, rightly.
		for deadline := time.Now().Add(5 * time.Second); i > 0 && StoreWorkers.Waiting() == 0; {
			if time.Now().After(deadline) {
				t.Fatalf("after call %d no goroutine of StoreWorkers is waiting for a job", i)
			}
			runtime.Gosched()
		}
		out := FanOut(context.Background(), batches, 0, 0, func(ctx context.Context, b *PeerBatch[int]) (string, error) {
			return goroutineID(), nil
		})
		r := <-out
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		seen[r.Resp] = true
	}
	// A goroutine counted as waiting may not yet be receiving, so a few goroutines may
	// share the calls; a goroutine per call is what must not happen.
	if len(seen) > calls/5 {
		t.Fatalf("%d calls of FanOut ran on %d goroutines: want them pooled (StoreWorkers), a few at most", calls, len(seen))
	}
}
