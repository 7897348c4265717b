package rollup

import (
	"context"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Register serves the home side on srv: the marks and reads coordinators send (Client).
func (r *Homes) Register(srv *rpc.Server) {
	cluster.Handle(srv, wire.MethodRollupMark, func(_ context.Context, req *wire.RollupMarkReq) (*wire.RollupMarkResp, error) {
		return r.Mark(req)
	})
	cluster.Handle(srv, wire.MethodRollupRead, func(_ context.Context, req *wire.RollupReadReq) (*wire.RollupReadResp, error) {
		return r.Read(req)
	})
}
