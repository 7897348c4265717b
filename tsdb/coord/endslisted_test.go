package coord

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"testing"

	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// The entries SeriesListed read, each merged from its registry replica's answer (the
// read quorum of this 1-replica cluster), stand in for EndsMany's entry read: the
// newest point of each series is answered as EndsMany answers it with no entry read;
// an entry merged from fewer answers than the read quorum, or another series' entry,
// is read again.
func TestEndsManyListedReadsNoEntry(t *testing.T) {
	c, counter := countedCatalog(t) // series_any_test.go
	var puts []SeriesPut
	for k := range 3 {
		puts = append(puts, SeriesPut{Key: fmt.Sprintf("iot/readings,name=truck_%d latitude", k),
			Points: series.Points{Type: series.Float, T: []int64{1e9, int64(k+2) * 1e9}, F: []float64{1, float64(k)}},
			Tags:   map[string]string{"fleet": "South", "__field": "latitude"}})
	}
	ctx := context.Background()
	for i, r := range c.PutMany(ctx, puts, wire.PutOptions{}) {
		if r.Err != nil || !r.Tagged {
			t.Fatalf("series %d: tagged %v, %v", i, r.Tagged, r.Err)
		}
	}
	listed, err := c.SeriesListed(ctx, []catalog.Query{{Prefix: "iot/readings", Match: []catalog.Tag{{K: "fleet", V: "South"}}}})
	if err != nil || len(listed) != len(puts) {
		t.Fatalf("SeriesListed: %d series, %v; want %d", len(listed), err, len(puts))
	}
	items := make([]SeriesRange, len(listed))
	for i, l := range listed {
		if l.Replicas != 1 {
			t.Errorf("%s: merged from %d replicas' answers, want 1", l.Entry.Key, l.Replicas)
		}
		items[i] = SeriesRange{Key: l.Entry.Key, From: 0, To: math.MaxInt64}
	}
	want, err := c.EndsMany(ctx, items, false, wire.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		if len(w.Windows) != 1 || w.Windows[0].LastT != int64(i+2)*1e9 {
			t.Fatalf("EndsMany of %s: %+v, want its point at %ds", items[i].Key, w, i+2)
		}
	}
	below := append([]Listed(nil), listed...)
	below[0].Replicas = 0
	other := append([]Listed(nil), listed...)
	other[1] = listed[2]
	for _, c2 := range []struct {
		name    string
		listed  []Listed
		entries int
	}{
		{"listed at quorum", listed, 0},
		{"one below quorum", below, 1},
		{"one of another series", other, 1},
		{"none", nil, 1},
	} {
		for _, oldest := range []bool{false, true} {
			counter.take()
			got, err := c.EndsManyListed(ctx, items, c2.listed, oldest, wire.GetOptions{})
			if err != nil {
				t.Fatalf("%s: %v", c2.name, err)
			}
			_, _, entries := counter.take()
			if entries != c2.entries {
				t.Errorf("%s (oldest %v): %d entry reads, want %d", c2.name, oldest, entries, c2.entries)
			}
			ref, err := c.EndsMany(ctx, items, oldest, wire.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, ref) {
				t.Errorf("%s (oldest %v): %+v, EndsMany answers %+v", c2.name, oldest, got, ref)
			}
		}
	}
}
