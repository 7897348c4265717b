package replica

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// cancellingStore counts the pairs whose statistics are read and cancels the
// request at the cancelAt-th.
type cancellingStore struct {
	store.Store
	reads    atomic.Int64
	cancelAt int64
	cancel   context.CancelFunc
}

func (s *cancellingStore) PairStats(ref store.ShardRef, key string) (agg.Partial, bool, error) {
	if s.reads.Add(1) == s.cancelAt {
		s.cancel()
	}
	return s.Store.PairStats(ref, key)
}

// TestCancelledAggregateStopsAtTheReplica: a replica answering an aggregate for
// another node (wire.MethodAggSeries) stops reading once its caller has gone, rather
// than reading every shard asked for nobody.
func TestCancelledAggregateStopsAtTheReplica(t *testing.T) {
	const shards, cancelAt = 4096, 10
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &cancellingStore{Store: store.NewMem(), cancelAt: cancelAt, cancel: cancel}
	q := quanta.Quantum(10)
	l := &Local{store: st, quantum: q, format: quanta.KFI}
	spans := make([]wire.ShardAgg, shards)
	t0 := int64(1_700_000_000)
	for i := range spans {
		start := t0 + int64(i)*int64(q)
		spans[i] = wire.ShardAgg{Key: "s", Start: start, From: q.BeginNanos(start), To: q.EndNanos(start)}
	}
	_, err := l.AggSeries(ctx, &wire.AggSeriesReq{Key: "s", Every: int64(q) * 1e9, Shards: wire.AppendAggSpans(nil, spans)})
	if err == nil {
		t.Fatal("an aggregate whose caller cancelled it answered")
	}
	if n := st.reads.Load(); n > cancelAt+ctxCheckEvery {
		t.Fatalf("the replica read %d of %d shards' statistics after its caller cancelled at the %dth", n, shards, cancelAt)
	}
}
