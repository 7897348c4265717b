package coord

import (
	"context"
	"fmt"
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

// catalogOrder is a registry replica whose declarations answer only once the write's
// entries have been read (or after a long wait), and that records the catalog requests
// it is asked for, and whether an entry was merged before the declarations were
// answered.
type catalogOrder struct {
	*replica.Local
	read     chan struct{}
	readOnce sync.Once

	mu                              sync.Mutex
	declared, waitedRead, early     bool
	postings, merges, catalogMerges int
}

func (r *catalogOrder) DeclareMany(ctx context.Context, keys []string, ds []store.Decl) ([]store.Decl, []error, error) {
	select {
	case <-r.read:
		r.mu.Lock()
		r.waitedRead = true
		r.mu.Unlock()
	case <-time.After(2 * time.Second):
	}
	out, errs, err := r.Local.DeclareMany(ctx, keys, ds)
	r.mu.Lock()
	r.declared = true
	r.mu.Unlock()
	return out, errs, err
}

func (r *catalogOrder) Entries(ctx context.Context, keys []string) ([]catalog.Entry, error) {
	r.readOnce.Do(func() { close(r.read) })
	return r.Local.Entries(ctx, keys)
}

func (r *catalogOrder) note(counter *int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*counter++
	if !r.declared {
		r.early = true
	}
}

func (r *catalogOrder) MergePostingsMany(ctx context.Context, lists []catalog.TagMembers) error {
	r.mu.Lock()
	r.postings++
	r.mu.Unlock()
	return r.Local.MergePostingsMany(ctx, lists)
}

func (r *catalogOrder) MergeEntries(ctx context.Context, es []catalog.Entry) ([]catalog.Entry, error) {
	r.note(&r.merges)
	return r.Local.MergeEntries(ctx, es)
}

func (r *catalogOrder) MergeCatalog(ctx context.Context, lists []catalog.TagMembers, es []catalog.Entry) ([]catalog.Entry, error) {
	r.note(&r.catalogMerges)
	return r.Local.MergeCatalog(ctx, lists, es)
}

func (r *catalogOrder) take() (waitedRead, early bool, postings, merges, catalogMerges int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	waitedRead, early, postings, merges, catalogMerges = r.waitedRead, r.early, r.postings, r.merges, r.catalogMerges
	r.postings, r.merges, r.catalogMerges, r.early, r.declared = 0, 0, 0, false, false
	return
}

// A write of new series on a node that keeps every posting list and entry (rf 1, its
// store on disk): their types are fixed beside the entry read, not before it; their
// postings and entries go to the replica in one request (stored in one commit), and
// only once the types are fixed; every series is then listed by its tag. A series of
// another type than the one fixed first is refused and its entry keeps its type.
func TestPutManyNewSeriesOneCatalogRequest(t *testing.T) {
	var rep *catalogOrder
	c := diskNode(t, func(l *replica.Local) cluster.Local {
		rep = &catalogOrder{read: make(chan struct{}), Local: l}
		return rep
	})
	const n = 40
	puts := make([]SeriesPut, n)
	for i := range puts {
		puts[i] = SeriesPut{Key: fmt.Sprintf("one/s%02d", i), Points: series.Points{Type: series.Float, T: []int64{1e9}, F: []float64{1}},
			Tags: map[string]string{"truck": fmt.Sprint(i % 4)}}
	}
	for i, r := range c.PutMany(context.Background(), puts, wire.PutOptions{}) {
		if r.Err != nil || r.Stored != 1 || !r.Tagged {
			t.Fatalf("series %d: stored %d, tagged %v, %v", i, r.Stored, r.Tagged, r.Err)
		}
	}
	waited, early, postings, merges, catalogMerges := rep.take()
	if !waited {
		t.Error("the declarations of a write's new series were answered before their entries were read: they ran before the read, not beside it")
	}
	if early {
		t.Error("an entry of a new series was merged before its type was fixed")
	}
	if postings != 0 || merges != 0 || catalogMerges != 1 {
		t.Errorf("%d posting requests, %d entry merges and %d catalog merges for a write of %d new series; want 0, 0 and 1",
			postings, merges, catalogMerges, n)
	}
	got, err := c.Series(context.Background(), catalog.Query{Match: []catalog.Tag{{K: "truck", V: "1"}}})
	if err != nil || len(got) != n/4 {
		t.Fatalf("truck=1 lists %d series (%v), want %d", len(got), err, n/4)
	}
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
