package coord

import "context"

// Describe returns a series' type and quantum as its registry replicas record them
// (the cluster's quantum where the series has none of its own), or CodeUnknownSeries.
func (c *Coordinator) Describe(ctx context.Context, key string) (Desc, error) {
	return c.types.lookup(ctx, key)
}
