package coord

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/replica"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// listingCounter counts the listings, posting pages and entry reads a replica is asked
// for; with noListing it answers listings as a replica that predates them.
type listingCounter struct {
	*replica.Local
	mu                          sync.Mutex
	noListing                   bool
	listings, postings, entries int
}

func (r *listingCounter) Listing(ctx context.Context, qs []catalog.Query) (wire.Listing, error) {
	r.mu.Lock()
	r.listings++
	no := r.noListing
	r.mu.Unlock()
	if no {
		return wire.Listing{}, rpc.Errorf(rpc.CodeUnknownMethod, "unknown method %s", wire.MethodListing)
	}
	return r.Local.Listing(ctx, qs)
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

// countedCatalog is a 1-node coordinator whose replica counts its catalog reads.
func countedCatalog(t *testing.T) (*Coordinator, *listingCounter) {
	var counter *listingCounter
	c, _ := loadNewSeries(t, "other/", 1, func(l *replica.Local) cluster.Local {
		counter = &listingCounter{Local: l}
		return counter
	})
	return c, counter
}

// putTrucks writes 6 trucks' 3 fields, the trucks of two fleets in turn.
func putTrucks(t *testing.T, c *Coordinator) {
	t.Helper()
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
}

func (r *listingCounter) take() (listings, postings, entries int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	listings, postings, entries = r.listings, r.postings, r.entries
	r.listings, r.postings, r.entries = 0, 0, 0
	return listings, postings, entries
}

// The listings of two fields of one fleet's trucks, as a SELECT of both lists them,
// cost the catalog replica one listing request (wire.MethodListing: its postings and
// entries at once) and no other read; from a replica that predates listings, they read
// the fleet's posting list once and every candidate's entry in one read — one listing's
// calls and a field's list more, not two listings' — and both find what the two
// listings apart find.
func TestSeriesAnySharesPostingsAndEntries(t *testing.T) {
	c, counter := countedCatalog(t)
	putTrucks(t, c)
	qs := []catalog.Query{
		{Prefix: "iot/readings", Match: []catalog.Tag{{K: "__field", V: "latitude"}, {K: "fleet", V: "South"}}},
		{Prefix: "iot/readings", Match: []catalog.Tag{{K: "__field", V: "longitude"}, {K: "fleet", V: "South"}}},
	}
	ctx := context.Background()
	for _, old := range []bool{false, true} {
		counter.mu.Lock()
		counter.noListing = old
		counter.mu.Unlock()
		counter.take()
		var want []string
		for _, q := range qs {
			es, err := c.Series(ctx, q)
			if err != nil || len(es) != 3 {
				t.Fatalf("old replica %v: %v: %d series, %v; want 3", old, q.Match, len(es), err)
			}
			for _, e := range es {
				want = append(want, e.Key)
			}
		}
		slices.Sort(want)
		apartListings, apartPostings, apartEntries := counter.take()
		got, err := c.SeriesAny(ctx, qs)
		if err != nil || len(got) != len(want) {
			t.Fatalf("old replica %v: SeriesAny: %d series, %v; want %d", old, len(got), err, len(want))
		}
		for i, e := range got {
			if e.Key != want[i] {
				t.Fatalf("old replica %v: SeriesAny listed %q at %d, want %q (the listings apart, sorted)", old, e.Key, i, want[i])
			}
			if e.Tags[0].V != "latitude" && e.Tags[0].V != "longitude" || !catalog.Matches(e.Tags, []catalog.Tag{{K: "fleet", V: "South"}}) {
				t.Errorf("SeriesAny listed %q, tags %v", e.Key, e.Tags)
			}
		}
		listings, postings, entries := counter.take()
		if !old {
			if apartListings != 2 || apartPostings != 0 || apartEntries != 0 {
				t.Errorf("two listings apart: %d listings, %d posting pages, %d entry reads; want 2, 0, 0", apartListings, apartPostings, apartEntries)
			}
			if listings != 1 || postings != 0 || entries != 0 {
				t.Errorf("the listings together: %d listings, %d posting pages, %d entry reads; want 1, 0, 0", listings, postings, entries)
			}
			continue
		}
		if apartPostings != 4 || apartEntries != 2 {
			t.Errorf("two listings apart: %d posting pages, %d entry reads; the test assumes 4 and 2", apartPostings, apartEntries)
		}
		if listings != 1 || postings != 3 || entries != 1 {
			t.Errorf("the listings together: %d listings, %d posting pages (want 3: the fleet's once, each field's) and %d entry reads (want 1)", listings, postings, entries)
		}
	}
}

// SeriesNew finds what a standing selection gained from the posting lists, and the
// entries of the candidates its known func does not know: a prefix selection that
// gained nothing reads no entry at all. A candidate it does not know is checked
// against its entry (a truck of the other fleet is a candidate of the field's list
// and not selected), and it finds what Series finds but for the known keys.
func TestSeriesNewReadsOnlyNewEntries(t *testing.T) {
	c, counter := countedCatalog(t)
	putTrucks(t, c)
	ctx := context.Background()
	for _, q := range []catalog.Query{
		{Prefix: "iot/readings", Match: []catalog.Tag{{K: "__field", V: "latitude"}, {K: "fleet", V: "South"}}},
		{Prefix: "iot/readings,name=truck_1"},
	} {
		es, err := c.Series(ctx, q)
		if err != nil || len(es) != 3 {
			t.Fatalf("%+v: Series found %d, %v; want 3", q, len(es), err)
		}
		all := make([]string, len(es))
		for i, e := range es {
			all[i] = e.Key
		}
		if got, err := c.SeriesNew(ctx, q, nil); err != nil || !slices.Equal(got, all) {
			t.Fatalf("%+v, nil known: SeriesNew = %q, %v; want %q", q, got, err, all)
		}
		for known := 0; known <= len(all); known++ {
			isKnown := func(k string) bool { return slices.Contains(all[:known], k) }
			counter.take()
			got, err := c.SeriesNew(ctx, q, isKnown)
			if err != nil || !slices.Equal(got, all[known:]) && len(got)+len(all[known:]) > 0 {
				t.Fatalf("%+v, %d known: SeriesNew = %q, %v; want %q", q, known, got, err, all[known:])
			}
			listings, postings, entries := counter.take()
			// The latitude list, the shorter, also names the East trucks' latitudes:
			// candidates that are not selected, read each time.
			wantEntries := 1
			if known == len(all) && len(q.Match) == 0 {
				wantEntries = 0
			}
			if listings != 0 || postings == 0 || entries != wantEntries {
				t.Errorf("%+v, %d known: %d listings, %d posting pages, %d entry reads; want 0, some, %d", q, known, listings, postings, entries, wantEntries)
			}
		}
	}
}
