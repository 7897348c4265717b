package dht

import (
	"context"
	"sync"
	"time"

	"github.com/tsdht/tsdht/rpc"
)

// MethodLeaving tells a node that the sender leaves the cluster for good (a
// decommission): it hands its data off and then exits. In RoutingKademlia mode,
// where there is no gossip to carry StateLeaving, the receiver drops the sender
// from its table and cached replica sets at once — so that it owns nothing while
// it hands off — and takes it back neither from other nodes' FIND_NODE answers nor
// from the leaver's own requests, until the peer speaks to it again without
// saying it leaves (it rejoined) or goneFor has passed.
const MethodLeaving = "dht.leaving"

// goneFor is how long a node refuses to take back a peer that said it leaves,
// unless the peer itself says otherwise: long enough for the hand-off and for
// every answer that still lists the peer to age out of the others' caches.
const goneFor = 10 * time.Minute

// goneBook holds the peers that said they leave, with when that stops counting.
type goneBook struct {
	mu    sync.Mutex
	until map[string]time.Time // by peer ID
}

// mark records that the peer id leaves.
func (b *goneBook) mark(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.until == nil {
		b.until = make(map[string]time.Time)
	}
	now := time.Now()
	for x, u := range b.until { // keep the map as small as the departures
		if now.After(u) {
			delete(b.until, x)
		}
	}
	b.until[id] = now.Add(goneFor)
}

// has reports whether the peer id said it leaves, within goneFor.
func (b *goneBook) has(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	u, ok := b.until[id]
	if ok && time.Now().After(u) {
		delete(b.until, id)
		return false
	}
	return ok
}

// forget clears the departure of the peer id, which spoke without saying it
// leaves: it rejoined.
func (b *goneBook) forget(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.until, id)
}

// markGone records that the peer id leaves and drops it from the table (with a
// replacement from its bucket's cache) and, through onGone, from whatever the
// layer above caches.
func (r *Router) markGone(id string) {
	if id == r.self.ID {
		return
	}
	r.gone.mark(id)
	r.rests.wake(id) // a leave overrides an earlier stop: it will not be back
	r.DropPeer(id)
	if r.onGone != nil {
		r.onGone(id)
	}
}

// selfWire is this node as it introduces itself in requests and answers: with
// Leaving set once it has begun to leave.
func (r *Router) selfWire() wirePeer {
	w := toWire(r.self)
	w.Leaving = r.leaving.Load()
	return w
}

// handleLeaving answers MethodLeaving: the sender is gone.
func (r *Router) handleLeaving(_ context.Context, b []byte) ([]byte, error) {
	var req stoppingRequest
	if err := rpc.Decode(b, &req); err != nil {
		return nil, err
	}
	from, err := fromWire(req.From)
	if err != nil {
		return nil, rpc.Errorf(rpc.CodeBadRequest, "leaving: sender: %v", err)
	}
	r.markGone(from.ID)
	return rpc.Encode(&struct{}{})
}
