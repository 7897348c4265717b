package client

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Series lists the series carrying every match tag whose keys start with prefix,
// sorted by key, with their catalog entries (type, unit, description, tags, bounds).
func (c *Client) Series(ctx context.Context, match []catalog.Tag, prefix string) ([]catalog.Entry, error) {
	req := &wire.SeriesReq{Prefix: prefix}
	for _, t := range match {
		req.Match = append(req.Match, t.String())
	}
	var resp wire.EntriesMsg
	if err := c.invoke(ctx, wire.MethodSeries, req, &resp); err != nil {
		return nil, err
	}
	return resp.Decode()
}

// Meta changes a series' metadata (see wire.MetaReq) and returns its entry after.
func (c *Client) Meta(ctx context.Context, req wire.MetaReq) (catalog.Entry, error) {
	var resp wire.EntriesMsg
	if err := c.invoke(ctx, wire.MethodMeta, &req, &resp); err != nil {
		return catalog.Entry{}, err
	}
	es, err := resp.Decode()
	if err != nil {
		return catalog.Entry{}, err
	}
	if len(es) != 1 {
		return catalog.Entry{}, fmt.Errorf("meta of %q: the node answered %d entries", req.Key, len(es))
	}
	return es[0], nil
}

// Delete deletes the points of a series with from <= t < to and returns how many
// shards the delete reached.
func (c *Client) Delete(ctx context.Context, key string, from, to int64) (int, error) {
	if from >= to {
		return 0, fmt.Errorf("delete of %q: the range [%d, %d) is empty: from must be before to", key, from, to)
	}
	var resp wire.DelResp
	err := c.invoke(ctx, wire.MethodDelete, &wire.DelReq{Key: key, From: from, To: to}, &resp)
	return resp.Shards, err
}

// DeleteSeries deletes a whole series: its points, its catalog entry and its type, so
// that its key is free for a new series of any type.
func (c *Client) DeleteSeries(ctx context.Context, key string) (int, error) {
	var resp wire.DelResp
	err := c.invoke(ctx, wire.MethodDelete, &wire.DelReq{Key: key, Whole: true}, &resp)
	return resp.Shards, err
}

// GetEntry is Get that also returns the series' catalog entry, read by the node
// together with the points' first window: one round trip for a short read. The entry
// is the zero Entry (empty Key) when the series has none.
func (c *Client) GetEntry(ctx context.Context, key string, from, to int64, opt wire.GetOptions) (wire.Result, catalog.Entry, error) {
	var entry catalog.Entry
	res, err := c.get(ctx, key, from, to, opt, func(b []byte) error {
		if len(b) == 0 {
			return nil // no entry: a series written before the catalog, or an older node
		}
		e, err := catalog.DecodeEntry(b)
		entry = e
		return err
	})
	return res, entry, err
}

// SeriesResult is one series of a multi-series read.
type SeriesResult struct {
	Entry  catalog.Entry
	Result wire.Result
}

// getMatchConcurrency bounds the series a multi-series read has in flight.
const getMatchConcurrency = 8

// GetMatch reads [from, to) of every series Series(match, prefix) lists, several at
// once, and returns them in key order, each with its entry.
func (c *Client) GetMatch(ctx context.Context, match []catalog.Tag, prefix string, from, to int64, opt wire.GetOptions) ([]SeriesResult, error) {
	es, err := c.Series(ctx, match, prefix)
	if err != nil {
		return nil, err
	}
	out := make([]SeriesResult, len(es))
	err = eachSeries(es, func(i int, e catalog.Entry) (err error) {
		out[i].Entry = e
		out[i].Result, err = c.Get(ctx, e.Key, from, to, opt)
		return err
	})
	return out, err
}

// SeriesAgg is one series' aggregate in a multi-series aggregate.
type SeriesAgg struct {
	Entry  catalog.Entry
	Result wire.AggResult
}

// AggMatch aggregates, per window of every, each series the catalog selects by match
// and prefix, several at once, as GetMatch reads them.
func (c *Client) AggMatch(ctx context.Context, match []catalog.Tag, prefix string, from, to, every int64, opt wire.GetOptions) ([]SeriesAgg, error) {
	es, err := c.Series(ctx, match, prefix)
	if err != nil {
		return nil, err
	}
	out := make([]SeriesAgg, len(es))
	err = eachSeries(es, func(i int, e catalog.Entry) error {
		out[i].Entry = e
		r := &out[i].Result
		return c.AggWindows(ctx, e.Key, from, to, every, opt, func(part wire.AggResult) error {
			r.Type = part.Type
			r.Windows = append(r.Windows, part.Windows...)
			r.Partial = r.Partial || part.Partial
			r.Missing += part.Missing
			return nil
		}, nil)
	})
	return out, err
}

// eachSeries calls fn for every entry, getMatchConcurrency at a time, and joins the
// errors, each named by its series.
func eachSeries(es []catalog.Entry, fn func(i int, e catalog.Entry) error) error {
	errs := make([]error, len(es))
	slots := make(chan struct{}, getMatchConcurrency)
	var wg sync.WaitGroup
	for i, e := range es {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			if err := fn(i, e); err != nil {
				errs[i] = fmt.Errorf("%s: %w", e.Key, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
