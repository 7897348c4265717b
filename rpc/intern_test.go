package rpc

import (
	"fmt"
	"testing"
)

func TestInternMethod(t *testing.T) {
	name := []byte("tsdb.write")
	if got := internMethod(name); got != "tsdb.write" {
		t.Fatalf("internMethod = %q", got)
	}
	if n := testing.AllocsPerRun(100, func() { internMethod(name) }); n != 0 {
		t.Fatalf("a known name cost %v allocations, want 0", n)
	}
	for i := range 2 * maxInterned { // made-up names: the table stops growing
		if got := internMethod(fmt.Appendf(nil, "junk.%d", i)); got != fmt.Sprintf("junk.%d", i) {
			t.Fatalf("internMethod = %q", got)
		}
	}
	if n := len(*interned.Load()); n > maxInterned {
		t.Fatalf("%d names interned, the bound is %d", n, maxInterned)
	}
	if got := internMethod(name); got != "tsdb.write" {
		t.Fatalf("after the table filled: %q", got)
	}
}
