package coord

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/replica"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// listingCounter counts the posting pages and entry reads a replica is asked for.
type listingCounter struct {
	*replica.Local
	mu                sync.Mutex
	postings, entries int
}

func (r *listingCounter) Postings(ctx context.Context, tag catalog.Tag, after string, limit int) ([]catalog.Member, error) {
	r.mu.Lock()
	r.postings++
	r.mu.Unlock()
	return r.Local.Postings(ctx, tag, after, limit)
}

func (r *listingCounter) Entries(ctx context.Context, keys []string) ([]catalog.Entry, error) {
	r.mu.Lock()
	r.entries++
	r.mu.Unlock()
	return r.Local.Entries(ctx, keys)
}

func (r *listingCounter) take() (postings, entries int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	postings, entries = r.postings, r.entries
	r.postings, r.entries = 0, 0
	return postings, entries
}

// The listings of two fields of one fleet's trucks, as a SELECT of both lists them,
// read the fleet's posting list once and every candidate's entry in one read — one
// listing's calls and a field's list more, not two listings' — and find what the two
// listings find.
func TestSeriesAnySharesPostingsAndEntries(t *testing.T) {
	var counter *listingCounter
	c, _ := loadNewSeries(t, "other/", 1, func(l *replica.Local) cluster.Local {
		counter = &listingCounter{Local: l}
		return counter
	})
	var puts []SeriesPut
	for k := range 6 {
		for _, f := range []string{"latitude", "longitude", "velocity"} {
			puts = append(puts, SeriesPut{Key: fmt.Sprintf("iot/readings,name=truck_%d %s", k, f),
				Points: series.Points{Type: series.Float, T: []int64{1e9}, F: []float64{1}},
				Tags:   map[string]string{"fleet": []string{"East", "South"}[k%2], "__field": f}})
		}
	}
	for i, r := range c.PutMany(context.Background(), puts, wire.PutOptions{}) {
		if r.Err != nil || !r.Tagged {
			t.Fatalf("series %d: tagged %v, %v", i, r.Tagged, r.Err)
		}
	}
	qs := []catalog.Query{
		{Prefix: "iot/readings", Match: []catalog.Tag{{K: "__field", V: "latitude"}, {K: "fleet", V: "South"}}},
		{Prefix: "iot/readings", Match: []catalog.Tag{{K: "__field", V: "longitude"}, {K: "fleet", V: "South"}}},
	}
	ctx := context.Background()
	counter.take()
	var want []string
	for _, q := range qs {
		es, err := c.Series(ctx, q)
		if err != nil || len(es) != 3 {
			t.Fatalf("%v: %d series, %v; want 3", q.Match, len(es), err)
		}
		for _, e := range es {
			want = append(want, e.Key)
		}
	}
	apartPostings, apartEntries := counter.take()
	got, err := c.SeriesAny(ctx, qs)
	if err != nil || len(got) != len(want) {
		t.Fatalf("SeriesAny: %d series, %v; want %d", len(got), err, len(want))
	}
	for i, e := range got {
		if i > 0 && got[i-1].Key >= e.Key {
			t.Fatalf("SeriesAny: %q after %q: want sorted, each once", e.Key, got[i-1].Key)
		}
		if e.Tags[0].V != "latitude" && e.Tags[0].V != "longitude" || !catalog.Matches(e.Tags, []catalog.Tag{{K: "fleet", V: "South"}}) {
			t.Errorf("SeriesAny listed %q, tags %v", e.Key, e.Tags)
		}
	}
	postings, entries := counter.take()
	if apartPostings != 4 || apartEntries != 2 {
		t.Errorf("two listings apart: %d posting pages, %d entry reads; the test assumes 4 and 2", apartPostings, apartEntries)
	}
	if postings != 3 || entries != 1 {
		t.Errorf("the listings together: %d posting pages (want 3: the fleet's once, each field's) and %d entry reads (want 1)", postings, entries)
	}
}
