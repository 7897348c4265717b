package tsdb

import (
	"context"
	"fmt"
	"testing"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
)

// BenchmarkSeriesListing lists 10,000 series by one tag and by two tags on an
// 18-node local cluster (rf 3, memory stores, real TCP and gossip): the posting reads,
// their intersection and the 10,000 entries fetched from their registry replicas.
// The catalog is loaded through the replicas' merge methods, in batches.
func BenchmarkSeriesListing(b *testing.B) {
	const nodes, listed, others = 18, 10_000, 2_000
	lc, err := StartLocal(context.Background(), nodes, b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer lc.Close()
	ctx := context.Background()
	c := lc.Nodes[0].Coordinator()
	kind := catalog.Tag{K: "kind", V: "freq"}
	region := catalog.Tag{K: "region", V: "north"}
	postings := map[catalog.Tag][]catalog.Member{}
	byOwner := map[string][]catalog.Entry{}
	owners := map[string]dht.Peer{}
	for i := 0; i < listed+others; i++ {
		key := fmt.Sprintf("pmu%03d/ph%d/mag%d", i/30, i%30, i)
		tags := []catalog.Tag{region}
		if i < listed {
			tags = []catalog.Tag{kind, region}
		}
		e := catalog.Entry{Key: key, Type: series.Float, Created: 1, MetaVersion: 1, Unit: "V", Tags: tags}
		for _, t := range catalog.IndexTags(key, tags) {
			postings[t] = append(postings[t], catalog.Member{Key: key, Version: 1})
		}
		peers, err := lc.Nodes[0].dht.Locate(ctx, quanta.KeyID(key), lc.Nodes[0].cfg.RF)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range peers {
			byOwner[p.ID] = append(byOwner[p.ID], e)
			owners[p.ID] = p
		}
	}
	for id, es := range byOwner {
		for lo := 0; lo < len(es); lo += 1000 {
			if _, err := lc.Nodes[0].replicas.For(owners[id]).MergeEntries(ctx, es[lo:min(lo+1000, len(es))]); err != nil {
				b.Fatal(err)
			}
		}
	}
	for t, ms := range postings {
		if err := c.MergePostingsForTest(ctx, t, ms); err != nil {
			b.Fatal(err)
		}
	}
	for _, q := range []struct {
		name  string
		match []catalog.Tag
	}{{"one_tag", []catalog.Tag{kind}}, {"two_tags", []catalog.Tag{kind, region}}} {
		b.Run(q.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				es, err := lc.Nodes[i%nodes].Coordinator().Series(ctx, catalog.Query{Match: q.match})
				if err != nil {
					b.Fatal(err)
				}
				if len(es) != listed {
					b.Fatalf("listed %d series, want %d", len(es), listed)
				}
			}
			b.ReportMetric(float64(listed)*float64(b.N)/b.Elapsed().Seconds(), "series/s")
		})
	}
}
