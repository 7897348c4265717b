package netyield_test

import (
	"testing"

	"github.com/tsdht/tsdht/internal/netyield"
)

// TestPacerYieldsEveryInterval: a Pacer of 100 units yields once per 100 units spent,
// in steps of any size (a step's units past the interval count toward the next), once
// for a step past several intervals, and a nil one never.
func TestPacerYieldsEveryInterval(t *testing.T) {
	calls := 0
	p := netyield.NewPacer(100, func() { calls++ })
	for range 99 {
		p.Spend(1)
	}
	if calls != 0 {
		t.Fatalf("yielded %d times within the first 99 units, want 0", calls)
	}
	p.Spend(1)
	if calls != 1 {
		t.Fatalf("yielded %d times at 100 units, want 1", calls)
	}
	for range 10 {
		p.Spend(30) // 300 units: yields at 210, 300 and 390 of the whole
	}
	if calls != 4 {
		t.Fatalf("yielded %d times after 400 units in steps of 1 and 30, want 4", calls)
	}
	p.Spend(1000)
	if calls != 5 || p.Yields() != 5 {
		t.Fatalf("a step of 10 intervals: %d calls, Yields %d, want 5 and 5", calls, p.Yields())
	}
	var none *netyield.Pacer
	none.Spend(1 << 30)
	if none.Yields() != 0 {
		t.Fatal("a nil Pacer yielded")
	}
}
