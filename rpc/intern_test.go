package rpc

import (
	"context"
	"fmt"
	"testing"
)

// Registered method names are decoded without an allocation; made-up names a peer
// sends are converted and never enter the table.
func TestInternMethod(t *testing.T) {
	srv := NewServer(NewMemNetwork().Transport(), DefaultConfig())
	defer srv.Close()
	srv.Handle("test.intern", func(_ context.Context, b []byte) ([]byte, error) { return b, nil })
	name := []byte("test.intern")
	if got := internMethod(name); got != "test.intern" {
		t.Fatalf("internMethod = %q", got)
	}
	if n := testing.AllocsPerRun(100, func() { internMethod(name) }); n != 0 {
		t.Fatalf("a registered name cost %v allocations, want 0", n)
	}
	before := len(*interned.Load())
	for i := range 2 * maxInterned {
		if got := internMethod(fmt.Appendf(nil, "junk.%d", i)); got != fmt.Sprintf("junk.%d", i) {
			t.Fatalf("internMethod = %q", got)
		}
	}
	if n := len(*interned.Load()); n != before {
		t.Fatalf("made-up names grew the table from %d to %d names", before, n)
	}
}
