package dht

import (
	"fmt"
	"slices"
	"testing"

	"github.com/tsdht/tsdht/quanta"
)

// A placeCache answers as ClosestPeers over its owners, from the cache the second time,
// and keeps at most two generations of maxPlaceCache sets: a flood of IDs used once (a
// long read) drops its own, while a set in use in between (a writer's) stays cached.
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
	pc = newPlaceCache(owners[:3]) // cheaper sorts for the flood
	hotID := quanta.KeyID("the writer's series")
	hot := pc.closest(hotID, 3)
	for i := range 3 * maxPlaceCache {
		pc.closest(quanta.KeyID(fmt.Sprint("many", i)), 1)
		if i%(maxPlaceCache/2) == 0 {
			if again := pc.closest(hotID, 3); &again[0] != &hot[0] {
				t.Fatalf("after %d sets used once, the set in use was computed again, not kept", i)
			}
		}
	}
	pc.mu.Lock()
	n, prev := len(pc.sets), len(pc.prev)
	pc.mu.Unlock()
	if n > maxPlaceCache || prev > maxPlaceCache {
		t.Fatalf("%d + %d cached sets, more than two generations of %d", n, prev, maxPlaceCache)
	}
}
