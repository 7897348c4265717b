package cluster

import (
	"context"
	"errors"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// KnownDecl is what a registry replica holds of one series' declaration: Decl, if
// Known.
type KnownDecl struct {
	store.Decl
	Known bool
}

// KnownDeclOf is the declaration a registry replica's answer states.
func KnownDeclOf(resp *wire.TypeResp) KnownDecl {
	return KnownDecl{Decl: DeclOf(resp), Known: resp.Known}
}

// SeriesDecls implements MetaReplica: one request (wire.MethodTypes), or, to a node
// that does not know that method, a SeriesDecl per key.
func (r remoteReplica) SeriesDecls(ctx context.Context, keys []string) ([]KnownDecl, error) {
	req := &wire.KeysReq{Keys: keys}
	if err := wire.CheckTypesReq(req); err != nil {
		return nil, rpc.Errorf(wire.CodeBadInput, "%v", err)
	}
	var resp wire.TypesResp
	err := r.invoke(ctx, wire.MethodTypes, req, &resp)
	var re *rpc.RemoteError
	switch {
	case err == nil:
		if err := wire.CheckTypesResp(&resp, len(keys)); err != nil {
			return nil, rpc.Errorf(wire.CodeUnavailable, "replica %s: %v", r.peer.RPCAddr, err)
		}
		out := make([]KnownDecl, len(keys))
		for i := range resp.Decls {
			out[i] = KnownDeclOf(&resp.Decls[i])
		}
		return out, nil
	case !errors.As(err, &re) || re.Code != rpc.CodeUnknownMethod:
		return nil, err
	}
	// An older node: ask it series by series.
	out := make([]KnownDecl, len(keys))
	for i, k := range keys {
		d, ok, err := r.SeriesDecl(ctx, k)
		if err != nil {
			return nil, err
		}
		out[i] = KnownDecl{Decl: d, Known: ok}
	}
	return out, nil
}
