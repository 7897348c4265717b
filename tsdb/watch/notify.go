package watch

import (
	"context"
	"sync"
	"time"

	"github.com/tsdht/tsdht/tsdb/wire"
)

// senders forward stored points to the nodes that watch them, this one included: one
// bounded queue and one goroutine per node, so that neither a slow or dead node nor
// this node's own subscribers ever slow a write (enqueue does not block) and
// notifications to one node go in order.
type senders struct {
	h    *Hub
	mu   sync.Mutex
	to   map[string]*sender
	done bool
	wg   sync.WaitGroup
}

// sender is the queue to one node. A run that does not fit, or a notification that
// fails, is lost: the numbering skips one, so the node sees the gap (Hub.Notify).
type sender struct {
	addr string
	q    chan wire.WatchRun
	mu   sync.Mutex
	lost bool // a run was lost since the last notification
	stop chan struct{}
}

// maxNotifyRuns and maxNotifyPoints bound one notification.
const (
	maxNotifyRuns   = 512
	maxNotifyPoints = 50_000
)

func (ss *senders) init(h *Hub) {
	ss.h = h
	ss.to = map[string]*sender{}
}

// enqueue queues a run for node addr without blocking.
func (ss *senders) enqueue(addr string, r wire.WatchRun) {
	ss.mu.Lock()
	if ss.done {
		ss.mu.Unlock()
		return
	}
	s := ss.to[addr]
	if s == nil {
		s = &sender{addr: addr, q: make(chan wire.WatchRun, senderQueue), stop: make(chan struct{})}
		ss.to[addr] = s
		ss.wg.Add(1)
		go ss.run(s)
	}
	ss.mu.Unlock()
	select {
	case s.q <- r:
	default:
		s.mu.Lock()
		s.lost = true
		s.mu.Unlock()
	}
}

// run sends s's queue, as much as is waiting in each notification.
func (ss *senders) run(s *sender) {
	defer ss.wg.Done()
	var seq uint64
	for {
		var first wire.WatchRun
		select {
		case <-s.stop:
			return
		case first = <-s.q:
		}
		runs := []wire.WatchRun{first}
		pts := first.Points.Len()
	more:
		for len(runs) < maxNotifyRuns && pts < maxNotifyPoints {
			select {
			case r := <-s.q:
				runs = append(runs, r)
				pts += r.Points.Len()
			default:
				break more
			}
		}
		s.mu.Lock()
		if s.lost {
			seq++ // the gap tells the node
			s.lost = false
		}
		s.mu.Unlock()
		seq++
		req := &wire.WatchNotifyReq{From: ss.h.cfg.Self, Epoch: ss.h.epoch, Seq: seq, Runs: runs}
		if s.addr == ss.h.cfg.Self {
			// This node's own subscribers: the same queue and numbering, without the
			// network, so that the write that stored the points never waits for them.
			ss.h.Notify(req)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := ss.h.cfg.Call(ctx, s.addr, wire.MethodWatchNotify, wire.EncodedWatchNotify(req), nil) // by hand: one a written point
		cancel()
		if err != nil {
			s.mu.Lock()
			s.lost = true
			s.mu.Unlock()
			ss.h.cfg.Log.Debug("watch: notification lost", "node", s.addr, "err", err)
		}
	}
}

// close stops every sender.
func (ss *senders) close() {
	ss.mu.Lock()
	ss.done = true
	for _, s := range ss.to {
		close(s.stop)
	}
	ss.mu.Unlock()
	ss.wg.Wait()
}
