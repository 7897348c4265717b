package store

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/tsdht/tsdht/quanta"
)

// ComparePairs orders pairs as their ids order the store's keys: ReadBatch's pass and
// the coordinator's requests rely on it to visit the pairs in the store's order.
func TestComparePairsIsKeyOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	type pair struct {
		ref ShardRef
		key string
	}
	var pairs []pair
	for range 200 {
		key := fmt.Sprintf("m,name=truck_%d f%d", rng.IntN(30), rng.IntN(3))
		if rng.IntN(4) == 0 {
			key += "_longer"
		}
		start := int64(rng.IntN(5))*3600 - 7200 // negative starts too
		pairs = append(pairs, pair{ShardRef{ID: quanta.ShardID(quanta.QFI, key, start), Start: start}, key})
	}
	pairs = append(pairs, pairs[7]) // an equal pair
	for i, a := range pairs {
		for _, b := range pairs[i:] {
			want := bytes.Compare(pairID(a.ref, a.key), pairID(b.ref, b.key))
			if got := ComparePairs(a.ref, a.key, b.ref, b.key); got != want {
				t.Fatalf("ComparePairs(%d %q, %d %q) = %d, the keys compare %d", a.ref.Start, a.key, b.ref.Start, b.key, got, want)
			}
			if got := ComparePairs(b.ref, b.key, a.ref, a.key); got != -want {
				t.Fatalf("ComparePairs(%d %q, %d %q) = %d, the keys compare %d", b.ref.Start, b.key, a.ref.Start, a.key, got, -want)
			}
		}
	}
}
