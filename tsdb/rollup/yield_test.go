package rollup

import (
	"testing"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// TestReadYields: a home's read of wire.MaxRollupReadWindows windows yields the core
// once per windowYieldEvery of them.
func TestReadYields(t *testing.T) {
	cfg := Config{Retention: []time.Duration{0, 0, 0}}.WithDefaults(quanta.Quantum(10))
	r := NewHomes(cfg, nil, Options{Quantum: quanta.Quantum(10), Store: store.NewMem()})
	min := int64(time.Minute)
	knownOf(t, r, "k", min, 0, min) // adopts k
	yields := 0
	saved := windowYield
	defer func() { windowYield = saved }()
	windowYield = func() { yields++ }
	if _, err := r.Read(&wire.RollupReadReq{Key: "k", Width: min, From: 0, To: wire.MaxRollupReadWindows * min}); err != nil {
		t.Fatal(err)
	}
	if want := wire.MaxRollupReadWindows / windowYieldEvery; yields != want {
		t.Errorf("a read of %d windows yielded %d times, want %d (one per %d)", wire.MaxRollupReadWindows, yields, want, windowYieldEvery)
	}
}
