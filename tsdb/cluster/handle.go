package cluster

import (
	"context"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Handle registers a typed handler: it decodes the request (rpc.Decode validates every
// declared length first) and encodes the response. Registered with HandleDecoded, a
// request whose first bytes already break Decode's cost bound is refused by rpc before
// the rest of it is read.
func Handle[Req, Resp any](srv *rpc.Server, method string, h func(ctx context.Context, req *Req) (*Resp, error)) {
	srv.HandleDecoded(method, (*Req)(nil), func(ctx context.Context, b []byte) ([]byte, error) {
		var req Req
		if err := rpc.Decode(b, &req); err != nil {
			return nil, rpc.Errorf(wire.CodeBadInput, "%s: %v", method, err)
		}
		resp, err := h(ctx, &req)
		if err != nil {
			return nil, err
		}
		return rpc.Encode(resp)
	})
}
