package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Describe returns a series' value type and quantum length as its registry replicas
// record them; a series without a quantum of its own reports the cluster's. An
// unknown series is a remote error with code wire.CodeUnknownSeries.
func (c *Client) Describe(ctx context.Context, key string) (series.Type, quanta.Quantum, error) {
	var resp wire.TypeResp
	if err := c.invoke(ctx, wire.MethodDescribe, &wire.TypeReq{Key: key}, &resp); err != nil {
		var re *rpc.RemoteError
		if errors.As(err, &re) && re.Code == rpc.CodeUnknownMethod {
			return series.Unknown, 0, fmt.Errorf("describe of %q: the node is of a build without %s: upgrade the cluster's nodes first", key, wire.MethodDescribe)
		}
		return series.Unknown, 0, err
	}
	if !resp.Known || resp.Quantum <= 0 {
		return series.Unknown, 0, fmt.Errorf("describe of %q: the node answered no type or quantum (is it an older build?)", key)
	}
	return resp.Type, quanta.Quantum(resp.Quantum), nil
}
