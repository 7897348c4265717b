package watch

import (
	"slices"
	"testing"
	"time"
)

// TestInterestRenewal: a node's renewal of the same series extends its lease and
// keeps the write path's snapshot (no rebuild of a map of every watched series each
// renewal); a change of its series, or a lease that ran out, makes a new one.
func TestInterestRenewal(t *testing.T) {
	var in interest
	in.init()
	t0 := time.Now()
	in.set("n2", []string{"a", "b"}, t0.Add(time.Second))
	snap := in.snap.Load()
	in.set("n2", []string{"a", "b"}, t0.Add(3*time.Second))
	if in.snap.Load() != snap {
		t.Fatal("a renewal of the same series rebuilt the snapshot")
	}
	in.expire(t0.Add(2 * time.Second))
	if got := in.watchers("a"); !slices.Equal(got, []string{"n2"}) {
		t.Fatalf("after the first lease ran out, a renewed: watchers %v; want [n2]", got)
	}
	in.set("n2", []string{"b", "c"}, t0.Add(3*time.Second))
	if in.snap.Load() == snap || in.watchers("a") != nil || !slices.Equal(in.watchers("c"), []string{"n2"}) {
		t.Fatalf("series changed: watchers of a %v, of c %v; want none and [n2]", in.watchers("a"), in.watchers("c"))
	}
	in.expire(t0.Add(4 * time.Second))
	if in.watchers("b") != nil {
		t.Fatal("a lease not renewed was kept")
	}
	in.set("n2", []string{"b", "c"}, t0.Add(5*time.Second))
	if !slices.Equal(in.watchers("b"), []string{"n2"}) {
		t.Fatal("the series told again after the lease ran out are not watched")
	}
}
