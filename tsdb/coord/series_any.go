package coord

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// SeriesAny lists the entries of the series any of qs selects, sorted by key, each
// once: the union of Series of each query, read together. The queries' candidates
// share their posting reads (a posting page two queries ask for, such as the tag list
// of a fleet two fields of a SELECT are listed by, is read once) and every candidate's
// entry is read in one entries read, so a statement reading several fields of the same
// series costs the round trips of one listing, not one per field.
func (c *Coordinator) SeriesAny(ctx context.Context, qs []catalog.Query) ([]catalog.Entry, error) {
	if len(qs) == 0 {
		return nil, nil
	}
	src := sharedPostings(c.readPostings)
	// The queries' candidates at once: each waits a round trip for its posting pages,
	// which another query's need not wait behind.
	sets := make([][]string, len(qs))
	errs := make([]error, len(qs))
	var wg sync.WaitGroup
	for i, q := range qs {
		wg.Go(func() { sets[i], errs[i] = catalog.Candidates(ctx, src, q) }) // each checked against its entry below
	}
	wg.Wait()
	for _, err := range errs {
		if err == nil {
			continue
		}
		var re *rpc.RemoteError
		if errors.As(err, &re) {
			return nil, err
		}
		return nil, rpc.Errorf(wire.CodeBadInput, "%v", err)
	}
	keys := sets[0]
	if len(sets) > 1 {
		keys = slices.Compact(slices.Sorted(slices.Values(slices.Concat(sets...))))
	}
	entries, err := c.entries(ctx, keys)
	if err != nil {
		return nil, err
	}
	out := entries[:0]
	for _, e := range entries {
		if !e.Live() {
			continue
		}
		for _, q := range qs {
			if strings.HasPrefix(e.Key, q.Prefix) && catalog.Matches(e.Tags, q.Match) {
				out = append(out, e)
				break
			}
		}
	}
	return out, nil
}

// sharedPostings returns src answering each (tag, after, limit) page once: the
// listings of one SeriesAny ask for the same pages of a shared tag's list. Concurrent
// asks of one page wait for the first.
func sharedPostings(src catalog.PostingSource) catalog.PostingSource {
	type page struct {
		once    sync.Once
		members []catalog.Member
		err     error
	}
	type pageKey struct {
		tag   catalog.Tag
		after string
		limit int
	}
	var mu sync.Mutex
	pages := map[pageKey]*page{}
	return func(ctx context.Context, tag catalog.Tag, after string, limit int) ([]catalog.Member, error) {
		k := pageKey{tag, after, limit}
		mu.Lock()
		p := pages[k]
		if p == nil {
			p = &page{}
			pages[k] = p
		}
		mu.Unlock()
		p.once.Do(func() { p.members, p.err = src(ctx, tag, after, limit) })
		return p.members, p.err
	}
}
