package coord

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/replica"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// declareOrder is a registry replica whose declarations answer only once the write's
// postings have been asked for (or after a long wait), and that records whether an
// entry was merged before the declarations were answered.
type declareOrder struct {
	*replica.Local
	posted       chan struct{}
	postOnce     sync.Once
	mu           sync.Mutex
	declared     bool
	mergedEarly  bool
	waitedPosted bool
}

func (r *declareOrder) DeclareMany(ctx context.Context, keys []string, ds []store.Decl) ([]store.Decl, []error, error) {
	select {
	case <-r.posted:
		r.mu.Lock()
		r.waitedPosted = true
		r.mu.Unlock()
	case <-time.After(2 * time.Second):
	}
	out, errs, err := r.Local.DeclareMany(ctx, keys, ds)
	r.mu.Lock()
	r.declared = true
	r.mu.Unlock()
	return out, errs, err
}

func (r *declareOrder) MergePostingsMany(ctx context.Context, lists []catalog.TagMembers) error {
	r.postOnce.Do(func() { close(r.posted) })
	return r.Local.MergePostingsMany(ctx, lists)
}

func (r *declareOrder) MergeEntries(ctx context.Context, es []catalog.Entry) ([]catalog.Entry, error) {
	r.mu.Lock()
	if !r.declared {
		r.mergedEarly = true
	}
	r.mu.Unlock()
	return r.Local.MergeEntries(ctx, es)
}

// A write of new series fixes their types beside reading and posting them, not before:
// the declarations are still unanswered when the postings are asked for. Their entries
// are merged only once the types are fixed, and a series whose type is refused is not
// made live in the catalog with the refused type.
func TestPutManyDeclaresBesidePostings(t *testing.T) {
	var rep *declareOrder
	c, puts := loadNewSeries(t, "beside/s", 8, func(l *replica.Local) cluster.Local {
		rep = &declareOrder{Local: l, posted: make(chan struct{})}
		return rep
	})
	rep.mu.Lock()
	waited, early := rep.waitedPosted, rep.mergedEarly
	rep.mu.Unlock()
	if !waited {
		t.Error("the declarations of a write's new series were answered before its postings were asked for: they ran before them, not beside")
	}
	if early {
		t.Error("an entry of a new series was merged before its type was fixed")
	}
	for _, p := range puts {
		if e, err := c.Entry(context.Background(), p.Key); err != nil || !e.Live() || e.Type != series.Float {
			t.Fatalf("%s: %+v, %v; want a live float entry", p.Key, e, err)
		}
	}
	// A series of another type than the one fixed first: refused, and its entry keeps
	// the first type.
	key := puts[0].Key
	res := c.PutMany(context.Background(), []SeriesPut{{Key: key, Points: series.Points{Type: series.Int, T: []int64{5e9}, I: []int64{1}}}}, wire.PutOptions{})
	if res[0].Err == nil || res[0].Stored != 0 {
		t.Fatalf("a write of ints to float series %s: stored %d, %v; want it refused", key, res[0].Stored, res[0].Err)
	}
	c.cat.forget(key)
	if e, err := c.Entry(context.Background(), key); err != nil || !e.Live() || e.Type != series.Float {
		t.Fatalf("after a refused write of another type, %s: %+v, %v; want its float entry", key, e, err)
	}
}
