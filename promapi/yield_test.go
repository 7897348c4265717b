package promapi

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql"

	"github.com/tsdht/tsdht/internal/netyield/netyieldtest"
	"github.com/tsdht/tsdht/tsdb/series"
)

// TestEvaluationLetsTheNetworkIn evaluates a range query over 20 series of 6,000
// samples with the upstream engine on one P, and makes a goroutine runnable through
// the network (netyieldtest.Probe) at the evaluation's first yield: it must run within
// two of its yields, not after the whole query, and the evaluation must yield at least
// once per sampleYieldEvery samples it walks.
func TestEvaluationLetsTheNetworkIn(t *testing.T) {
	const nSeries, nSamples = 20, 6000
	m := &memBackend{}
	for s := range nSeries {
		var p series.Points
		for i := int64(0); i < nSamples; i++ {
			p.AppendFloat((1000+i)*sec, float64(i*int64(s+1)))
		}
		m.add(fmt.Sprintf(`yq{s="%d"}`, s), map[string]string{"__name__": "yq", "s": fmt.Sprint(s)}, p)
	}
	eng := promql.NewEngine(promql.EngineOpts{MaxSamples: 10_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	q, err := eng.NewRangeQuery(context.Background(), NewQueryable(m, 10_000, 10_000_000), nil, `sum(rate(yq[1m]))`,
		time.Unix(1060, 0), time.Unix(1000+nSamples, 0), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var yields atomic.Int64
	probe := netyieldtest.NewProbe(t, yields.Load)
	saved := sampleYield
	defer func() { sampleYield = saved }()
	sampleYield = func() {
		// The probe's byte is sent at the first yield, once the series were read: reading
		// them waits for the reads' goroutines, which lets the runtime poll the network.
		if yields.Add(1) == 1 {
			probe.Send(t)
		}
		saved()
	}
	res := q.Exec(context.Background())
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if mat, err := res.Matrix(); err != nil || len(mat) != 1 || len(mat[0].Floats) < nSamples-100 {
		t.Fatalf("the query's answer: %v %v; want one series of about %d steps", res, err, nSamples)
	}
	if got := probe.RanAt(); got < 0 || got > 2 {
		t.Errorf("the reader ran after %d of the evaluation's %d yields (-1: not during it), want within 2", got, yields.Load())
	}
	if got, least := yields.Load(), int64(nSeries*nSamples/sampleYieldEvery-1); got < least {
		t.Errorf("the evaluation yielded %d times over %d samples, want at least %d (one per %d)", got, nSeries*nSamples, least, sampleYieldEvery)
	}
}
