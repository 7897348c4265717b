package main

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/internal/pmuplay"
	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/series"
)

func benchIngestCommand() *cli.Command {
	return &cli.Command{
		Name:  "ingest",
		Usage: "stream --series concurrent 60 Hz series in batches for --seconds; sustained points/s and batch latency",
		Description: "Every series is a PMU channel sampled at 60 Hz, streamed by its own writer in batches of --batch\n" +
			"points, each batch sent when the previous one is acknowledged, through the coordinators of all\n" +
			"nodes in turn (series i through node i mod N). With --backfill D the series start D in the past and\n" +
			"are played as fast as the cluster takes them, as a device that reconnects replays its history\n" +
			"(and once a series catches up with the clock it goes on live); with --backfill 0 they are live\n" +
			"from the start, offering 60 × --series points/s.",
		Flags: append(benchFlags(3, []int{3}),
			&cli.IntFlag{Name: "series", Value: 64, Usage: "concurrent 60 Hz series, one writer each"},
			&cli.IntFlag{Name: "batch", Value: 600, Usage: "points per write request (600 = 10 s of 60 Hz)"},
			&cli.Float64Flag{Name: "seconds", Value: 10, Usage: "how long to stream, in seconds"},
			&cli.DurationFlag{Name: "backfill", Value: 7 * 24 * time.Hour, Usage: "how far in the past the series start; 0 = live"},
		),
		Action: runBench(runBenchIngest),
	}
}

type ingestResult struct {
	caseInfo
	Series    int     `json:"series"`
	Seconds   float64 `json:"seconds"` // measured: until the last batch in flight was acknowledged
	Batch     int     `json:"batch"`
	BackfillS float64 `json:"backfill_s"`
	Points    int64   `json:"points"`
	Batches   int     `json:"batches"`
	// timing is per batch.
	timing
	PointsPerS float64 `json:"points_per_s"`
	// NodeSkew is, with --local, the most points any node stores over the mean: 1 when
	// the load is spread evenly, nodes/rf when every point lands on the same rf nodes.
	NodeSkew float64 `json:"node_skew,omitempty"`
}

func runBenchIngest(e *benchEnv, c *cli.Context) error {
	m, batch, backfill := c.Int("series"), c.Int("batch"), c.Duration("backfill")
	secs := time.Duration(c.Float64("seconds") * float64(time.Second))
	if m < 1 || batch < 1 || secs <= 0 || backfill < 0 {
		return fmt.Errorf("need --series ≥ 1, --batch ≥ 1, --seconds > 0, --backfill ≥ 0")
	}
	if batch > tsdb.MaxPutBatch {
		return fmt.Errorf("--batch %d: at most %d points per request", batch, tsdb.MaxPutBatch)
	}
	e.printf("tsdht-bench ingest: %d concurrent 60 Hz series in batches of %d points for %v (backfill %v)\n", m, batch, secs, backfill)
	e.printf("cluster: %s\nwriters: one per series, through every node's coordinator in turn\nmachine: %s\n\n", e.where(), machine())
	e.printf("%-6s %3s %12s %10s %8s %14s %9s %9s %9s %9s\n", "format", "rf", "points", "seconds", "batches", "points/s", "mean ms", "p50 ms", "p99 ms", "node skew")
	for _, cs := range e.cases() {
		r, err := e.ingestCase(cs, m, batch, secs, backfill)
		if err != nil {
			return fmt.Errorf("[%s] %w", cs, err)
		}
		e.printf("%-6s %3d %12d %10.2f %8d %14.0f %9.3f %9.3f %9.3f %9.2f\n", cs.format, cs.rf, r.Points, r.Seconds, r.Batches,
			r.PointsPerS, r.Mean, r.P50, r.P99, r.NodeSkew)
		if err := e.emit(r); err != nil {
			return err
		}
	}
	return nil
}

func (e *benchEnv) ingestCase(cs benchCase, m, batch int, secs, backfill time.Duration) (*ingestResult, error) {
	bc, err := e.start(cs)
	if err != nil {
		return nil, err
	}
	defer bc.Close()

	// One template batch of PMU samples at offsets from 0; every batch of every series
	// reuses its values and jitter at its own timestamps, so generating load costs
	// next to nothing beside the cluster.
	tmpl := (&pmuplay.PMU{Name: "bench", Rnd: rand.New(rand.NewSource(3))}).Samples(batch)["vang"]
	period := int64(time.Second) / 60
	begin := time.Now()
	first := begin.Add(-backfill).UnixNano()

	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	var (
		points  atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		failure error
		mu      sync.Mutex
		lat     []time.Duration
	)
	stopAt := begin.Add(secs)
	for w := 0; w < m; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rw := bc.node(w)
			key := fmt.Sprintf("bench/ingest/pmu%05d/vang", w)
			next := first + int64(w)*period/int64(m) // series sample at different phases
			var mine []time.Duration
			defer func() {
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
			for time.Now().Before(stopAt) && ctx.Err() == nil {
				pts := series.Points{Type: tmpl.Type, T: make([]int64, batch), F: make([]float64, batch)}
				for i := range pts.T {
					pts.T[i] = next + tmpl.T[i]
				}
				copy(pts.F, tmpl.F)
				next += int64(batch) * period
				if wait := time.Until(time.Unix(0, pts.T[batch-1])); wait > 0 { // live: not before its time
					select {
					case <-time.After(wait):
					case <-ctx.Done():
						return
					}
				}
				t := time.Now()
				stored, err := rw.Put(ctx, key, pts, tsdb.PutOptions{})
				if err == nil && stored != batch {
					err = fmt.Errorf("stored %d of %d points", stored, batch)
				}
				if err != nil {
					errOnce.Do(func() { failure = fmt.Errorf("series %s: %w", key, err); cancel() })
					return
				}
				mine = append(mine, time.Since(t))
				points.Add(int64(stored))
			}
		}()
	}

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last, lastT := int64(0), begin
	for running := true; running; {
		select {
		case <-done:
			running = false
		case now := <-tick.C:
			p := points.Load()
			e.progress("[%s] %5.1f s  %12d points  %10.0f points/s (last second %10.0f)", cs, now.Sub(begin).Seconds(), p,
				float64(p)/now.Sub(begin).Seconds(), float64(p-last)/now.Sub(lastT).Seconds())
			last, lastT = p, now
		}
	}
	elapsed := time.Since(begin)
	if failure != nil {
		return nil, failure
	}
	r := &ingestResult{caseInfo: e.info("ingest", cs), Series: m, Seconds: elapsed.Seconds(), Batch: batch,
		BackfillS: backfill.Seconds(), Points: points.Load(), Batches: len(lat), timing: summarize(lat)}
	r.PointsPerS = float64(r.Points) / elapsed.Seconds()
	if bc.local != nil {
		var most, sum int64
		for _, n := range bc.local.Nodes {
			p := n.Store().Stats().Points
			most, sum = max(most, p), sum+p
		}
		if sum > 0 {
			r.NodeSkew = float64(most) * float64(len(bc.local.Nodes)) / float64(sum)
		}
	}
	return r, nil
}
