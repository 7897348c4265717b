package tsdb

import (
	"context"

	"github.com/tsdht/tsdht/tsdb/coord"
)

// storedFunc is told what one write through the node's coordinator stored, per series
// (coord.Coordinator.OnStored without the context).
type storedFunc func(puts []coord.SeriesPut, res []coord.SeriesResult)

// assembleStoredTap registers, before the node serves, the coordinator's write hook
// that SetStoredTap later points at a role started after the node (the uplinks).
func (n *Node) assembleStoredTap() {
	n.coord.OnStored(func(_ context.Context, puts []coord.SeriesPut, res []coord.SeriesResult) {
		if f := n.storedTap.Load(); f != nil && *f != nil {
			(*f)(puts, res)
		}
	})
}

// SetStoredTap has f told, after every write through this node's coordinator, what
// each series stored (nil: nobody), as live subscriptions are: the uplinks
// (uplink.Set.Stored) forward from it what they have caught up with. f must not
// block: the write is acknowledged after it returns. Unlike Coordinator.OnStored it
// may be called while the node serves.
func (n *Node) SetStoredTap(f func(puts []coord.SeriesPut, res []coord.SeriesResult)) {
	sf := storedFunc(f)
	n.storedTap.Store(&sf)
}
