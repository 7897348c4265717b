package tsdb

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/repair"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Refill after damage.
//
// A node whose store lost acknowledged writes at start-up (records after a damaged one
// in its write-ahead log: store.Stats.WALBytesDropped) holds less than it
// acknowledged, and cannot tell which pairs: it lost them whole. Its own repair passes
// only compare what it holds. So it asks every live peer for a full repair pass
// (wire.MethodRefill): each peer compares every pair it holds with the pair's owners
// and pushes it to those that lack it, this node among them. Until every live peer has
// answered, the node reports itself Refilling (tsdht status, /metrics); reads meanwhile
// stay complete because a read compares every replica's digest with the points in hand
// and fetches what differs (coord.Coordinator.Get), except with ReadQuorumOnly, which
// may ask this node alone for a shard. A peer that fails or cannot be reached is asked
// again, with pauses growing to refillMaxPause, until the node stops.

// refillMaxPause is the longest wait between two rounds of refill requests.
const refillMaxPause = 30 * time.Second

// refill is a node's refill after damage.
type refill struct {
	on     atomic.Bool
	cancel context.CancelFunc
	done   chan struct{}
}

// startRefill starts the refill when the store lost acknowledged writes at start-up and
// there are other replicas to refill from.
func (n *Node) startRefill() {
	lost := n.store.Stats().WALBytesDropped
	if lost == 0 || n.repair == nil || n.cfg.RF < 2 {
		return
	}
	n.refill.on.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	n.refill.cancel, n.refill.done = cancel, make(chan struct{})
	n.log.Error("this node lost acknowledged writes at start-up (damaged write-ahead log): it reports itself refilling until every live peer has run a repair pass that pushes it what it lacks",
		"lost_bytes", lost)
	go func() {
		defer close(n.refill.done)
		n.runRefill(ctx, lost)
	}()
}

// stopRefill ends the refill, if one runs, and waits for it.
func (n *Node) stopRefill() {
	if n.refill.cancel != nil {
		n.refill.cancel()
		<-n.refill.done
	}
}

func (n *Node) runRefill(ctx context.Context, lost int64) {
	pause := time.Second
	for {
		self := n.dht.Self().ID
		var peers []string
		for _, p := range n.dht.Live() {
			if p.ID != self {
				peers = append(peers, p.RPCAddr)
			}
		}
		if len(peers) > 0 {
			pushed, err := n.askRefill(ctx, peers)
			if err == nil {
				n.refill.on.Store(false)
				n.log.Info("refilled after the write-ahead log loss: every live peer ran a repair pass",
					"peers", len(peers), "pairs_pushed", pushed, "lost_bytes", lost)
				return
			}
			if ctx.Err() != nil {
				return
			}
			n.log.Warn("refill after the write-ahead log loss: not every peer ran its repair pass; asking again", "err", err.Error())
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		pause = min(2*pause, refillMaxPause)
	}
}

// askRefill asks every peer (RPC addresses) for a repair pass, in parallel, and returns
// how many pairs they pushed, or the errors of those that failed.
func (n *Node) askRefill(ctx context.Context, peers []string) (int64, error) {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		pushed int64
		errs   []error
	)
	req := &wire.RefillReq{From: cluster.NodeID(n.dht.Self())}
	for _, addr := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var resp wire.RefillResp
			err := rpc.Invoke(ctx, n.cli, addr, wire.MethodRefill, req, &resp)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", addr, err))
				return
			}
			pushed += resp.PushedPairs
		}()
	}
	wg.Wait()
	return pushed, errors.Join(errs...)
}

// serveRefill runs one repair pass over every pair held for a peer that lost writes:
// by set hashes, without reading every point to verify it (repair.PassCompare).
func (n *Node) serveRefill(ctx context.Context, req *wire.RefillReq) (*wire.RefillResp, error) {
	if n.repair == nil {
		return nil, rpc.Errorf(CodeUnavailable, "this node's store cannot be walked: it cannot repair")
	}
	n.log.Info("a peer lost acknowledged writes: running a full repair pass to refill it", "peer", req.From)
	before := n.repair.Stats().PushedPairs
	if err := n.repair.Pass(ctx, repair.PassCompare); err != nil {
		return nil, rpc.Errorf(CodeUnavailable, "repair pass to refill %s: %v", req.From, err)
	}
	return &wire.RefillResp{PushedPairs: n.repair.Stats().PushedPairs - before}, nil
}
