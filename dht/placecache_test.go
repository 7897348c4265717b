package dht

import (
	"fmt"
	"slices"
	"testing"

	"github.com/tsdht/tsdht/quanta"
)

// A placeCache answers as ClosestPeers over its owners, from the cache the second time,
// and starts afresh when full.
func TestPlaceCache(t *testing.T) {
	owners := testPeers(t, 18, 7)
	pc := newPlaceCache(owners)
	for i := range 50 {
		id := quanta.KeyID(fmt.Sprint("series", i))
		for _, rf := range []int{1, 3, 7} {
			want := ClosestPeers(owners, id, rf)
			got := pc.closest(id, rf)
			if !slices.Equal(got, want) {
				t.Fatalf("closest(%s, %d) = %v, want %v", id, rf, got, want)
			}
			if cap(got) != len(got) {
				t.Fatalf("a cached set has room to append into (cap %d, len %d): callers would share it", cap(got), len(got))
			}
			again := pc.closest(id, rf)
			if &again[0] != &got[0] {
				t.Fatalf("closest(%s, %d) was computed again, not cached", id, rf)
			}
		}
	}
	for i := range maxPlaceCache + 1 {
		pc.closest(quanta.KeyID(fmt.Sprint("many", i)), 3)
	}
	pc.mu.Lock()
	n := len(pc.sets)
	pc.mu.Unlock()
	if n > maxPlaceCache {
		t.Fatalf("%d cached sets, more than the bound %d", n, maxPlaceCache)
	}
}
