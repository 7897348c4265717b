package store

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/netyield/netyieldtest"
	"github.com/tsdht/tsdht/tsdb/series"
)

// TestSealLetsTheNetworkIn seals 200 pairs on one P after making a goroutine runnable
// through the network (netyieldtest.Probe): it must run within two pairs of the seal's
// start, not after the whole seal (sealYield).
func TestSealLetsTheNetworkIn(t *testing.T) {
	p := openTest(t, t.TempDir(), testOptions(SyncNone))
	defer p.Close()
	const pairs = 200
	for i := range pairs {
		var pts series.Points
		for j := range 60 {
			pts.AppendFloat((testStart+int64(j)/6)*1e9+int64(j), float64(i*j))
		}
		if err := p.Append(testRef, fmt.Sprintf("s%d", i), pts); err != nil {
			t.Fatal(err)
		}
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var yields atomic.Int64
	saved := sealYield
	defer func() { sealYield = saved }()
	sealYield = func() {
		yields.Add(1)
		saved()
	}
	probe := netyieldtest.NewProbe(t, yields.Load)
	probe.Send(t)
	n, err := p.SealNow(time.Unix(testStart+3600, 0))
	if err != nil {
		t.Fatal(err)
	}
	if n != pairs {
		t.Fatalf("sealed %d pairs, want %d", n, pairs)
	}
	if got := probe.RanAt(); got < 0 || got > 2 {
		t.Errorf("the reader ran after %d of the seal's %d pairs (-1: not during the seal), want within 2", got, pairs)
	}
}
