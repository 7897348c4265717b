package coord

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/store"
)

// groupFetches puts each peer's fetches in its store's key order before cutting them
// into requests (a replica's store pass then steps from pair to pair), and loses or
// repeats none: planned series by series, as a read of many series plans them.
func TestGroupFetchesInStoreOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	peers := []dht.Peer{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	var spans []shardSpan
	var plan []fetch
	for s := range 40 {
		key := fmt.Sprintf("readings,name=truck_%d velocity", s)
		for q := range 5 {
			start := int64(q) * 3600
			i := len(spans)
			spans = append(spans, shardSpan{key: key, ref: store.ShardRef{ID: quanta.ShardID(quanta.QFI, key, start), Start: start, Q: 3600},
				replicas: []dht.Peer{peers[(s+q)%3], peers[(s+q+1)%3]}})
			for j := range 2 {
				plan = append(plan, fetch{shard: i, replica: j, data: j == rng.IntN(2)})
			}
		}
	}
	var b pageBufs
	batches := b.groupFetches(spans, plan, 16)
	seen := make(map[fetch]bool)
	last := make(map[string]*fetch) // each peer's last fetch so far
	for _, pb := range batches {
		if len(pb.Items) == 0 || len(pb.Items) > 16 {
			t.Fatalf("a batch of %d fetches, want 1 to 16", len(pb.Items))
		}
		for k := range pb.Items {
			f := &pb.Items[k]
			if seen[*f] {
				t.Fatalf("fetch %+v twice", *f)
			}
			seen[*f] = true
			if got := spans[f.shard].replicas[f.replica].ID; got != pb.Peer.ID {
				t.Fatalf("fetch of peer %q in a batch to %q", got, pb.Peer.ID)
			}
			if p := last[pb.Peer.ID]; p != nil {
				a, c := &spans[p.shard], &spans[f.shard]
				if store.ComparePairs(a.ref, a.key, c.ref, c.key) > 0 {
					t.Fatalf("peer %q asked for %s at %d after %s at %d: not in its store's order", pb.Peer.ID, c.key, c.ref.Start, a.key, a.ref.Start)
				}
			}
			last[pb.Peer.ID] = f
		}
	}
	if len(seen) != len(plan) {
		t.Fatalf("%d fetches grouped, %d planned", len(seen), len(plan))
	}
}
