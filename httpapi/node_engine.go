package httpapi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/series"
)

// NodeEngine is the Engine over a running node's coordinator: writes and reads go
// through it exactly as `tsdht put` and `get` do (batched per shard, acknowledged at
// the write quorum; reads complete or failed).
//
// What it lacks for now, and where the replacements plug in:
//   - Series returns ErrNeedsCatalog: the series catalog will answer it.
//   - Aggregate reads the points and aggregates them here (aggregatePoints): the
//     replicas' partial aggregates will replace it.
//   - tags passed to Write are not kept: the catalog will keep them.
type NodeEngine struct {
	node *tsdb.Node

	mu        sync.Mutex
	self      *tsdb.Client // for the repair counters, through the node's own status
	repair    Stats
	repairAt  time.Time
	repairErr error
}

// NewNodeEngine returns the engine over node.
func NewNodeEngine(node *tsdb.Node) *NodeEngine { return &NodeEngine{node: node} }

// Write implements Engine.
func (e *NodeEngine) Write(ctx context.Context, key string, _ map[string]string, pts series.Points) (int, error) {
	return e.node.Coordinator().Put(ctx, key, pts, tsdb.PutOptions{})
}

// Read implements Engine.
func (e *NodeEngine) Read(ctx context.Context, key string, from, to int64) (series.Points, error) {
	res, err := e.node.Coordinator().Get(ctx, key, from, to, tsdb.GetOptions{})
	if err != nil {
		if errorCode(err) == tsdb.CodeUnknownSeries {
			return series.Points{}, fmt.Errorf("%w: %v", ErrUnknownSeries, err)
		}
		return series.Points{}, err
	}
	return res.Points, nil
}

// Aggregate implements Engine by reading the points (the fallback; see NodeEngine).
func (e *NodeEngine) Aggregate(ctx context.Context, key string, from, to int64, every time.Duration) (series.Type, []Window, error) {
	pts, err := e.Read(ctx, key, from, to)
	if err != nil {
		return series.Unknown, nil, err
	}
	if pts.Type == series.String {
		return pts.Type, nil, fmt.Errorf("series %q holds strings: only first and last apply, and only to raw reads", key)
	}
	return pts.Type, aggregatePoints(&pts, from, to, every), nil
}

// Series implements Engine: without the catalog it cannot.
func (e *NodeEngine) Series(context.Context, SeriesQuery) ([]SeriesInfo, error) {
	return nil, ErrNeedsCatalog
}

// Ready implements Engine: the node sees itself alive in the membership.
func (e *NodeEngine) Ready() error {
	self := e.node.DHT().Self().ID
	for _, p := range e.node.DHT().Live() {
		if p.ID == self {
			return nil
		}
	}
	return errors.New("this node has not joined its cluster yet")
}

// Stats implements Engine. The store's counters are read directly; the repair
// counters come from the node's own status RPC, at most every 10 s.
func (e *NodeEngine) Stats(ctx context.Context) (Stats, error) {
	st := e.node.Store().Stats()
	s := Stats{Shards: st.Shards, Series: st.Series, Points: st.Points, DiskBytes: st.DiskBytes,
		Dropped: st.DroppedQuanta, LiveMembers: len(e.node.DHT().Live())}
	e.mu.Lock()
	defer e.mu.Unlock()
	if time.Since(e.repairAt) > 10*time.Second {
		e.repairAt = time.Now()
		e.repairErr = e.fetchRepair(ctx)
	}
	if e.repairErr == nil {
		s.RepairKnown = true
		s.RepairPasses, s.UnderReplicated, s.HintedPoints = e.repair.RepairPasses, e.repair.UnderReplicated, e.repair.HintedPoints
		s.PushedPairs, s.PushedPoints, s.HandedOff, s.ReadRepairs = e.repair.PushedPairs, e.repair.PushedPoints, e.repair.HandedOff, e.repair.ReadRepairs
	}
	return s, nil
}

func (e *NodeEngine) fetchRepair(ctx context.Context) error {
	if e.self == nil {
		cfg := tsdb.DefaultClientConfig()
		cfg.Timeout = 5 * time.Second
		c, err := tsdb.NewClient([]string{e.node.RPCAddr()}, cfg)
		if err != nil {
			return err
		}
		e.self = c
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	nodes, err := e.self.Status(ctx)
	if err != nil {
		return err
	}
	me := e.node.DHT().Self().Key.String()
	for _, n := range nodes {
		if n.NodeID == me {
			r := n.Repair
			e.repair = Stats{RepairPasses: r.Passes, UnderReplicated: r.UnderReplicated, HintedPoints: r.HintedPoints,
				PushedPairs: r.PushedPairs, PushedPoints: r.PushedPoints, HandedOff: r.DroppedPairs, ReadRepairs: r.ReadRepairs}
			return nil
		}
	}
	return errors.New("this node is missing from its own status")
}

// Close releases the engine's own connections (not the node).
func (e *NodeEngine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.self != nil {
		return e.self.Close()
	}
	return nil
}

// errorCode returns the machine-readable code of a tsdb/rpc error, or "".
func errorCode(err error) string {
	var coded interface{ ErrorCode() string }
	if errors.As(err, &coded) {
		return coded.ErrorCode()
	}
	return ""
}
