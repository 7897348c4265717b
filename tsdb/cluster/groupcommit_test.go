package cluster

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// heldWriter records the requests it is sent and answers each when the test says so.
type heldWriter struct {
	mu   sync.Mutex
	reqs []*wire.WriteReq
	done []func(*wire.WriteResp, error)
	sent chan struct{} // a value per request
}

func (h *heldWriter) WriteAsync(req *wire.WriteReq, _ []byte, done func(*wire.WriteResp, error)) {
	h.mu.Lock()
	h.reqs = append(h.reqs, req)
	h.done = append(h.done, done)
	h.mu.Unlock()
	h.sent <- struct{}{}
}

func (h *heldWriter) answer(t *testing.T, i int, err error) {
	t.Helper()
	h.mu.Lock()
	done, req := h.done[i], h.reqs[i]
	h.mu.Unlock()
	if err != nil {
		done(nil, err)
		return
	}
	done(&wire.WriteResp{Stored: len(req.Shards)}, nil)
}

func (h *heldWriter) await(t *testing.T) {
	t.Helper()
	select {
	case <-h.sent:
	case <-time.After(10 * time.Second):
		t.Fatal("no request sent")
	}
}

func oneShard(key string) *wire.WriteReq {
	return &wire.WriteReq{Shards: []wire.ShardWrite{{Key: key}}}
}

// A lone write goes at once; writes that arrive while it is in flight go together as
// one request when it answers (or after the bounded wait); a group the replica refuses
// goes again write by write, so one bad write does not fail the others.
func TestGroupCommit(t *testing.T) {
	g := NewGroupCommit()
	h := &heldWriter{sent: make(chan struct{}, 100)}
	var mu sync.Mutex
	outcomes := map[string]error{}
	var wg sync.WaitGroup
	write := func(key string) {
		wg.Add(1)
		g.Write("p", h, oneShard(key), nil, 10, func(_ *wire.WriteResp, err error) {
			mu.Lock()
			outcomes[key] = err
			mu.Unlock()
			wg.Done()
		})
	}
	write("first")
	h.await(t)
	for _, k := range []string{"a", "b", "c"} {
		write(k)
	}
	// The bounded wait sends the three as one request, the first still in flight.
	h.await(t)
	h.mu.Lock()
	if n := len(h.reqs[1].Shards); n != 3 {
		t.Fatalf("second request holds %d shards, want the 3 queued writes", n)
	}
	h.mu.Unlock()
	write("d")
	write("e")
	h.answer(t, 0, nil) // the first answers: d and e go at once, together
	h.await(t)
	h.mu.Lock()
	if n := len(h.reqs[2].Shards); n != 2 {
		t.Fatalf("third request holds %d shards, want d and e", n)
	}
	h.mu.Unlock()
	h.answer(t, 1, nil)
	// The replica refuses the group of d and e: each goes alone.
	h.answer(t, 2, rpc.Errorf(wire.CodeTypeMismatch, "e: wrong type"))
	h.await(t)
	h.await(t)
	h.answer(t, 3, nil)
	h.answer(t, 4, rpc.Errorf(wire.CodeTypeMismatch, "e: wrong type"))
	wg.Wait()
	for k, err := range outcomes {
		if (err != nil) != (k == "e") {
			t.Errorf("write %s: %v", k, err)
		}
	}
	if len(outcomes) != 6 {
		t.Errorf("%d outcomes, want 6", len(outcomes))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for peer, q := range g.peers { // an idle queue stays, for the peer's next write
		if q.inflight != 0 || len(q.waiting) != 0 || q.armed {
			t.Errorf("peer %s: %d requests in flight, %d writes waiting, timer armed %v after every write answered", peer, q.inflight, len(q.waiting), q.armed)
		}
	}
}

// A peer's queue stays when it falls idle, for its next write, but no more than
// maxIdleQueues of them do.
func TestGroupCommitIdleQueuesBounded(t *testing.T) {
	g := NewGroupCommit()
	h := &heldWriter{sent: make(chan struct{}, 1)}
	for i := range maxIdleQueues + 50 {
		done := make(chan error, 1)
		g.Write(fmt.Sprint("peer-", i), h, oneShard("k"), nil, 10, func(_ *wire.WriteResp, err error) { done <- err })
		h.await(t)
		h.answer(t, i, nil)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if n := len(g.peers); n == 0 || n > maxIdleQueues+1 {
		t.Errorf("%d idle peer queues kept, want between 1 and %d", n, maxIdleQueues+1)
	}
	if _, ok := g.peers["peer-0"]; !ok {
		t.Error("the first peer's idle queue was dropped while under the bound")
	}
}
