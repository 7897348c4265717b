package coord

import (
	"context"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/catalog"
)

// What tests of a whole node (package tsdb's, which start real clusters this package's
// own tests cannot) look at inside a coordinator. Nothing else calls these.

// CachedEntryForTest returns the catalog entry c holds of key in its cache.
func (c *Coordinator) CachedEntryForTest(key string) (catalog.Entry, bool) { return c.cat.cached(key) }

// NeedsNewestForTest reports whether a write of key at t would report a newer quantum,
// cur being the series' entry (bounds.go).
func (c *Coordinator) NeedsNewestForTest(key string, cur catalog.Entry, t int64) bool {
	return c.needsNewest(key, cur, t)
}

// NoteWriteForTest keeps the catalog entry and bounds of a write of [first, last] at
// quorum w, as a write's prepare hook does.
func (c *Coordinator) NoteWriteForTest(ctx context.Context, key string, e catalog.Entry, first, last int64, w int) error {
	return c.noteWrite(ctx, key, e, first, last, w)
}

// ReportNewestForTest reports t's quantum as key's newest at quorum w.
func (c *Coordinator) ReportNewestForTest(ctx context.Context, key string, t int64, w int) error {
	return c.reportNewest(ctx, key, t, w)
}

// MergePostingsForTest merges members into a tag's posting list at its rf owners.
func (c *Coordinator) MergePostingsForTest(ctx context.Context, tag catalog.Tag, ms []catalog.Member) error {
	return c.mergePostings(ctx, tag, ms, c.cfg.RF)
}

// SeriesQuantumForTest returns the quantum length of a series as its registry
// replicas state it (0 if they cannot), asking them afresh.
func (c *Coordinator) SeriesQuantumForTest(ctx context.Context, key string) quanta.Quantum {
	c.types.forget(key)
	d, err := c.types.lookup(ctx, key)
	if err != nil {
		return 0
	}
	return d.Q
}
