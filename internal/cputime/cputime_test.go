//go:build unix

package cputime

import "testing"

// Work done in the process shows in Process.
func TestProcessGrows(t *testing.T) {
	before := Process()
	x := 0
	for i := range 50_000_000 {
		x += i ^ (x >> 3)
	}
	if after := Process(); after <= before {
		t.Fatalf("CPU time did not grow over a busy loop (%v → %v, %d)", before, after, x)
	}
}
