package dht

import (
	"context"
	"sync"
	"time"

	"github.com/tsdht/tsdht/rpc"
)

// MethodStopping tells a node that the sender stops on purpose and will be back
// with its data (a restart, an upgrade). In RoutingKademlia mode, where there is
// no gossip to carry StateStopped, the receiver keeps the sender in its table and
// in replica sets for its DownGrace: calls to it fail and leave hints, and nothing
// is copied to the next-closest nodes meanwhile.
const MethodStopping = "dht.stopping"

// maxRestLeft bounds the grace a FIND_NODE answer may say a peer has left, so that
// a peer cannot keep another in replica sets for long; the receiver also caps it
// at its own DownGrace.
const maxRestLeft = 24 * time.Hour

// stoppingRequest introduces the node that stops (MethodStopping) or leaves
// (MethodLeaving).
type stoppingRequest struct {
	From wirePeer `msgpack:"from"`
}

// restBook holds the peers that stopped on purpose and are within their grace
// ("resting"), with when their grace ends. A resting peer that fails a call stays
// in the table, in lookup results and in cached replica sets; one heard from again
// is awake.
type restBook struct {
	grace time.Duration // the node's DownGrace: the longest rest recorded

	mu    sync.Mutex
	until map[string]time.Time // by peer ID
	// awake holds when a peer was last heard from directly after a rest: a
	// rest other nodes still report (hearsay, from before) does not put it back
	// to rest for a grace after that.
	awake map[string]time.Time
}

// rest records that the peer id rests for left from now (at most the book's
// grace): told by the peer itself, or, if hearsay, by another node's FIND_NODE
// answer.
func (b *restBook) rest(id string, left time.Duration, hearsay bool) {
	if left <= 0 || b.grace <= 0 {
		return
	}
	left = min(left, b.grace)
	b.mu.Lock()
	defer b.mu.Unlock()
	if hearsay {
		if t, ok := b.awake[id]; ok && time.Since(t) < b.grace {
			return
		}
	} else {
		delete(b.awake, id)
	}
	if b.until == nil {
		b.until = make(map[string]time.Time)
	}
	if u := time.Now().Add(left); u.After(b.until[id]) {
		b.until[id] = u
	}
}

// left returns how long the peer id still rests; 0 if it does not.
func (b *restBook) left(id string) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	u, ok := b.until[id]
	if !ok {
		return 0
	}
	d := time.Until(u)
	if d <= 0 {
		delete(b.until, id)
		return 0
	}
	return d
}

// resting reports whether the peer id rests.
func (b *restBook) resting(id string) bool { return b.left(id) > 0 }

// wake forgets the rest of the peer id, which was heard from.
func (b *restBook) wake(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.until[id]; !ok {
		return
	}
	delete(b.until, id)
	if b.awake == nil {
		b.awake = make(map[string]time.Time)
	}
	now := time.Now()
	for x, t := range b.awake { // keep the map as small as the rests
		if now.Sub(t) >= b.grace {
			delete(b.awake, x)
		}
	}
	b.awake[id] = now
}

// handleStopping answers MethodStopping: the sender rests for the DownGrace and
// stays in the table.
func (r *Router) handleStopping(_ context.Context, b []byte) ([]byte, error) {
	var req stoppingRequest
	if err := rpc.Decode(b, &req); err != nil {
		return nil, err
	}
	from, err := fromWire(req.From)
	if err != nil {
		return nil, rpc.Errorf(rpc.CodeBadRequest, "stopping: sender: %v", err)
	}
	r.AddPeer(from)
	r.rests.rest(from.ID, r.rests.grace, false)
	return rpc.Encode(&struct{}{})
}

// announce tells every peer of the table, alpha at a time and within ctx, what
// method says of this node (MethodStopping, MethodLeaving). It returns how many
// heard it.
func (r *Router) announce(ctx context.Context, method string) int {
	req := &stoppingRequest{From: r.selfWire()}
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		sem   = make(chan struct{}, r.alpha)
		heard int
	)
	for _, p := range r.tablePeers() {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, r.queryTimeout)
			defer cancel()
			if rpc.Invoke(cctx, r.cli, p.RPCAddr, method, req, &struct{}{}) == nil {
				mu.Lock()
				heard++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return heard
}
