package cluster

import (
	"errors"
	"sync"
	"time"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Group commit: concurrent writes to the same replica go in one request.
//
// A write to a peer with no write of this coordinator in flight goes at once, so a lone
// writer waits for nothing. A write to a peer that has one in flight queues, and the
// queue goes as one request when the write in flight answers, or after maxGroupWait,
// whichever is first: many writers then cost a replica one frame, one decode and one
// round of store appends per group instead of one per write.
const (
	// maxGroupWait bounds how long a queued write waits for the write in flight to
	// its peer before going anyway.
	maxGroupWait = time.Millisecond
	// maxGroupShards bounds the shards of one grouped request; the request's bytes are
	// bounded by maxRequestBytes as well.
	maxGroupShards = 256
	// maxIdleQueues is how many peers' queues stay when they fall idle: a lone
	// writer's next write to a peer finds its queue instead of allocating one. Past
	// it, idle queues go.
	maxIdleQueues = 1024
)

// GroupCommit queues writes per peer.
type GroupCommit struct {
	mu    sync.Mutex
	peers map[string]*peerQueue
}

func NewGroupCommit() *GroupCommit { return &GroupCommit{peers: map[string]*peerQueue{}} }

// peerQueue is one peer's writes in flight and waiting.
type peerQueue struct {
	inflight int           // grouped requests under way
	waiting  []queuedWrite // to go in the next request
	bytes    int           // the waiting shards' sizes
	// timer sends the waiting ones after maxGroupWait while armed. It is made once
	// per queue and reset, not made per group: a lone writer whose previous write's
	// last replicas are still answering queues behind them on every write, and a
	// timer made each time was two allocations and a timer-heap insertion per peer.
	timer *time.Timer
	armed bool
	w     AsyncWriter // the peer's replica, as the latest write named it: the timer's flush sends through it
}

// queuedWrite is one coordinator's request to the peer, and whom to tell.
type queuedWrite struct {
	req   *wire.WriteReq
	body  []byte // req's encoding, if made already; nil: encoded when sent
	bytes int
	done  func(*wire.WriteResp, error)
}

// Write sends req to the peer (through w, the peer's replica) alone or grouped with
// other writes to it; done receives the outcome: the whole group's response on
// success (callers use only whether it succeeded), the replica's own error for req.
// bytes is req's size (its points' WireSize and overheads); body, if not nil, its
// encoding, sent as it is when req goes alone. done must not block.
func (g *GroupCommit) Write(peer string, w AsyncWriter, req *wire.WriteReq, body []byte, bytes int, done func(*wire.WriteResp, error)) {
	qw := queuedWrite{req: req, body: body, bytes: bytes, done: done}
	g.mu.Lock()
	q := g.peers[peer]
	if q == nil {
		q = &peerQueue{}
		g.peers[peer] = q
	}
	if q.inflight == 0 && len(q.waiting) == 0 {
		q.inflight++
		g.mu.Unlock()
		g.send(peer, w, []queuedWrite{qw})
		return
	}
	if len(q.waiting) > 0 && (q.bytes+bytes > MaxRequestBytes || groupShards(q.waiting)+len(req.Shards) > maxGroupShards) {
		g.flushLocked(peer, w, q) // full: it goes now, and this one starts the next group
	}
	q.waiting = append(q.waiting, qw)
	q.bytes += bytes
	q.w = w
	if !q.armed {
		q.armed = true
		if q.timer == nil {
			q.timer = time.AfterFunc(maxGroupWait, func() {
				g.mu.Lock()
				defer g.mu.Unlock()
				// A firing that a flush overtook finds the queue disarmed, or
				// re-armed for writes that came since: those go a little early.
				if q.armed && len(q.waiting) > 0 {
					g.flushLocked(peer, q.w, q)
				}
			})
		} else {
			q.timer.Reset(maxGroupWait)
		}
	}
	g.mu.Unlock()
}

func groupShards(ws []queuedWrite) int {
	n := 0
	for _, w := range ws {
		n += len(w.req.Shards)
	}
	return n
}

// flushLocked sends the waiting writes of q as one request. g.mu is held; the send
// runs on its own goroutine-free path (asyncWriter) after the lock is released.
func (g *GroupCommit) flushLocked(peer string, w AsyncWriter, q *peerQueue) {
	group := q.waiting
	q.waiting, q.bytes = nil, 0
	if q.armed {
		q.armed = false
		q.timer.Stop()
	}
	q.inflight++
	// Sending under the lock would let done (which may run at once, on an error)
	// re-enter g; a goroutine per group, not per write, is the price.
	go g.send(peer, w, group)
}

// send writes a group as one request and, when it answers, hands each write its
// outcome and sends what queued meanwhile.
func (g *GroupCommit) send(peer string, w AsyncWriter, group []queuedWrite) {
	req, body := group[0].req, group[0].body
	if len(group) > 1 {
		req, body = &wire.WriteReq{Shards: make([]wire.ShardWrite, 0, groupShards(group))}, nil
		for _, qw := range group {
			req.Shards = append(req.Shards, qw.req.Shards...)
		}
	}
	w.WriteAsync(req, body, func(resp *wire.WriteResp, err error) {
		g.mu.Lock()
		q := g.peers[peer]
		q.inflight--
		if len(q.waiting) > 0 {
			g.flushLocked(peer, w, q)
		} else if q.inflight == 0 && len(g.peers) > maxIdleQueues {
			delete(g.peers, peer)
		}
		g.mu.Unlock()
		if len(group) > 1 && refused(err) {
			// The replica refused the group for one write's sake (a type mismatch,
			// say): each goes again alone, so the others are not failed with it.
			for _, qw := range group {
				w.WriteAsync(qw.req, qw.body, qw.done)
			}
			return
		}
		for _, qw := range group {
			qw.done(resp, err)
		}
	})
}

// refused reports whether err is the replica's own answer (an *rpc.RemoteError). A
// function of its own: the target errors.As fills escapes, and declared in the
// callback it cost every write an allocation.
func refused(err error) bool {
	if err == nil {
		return false
	}
	var re *rpc.RemoteError
	return errors.As(err, &re)
}
