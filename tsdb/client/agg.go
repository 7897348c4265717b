package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// AggTable is a windowed aggregate evaluated: one row per non-empty window, ascending.
type AggTable struct {
	Type    series.Type // the series' value type
	Fns     []agg.Fn
	Rows    []AggRow
	Partial bool // as in wire.Result
	Missing int
}

// AggRow is one window: its start (ns, a multiple of the width) and one value per
// function, in the order asked.
type AggRow struct {
	Start  int64
	Values []agg.Value
}

// aggPart is the span one aggregate request covers at first: about half as many
// windows as one answer may hold, at least 20 minutes and at most 30 days (a node
// refuses ranges of more than quanta.MaxQuantaPerRange quanta).
func aggPart(every int64) int64 {
	const least, most = int64(20 * time.Minute), int64(30 * 24 * time.Hour)
	if every > most/(wire.MaxAggWindows/2) {
		return most
	}
	return min(max(every*(wire.MaxAggWindows/2), least), most)
}

// Agg computes fns over windows of width every (ns) over the points of a series with
// from <= t < to. Windows are aligned to multiples of every since the epoch; only
// windows holding points are returned. A function a series' type lacks (mean of
// strings) is refused.
func (c *Client) Agg(ctx context.Context, key string, from, to, every int64, fns []agg.Fn, opt wire.GetOptions) (AggTable, error) {
	table := AggTable{Fns: fns}
	err := c.AggWindows(ctx, key, from, to, every, opt, func(res wire.AggResult) error {
		for _, fn := range fns {
			if !agg.Supports(fn, res.Type) {
				return fmt.Errorf("series %q holds %s values: %s does not apply (count, first and last do)", key, res.Type, fn)
			}
		}
		table.Type = res.Type
		table.Partial = table.Partial || res.Partial
		table.Missing += res.Missing
		for i := range res.Windows {
			w := &res.Windows[i]
			row := AggRow{Start: w.Start, Values: make([]agg.Value, len(fns))}
			for k, fn := range fns {
				row.Values[k] = w.Eval(fn)
			}
			table.Rows = append(table.Rows, row)
		}
		return nil
	}, nil)
	return table, err
}

// AggWindows streams the partial aggregates of [from, to) at width every to fn, part
// by part in ascending order: a long range is asked for in parts aligned to windows,
// each small enough for one answer (halved when a node says it is too large).
// progress, if not nil, is told after each part how far the parts have come.
func (c *Client) AggWindows(ctx context.Context, key string, from, to, every int64, opt wire.GetOptions,
	fn func(wire.AggResult) error, progress func(done, total int64)) error {
	if from > to {
		return fmt.Errorf("%w (from %d > to %d)", quanta.ErrBadRange, from, to)
	}
	if err := agg.CheckWidth(every); err != nil {
		return err
	}
	// Windows are aligned to the epoch, not to from: a narrower range over the same
	// points gives the same windows.
	cf, ct, err := c.Clamp(ctx, key, from, to)
	if err != nil {
		return err
	}
	from, to = widenToWindows(from, to, cf, ct, every)
	part := aggPart(every)
	// A window cut by a part's end is held back and merged with its rest from the next
	// part: the points of the two parts are disjoint.
	var held *agg.Window
	for lo := from; lo < to; {
		hi := to
		if lo <= math.MaxInt64-part && lo+part < to {
			hi = lo + part
			if end := agg.WindowStart(hi, every); end > lo {
				hi = end // end on a window boundary when the part spans one
			}
		}
		var resp wire.AggregateResp
		req := &wire.AggregateReq{Key: key, From: lo, To: hi, Every: every, ReadQuorum: opt.ReadQuorum, AllowPartial: opt.AllowPartial}
		if err := c.invoke(ctx, wire.MethodAggregate, req, &resp); err != nil {
			var re *rpc.RemoteError
			tooLarge := errors.Is(err, rpc.ErrFrameTooLarge) || (errors.As(err, &re) && re.Code == wire.CodeTooLarge)
			if tooLarge && hi-lo > 1 {
				part = max(1, (hi-lo)/2)
				continue
			}
			return err
		}
		res := wire.AggResult{Type: resp.Type, Partial: resp.Partial, Missing: resp.Missing}
		if len(resp.Packed) > 0 {
			_, ws, err := agg.DecodeWindowsWire(resp.Packed)
			if err != nil {
				return fmt.Errorf("aggregate of %q: %w", key, err)
			}
			res.Windows = ws
		}
		if held != nil {
			if len(res.Windows) > 0 && res.Windows[0].Start == held.Start {
				res.Windows[0].Partial = agg.Merge(held.Partial, res.Windows[0].Partial)
			} else {
				res.Windows = append([]agg.Window{*held}, res.Windows...)
			}
			held = nil
		}
		if n := len(res.Windows); n > 0 && hi < to && agg.WindowStart(hi, every) < hi {
			w := res.Windows[n-1]
			if w.Start == agg.WindowStart(hi-1, every) {
				held, res.Windows = &w, res.Windows[:n-1]
			}
		}
		if err := fn(res); err != nil {
			return err
		}
		if progress != nil {
			progress(hi-from, to-from)
		}
		lo = hi
	}
	return nil
}

// Latest returns the latest point of each series in [since, before): keys without
// a point there are missing from the answer.
func (c *Client) Latest(ctx context.Context, keys []string, since, before int64) (map[string]series.Points, error) {
	out := make(map[string]series.Points, len(keys))
	for _, key := range keys {
		var resp wire.LatestResp
		if err := c.invoke(ctx, wire.MethodLatest, &wire.LatestReq{Key: key, Since: since, Before: before}, &resp); err != nil {
			return out, fmt.Errorf("latest of %q: %w", key, err)
		}
		if resp.Point.Len() > 0 {
			out[key] = resp.Point
		}
	}
	return out, nil
}

// widenToWindows widens [cf, ct), the part of [from, to) that Clamp left, back to the
// bounds of the windows its ends fall in, without leaving [from, to): the points and so
// the answer are the same, and whole windows can come from rollups (rollups answer only
// whole windows: a clamped end would leave its window to the raw shards).
func widenToWindows(from, to, cf, ct, every int64) (int64, int64) {
	if cf >= ct {
		return cf, ct
	}
	if s := agg.WindowStart(cf, every); s > from {
		cf = s
	} else {
		cf = from
	}
	if e := agg.WindowStart(ct-1, every); to >= math.MinInt64+every && e < to-every {
		ct = e + every
	} else {
		ct = to
	}
	return cf, ct
}
