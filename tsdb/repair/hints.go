package repair

import (
	"log/slog"
	"sync/atomic"

	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
)

// Hints keeps, in this node's own store, the points of shards a replica did not
// acknowledge, so that repair delivers them once it can reach the owners (the repairer
// finds them as pairs this node holds but does not own, pushes them and hands them off).
// A nil *hints keeps nothing: a node that cannot repair could never deliver them.
type Hints struct {
	store   store.Store
	max     int64  // points held at most; past it a failed write is left to anti-entropy
	deliver func() // asks for a repair pass soon
	log     *slog.Logger
	held    atomic.Int64 // points held for unreachable replicas
}

func NewHints(st store.Store, maxPoints int64, deliver func(), logger *slog.Logger) *Hints {
	return &Hints{store: st, max: maxPoints, deliver: deliver, log: logger}
}

// Record keeps pts of series key in shard ref for a replica that did not acknowledge them.
func (h *Hints) Record(ref store.ShardRef, key string, pts series.Points) {
	if h == nil || h.held.Load() >= h.max {
		return
	}
	if err := h.store.Append(ref, key, pts); err != nil {
		h.log.Warn("keeping a hint failed", "series", key, "quantum", ref.Start, "err", err)
		return
	}
	h.held.Add(int64(pts.Len()))
	h.deliver()
}

// Points returns the points held for unreachable replicas.
func (h *Hints) Points() int64 {
	if h == nil {
		return 0
	}
	return h.held.Load()
}

// recount sets the points held, as a repair pass counted them.
func (h *Hints) recount(n int64) {
	if h != nil {
		h.held.Store(n)
	}
}
