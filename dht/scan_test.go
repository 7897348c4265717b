package dht

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tsdht/tsdht/quanta"
)

// TestClosestIntoIsClosestPeers: the uncached scan gives ClosestPeers' answer, in its
// order, for every rf and membership size tried, whatever dst held before; and it
// allocates nothing once dst is large enough.
func TestClosestIntoIsClosestPeers(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{0, 1, 2, 3, 5, 8, 40, 200} {
		owners := make([]Peer, size)
		for i := range owners {
			owners[i] = Peer{ID: fmt.Sprintf("peer-%d-%d", size, rng.Uint64()), RPCAddr: fmt.Sprint("10.0.0.", i)}
		}
		pc := newPlaceCache(owners)
		dst := make([]Peer, 3, 8)
		for range 200 {
			var id quanta.ID
			for b := range id {
				id[b] = byte(rng.Uint32())
			}
			for rf := 0; rf <= 8; rf++ {
				want := ClosestPeers(owners, id, rf)
				got := pc.closestInto(dst[:0], id, rf)
				if !slices.EqualFunc(got, want, func(a, b Peer) bool { return a.ID == b.ID }) {
					t.Fatalf("%d owners, rf %d, id %x: %v, ClosestPeers %v", size, rf, id, got, want)
				}
			}
		}
		var id quanta.ID
		if n := testing.AllocsPerRun(20, func() { id[0]++; dst = pc.closestInto(dst[:0], id, 3) }); n != 0 {
			t.Fatalf("%d owners: %v allocations per set", size, n)
		}
	}
}
