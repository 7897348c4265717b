package latency

import (
	"testing"
	"time"
)

func TestSummaries(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	if got := Mean(ds); got != 50500*time.Microsecond {
		t.Errorf("Mean = %v, want 50.5ms", got)
	}
	if got := Pct(ds, 50); got != 51*time.Millisecond {
		t.Errorf("Pct 50 = %v, want 51ms", got)
	}
	if got := Pct(ds, 99); got != 100*time.Millisecond {
		t.Errorf("Pct 99 = %v, want 100ms", got)
	}
	if ds[0] != 100*time.Millisecond {
		t.Errorf("Pct sorted its argument: ds[0] = %v", ds[0])
	}
	if Mean(nil) != 0 || Pct(nil, 50) != 0 {
		t.Errorf("summaries of nothing: Mean %v, Pct %v; want 0", Mean(nil), Pct(nil, 50))
	}
	if got := Ms(1500 * time.Microsecond); got != 1.5 {
		t.Errorf("Ms(1.5ms) = %v, want 1.5", got)
	}
}
