package coord

import "context"

// OnStored registers a write hook that is told, after every write, what each series
// stored (writeHooks.stored): another role of the node (live subscriptions) learns of
// writes through it without the coordinator knowing that role. A hook must not block:
// the write is acknowledged only after it returns. Register before the node serves;
// the hooks are read without a lock.
func (c *Coordinator) OnStored(h func(ctx context.Context, puts []SeriesPut, res []SeriesResult)) {
	c.hooks.stored = append(c.hooks.stored, h)
}
