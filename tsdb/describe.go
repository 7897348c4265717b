package tsdb

import (
	"context"

	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// registerDescribe registers MethodDescribe: a series' type and quantum, for a thin
// client that must reproduce them elsewhere (tsdb/backup).
func (n *Node) registerDescribe() {
	cluster.Handle(n.srv, wire.MethodDescribe, func(ctx context.Context, req *wire.TypeReq) (*wire.TypeResp, error) {
		d, err := n.coord.Describe(ctx, req.Key)
		if err != nil {
			return nil, err
		}
		return &wire.TypeResp{Known: true, Type: d.Type, Quantum: int64(d.Q)}, nil
	})
}
