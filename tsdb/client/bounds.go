package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// clampOver is the span past which Get and AggWindows first ask the series' bounds
// (one request) and then cover only the part of the range between them: `--from 0
// --to now` of an hour-long series reads about that hour, not 56 years of windows.
const clampOver = int64(time.Hour)

// Bounds returns bounds of a series' points with from <= t < to: every point there has
// first <= t <= last, last being the latest point's time; found is false when the range
// holds none. first may be earlier than the first point (see wire.BoundsResp).
func (c *Client) Bounds(ctx context.Context, key string, from, to int64) (first, last int64, found bool, err error) {
	if from > to {
		return 0, 0, false, fmt.Errorf("%w (from %d > to %d)", quanta.ErrBadRange, from, to)
	}
	var resp wire.BoundsResp
	if err := c.invoke(ctx, wire.MethodBounds, &wire.BoundsReq{Key: key, From: from, To: to}, &resp); err != nil {
		return 0, 0, false, err
	}
	return resp.First, resp.Last, resp.Found, nil
}

// Clamp narrows [from, to) to the part that can hold points of the series, asking its
// bounds when the range is wider than an hour; an empty part comes back as [from,
// from). A node that does not know the bounds method leaves the range as it is.
func (c *Client) Clamp(ctx context.Context, key string, from, to int64) (int64, int64, error) {
	if span := to - from; span >= 0 && span <= clampOver {
		return from, to, nil
	}
	first, last, found, err := c.Bounds(ctx, key, from, to)
	var re *rpc.RemoteError
	switch {
	case errors.As(err, &re) && re.Code == rpc.CodeUnknownMethod:
		return from, to, nil
	case err != nil:
		return 0, 0, err
	case !found:
		return from, from, nil
	}
	return max(from, first), min(to, last+1), nil
}
