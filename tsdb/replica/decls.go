package replica

import (
	"context"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// registerDecls serves wire.MethodTypes: many series' declarations in one request.
func registerDecls(srv *rpc.Server, r cluster.Replica) {
	cluster.Handle(srv, wire.MethodTypes, func(ctx context.Context, req *wire.KeysReq) (*wire.TypesResp, error) {
		ds, err := r.SeriesDecls(ctx, req.Keys)
		if err != nil {
			return nil, err
		}
		resp := &wire.TypesResp{Decls: make([]wire.TypeResp, len(ds))}
		for i, d := range ds {
			resp.Decls[i] = *cluster.TypeResp(d.Decl, d.Known)
		}
		return resp, nil
	})
}

// SeriesDecls implements cluster.MetaReplica.
func (l *Local) SeriesDecls(ctx context.Context, keys []string) ([]cluster.KnownDecl, error) {
	if err := wire.CheckTypesReq(&wire.KeysReq{Keys: keys}); err != nil {
		return nil, rpc.Errorf(wire.CodeBadInput, "%v", err)
	}
	out := make([]cluster.KnownDecl, len(keys))
	for i, k := range keys {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		d, ok, _ := l.SeriesDecl(ctx, k)
		out[i] = cluster.KnownDecl{Decl: d, Known: ok}
	}
	return out, nil
}
