package store

import (
	"math"
	"testing"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/series"
)

// readAbsentSetup opens a store holding one pair and returns a reader of the pair's
// neighbouring quanta, which it does not hold: what a long read over a sparse range
// asks the store for, quantum after quantum.
func readAbsentSetup(t testing.TB) (p *Pebble, read func(i int) error) {
	p = openTest(t, t.TempDir(), testOptions(SyncNone))
	const key = "absent"
	var pts series.Points
	pts.AppendFloat(testStart*1e9, 1)
	q := int64(quanta.DefaultQuantum)
	if err := p.Append(ShardRef{ID: quanta.ShardID(quanta.QFI, key, testStart), Start: testStart}, key, pts); err != nil {
		t.Fatal(err)
	}
	refs := make([]ShardRef, 64)
	for i := range refs {
		start := testStart + int64(i+1)*q
		refs[i] = ShardRef{ID: quanta.ShardID(quanta.QFI, key, start), Start: start}
	}
	return p, func(i int) error {
		ref := refs[i%len(refs)]
		_, held, err := p.Read(ref, key, math.MinInt64, math.MaxInt64)
		if err == nil && held {
			t.Fatalf("quantum %d: held, want absent", ref.Start)
		}
		return err
	}
}

// TestReadAbsentAllocs bounds what reading a pair the store does not hold allocates:
// a long read over 2²⁰ quanta asks this of every quantum, and what it allocates is
// garbage the collector charges to every request beside it (TestSoakHostile).
func TestReadAbsentAllocs(t *testing.T) {
	_, read := readAbsentSetup(t)
	i := 0
	allocs := testing.AllocsPerRun(200, func() {
		if err := read(i); err != nil {
			t.Fatal(err)
		}
		i++
	})
	t.Logf("%.1f allocations per absent pair read", allocs)
	limit := 2.0 // the iterator's bounds, and pebble's own
	if raceBuild {
		limit++ // pebble's pooled iterator, sometimes dropped by the race detector
	}
	if allocs > limit {
		t.Errorf("%.1f allocations per absent pair read, want at most %.0f (the iterator's bounds, and pebble's own)", allocs, limit)
	}
}

// BenchmarkReadAbsent is TestReadAbsentAllocs' read, timed.
func BenchmarkReadAbsent(b *testing.B) {
	_, read := readAbsentSetup(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := read(i); err != nil {
			b.Fatal(err)
		}
	}
}
