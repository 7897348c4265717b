package main

import (
	"fmt"
	"math/rand"
	"slices"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/internal/latency"
	"github.com/tsdht/tsdht/internal/pmuplay"
	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/series"
)

func benchReadCommand() *cli.Command {
	return &cli.Command{
		Name:  "read",
		Usage: "Table II: write --points at 60 Hz, then read the latest --spans of history from another node",
		Description: "As the paper measured: one node (node 0, or the first --cluster address) writes --points\n" +
			"measurements of one series at 60 Hz; another node (the last one) reads the latest 10, 80 and\n" +
			"150 s of that history --reads times each, computing shard IDs, fetching every quantum and merging;\n" +
			"the spans' reads take turns, so that their ratios hold while the machine's load drifts.\n" +
			"Each read must return exactly the points written in its range (trimmed, not padded to whole quanta):\n" +
			"the bench fails otherwise. Spans of 1 h and 1 day are added when --points holds them.",
		Flags: append(benchFlags(18, []int{3}),
			&cli.IntFlag{Name: "points", Value: 10000, Usage: "60 Hz points written before the reads"},
			&cli.IntSliceFlag{Name: "spans", Value: cli.NewIntSlice(10, 80, 150), Usage: "seconds of the latest history each read asks for"},
			&cli.IntFlag{Name: "reads", Value: 100, Usage: "timed reads per span (spans of an hour or more: at most 10)"},
			&cli.IntFlag{Name: "batch", Value: 3600, Usage: "points per write request while loading the history"},
			&cli.BoolFlag{Name: "float32", Usage: "write float32 readings, as a C37.118 PMU in floating-point format sends them, instead of full float64 values"},
		),
		Action: runBench(runBenchRead),
	}
}

type readResult struct {
	caseInfo
	Points int `json:"points"` // written
	SpanS  int `json:"span_s"`
	Quanta int `json:"quanta"` // quanta the span touches
	Reads  int `json:"reads"`
	// Returned is the points each read returned: always the points asked for.
	Returned int `json:"points_returned"`
	// Values is what the points' values are: "float64" (full precision, with noise
	// in every bit) or "float32" (readings as a PMU sends them, --float32).
	Values string `json:"values,omitempty"`
	timing
	ColdMs     float64 `json:"cold_ms"`      // the first read of the span
	PointsPerS float64 `json:"points_per_s"` // points returned per second of mean read time
	PaperMs    float64 `json:"paper_ms,omitempty"`
}

func runBenchRead(e *benchEnv, c *cli.Context) error {
	points, reads, batch := c.Int("points"), c.Int("reads"), c.Int("batch")
	if points < 1 || reads < 1 || batch < 1 {
		return fmt.Errorf("need --points, --reads and --batch ≥ 1")
	}
	spans := slices.Clone(c.IntSlice("spans"))
	if !c.IsSet("spans") {
		for _, long := range []int{3600, 86400} {
			if points >= long*60 {
				spans = append(spans, long)
			}
		}
	}
	for _, s := range spans {
		if s < 1 || s*60 > points {
			return fmt.Errorf("--spans %d s: needs 1 ≤ span and --points ≥ %d (60 Hz)", s, s*60)
		}
	}
	reader := "node %d's coordinator, inside this process"
	if e.local == 0 {
		reader = "a thin client of the last --cluster address (%d), which coordinates"
	}
	e.printf("tsdht-bench read: %d points of one series written at 60 Hz by node 0, read back by another node\n", points)
	e.printf("cluster: %s\nreader:  "+reader+"\nmachine: %s\n\n", e.where(), max(e.local, len(e.addrs))-1, machine())
	e.printf("%-6s %3s %7s %6s %9s %6s %9s %9s %9s %9s   %9s\n",
		"format", "rf", "span s", "quanta", "points", "reads", "mean ms", "p50 ms", "p99 ms", "cold ms", "paper ms")
	for _, cs := range e.cases() {
		results, err := e.readCase(cs, points, batch, reads, spans, c.Bool("float32"))
		if err != nil {
			return fmt.Errorf("[%s] %w", cs, err)
		}
		for _, r := range results {
			paper := "—"
			if r.PaperMs > 0 {
				paper = fmt.Sprintf("%.0f", r.PaperMs)
			}
			e.printf("%-6s %3d %7d %6d %9d %6d %9.3f %9.3f %9.3f %9.3f   %9s\n", cs.format, cs.rf, r.SpanS, r.Quanta,
				r.Returned, r.Reads, r.Mean, r.P50, r.P99, r.ColdMs, paper)
			if err := e.emit(r); err != nil {
				return err
			}
		}
	}
	e.printf("\nEvery read returned exactly the points written in its range (the first of each span checked value by value).\n")
	return nil
}

func (e *benchEnv) readCase(cs benchCase, points, batch, reads int, spans []int, float32s bool) ([]*readResult, error) {
	bc, err := e.start(cs)
	if err != nil {
		return nil, err
	}
	defer bc.Close()

	// The history ends a second ago, as a PMU's would.
	key := "bench/read/pmu1/vang"
	if float32s {
		key += "32" // a series of its own: a cluster can hold both
	}
	period := int64(time.Second) / 60
	t0 := time.Now().Add(-time.Second).UnixNano() - int64(points)*period
	p := &pmuplay.PMU{Name: "bench", Rnd: rand.New(rand.NewSource(2))}
	var parts []series.Points
	writer, reader := bc.node(0), bc.node(bc.size()-1)
	e.progress("[%s] writing %d points at 60 Hz in batches of %d…", cs, points, batch)
	t := time.Now()
	for lo := 0; lo < points; lo += batch {
		p.T0 = t0 + int64(lo)*period
		pts := p.Samples(min(batch, points-lo))["vang"]
		if float32s {
			for i, v := range pts.F {
				pts.F[i] = float64(float32(v))
			}
		}
		if _, err := writer.Put(e.ctx, key, pts, tsdb.PutOptions{}); err != nil {
			return nil, fmt.Errorf("write: %w", err)
		}
		parts = append(parts, pts)
	}
	all := series.Concat(parts...)
	e.progress("[%s] wrote %d points in %v", cs, points, time.Since(t).Round(time.Millisecond))
	e.sealHistory(bc)

	q := tsdb.DefaultConfig().DHT.Quantum
	end := all.T[all.Len()-1] + 1
	// The spans' reads take turns (a 10 s read, an 80 s, a 150 s, again…), so that
	// their ratios hold on a machine whose load drifts during the run.
	type spanRun struct {
		span   int
		from   int64
		want   series.Points
		quanta int
		n      int
		lat    []time.Duration
	}
	runs := make([]*spanRun, len(spans))
	rounds := 0
	for k, span := range spans {
		from := end - int64(span)*int64(time.Second)
		starts, err := q.Covering(from, end)
		if err != nil {
			return nil, err
		}
		n := reads
		if span >= 3600 {
			n = min(n, 10)
		}
		runs[k] = &spanRun{span: span, from: from, want: all.Trim(from, end), quanta: len(starts), n: n, lat: make([]time.Duration, 0, n)}
		rounds = max(rounds, n)
	}
	e.progress("[%s] %d reads of the latest %v s, taking turns…", cs, reads, spans)
	for i := 0; i < rounds; i++ {
		for _, r := range runs {
			if i >= r.n {
				continue
			}
			t := time.Now()
			res, err := reader.Get(e.ctx, key, r.from, end, tsdb.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("read of %d s: %w", r.span, err)
			}
			r.lat = append(r.lat, time.Since(t))
			if i == 0 {
				err = pmuplay.SamePoints(&r.want, &res.Points) // value by value, once
			} else if res.Points.Len() != r.want.Len() {
				err = fmt.Errorf("got %d points, want %d", res.Points.Len(), r.want.Len())
			}
			if err != nil {
				return nil, fmt.Errorf("read %d of the latest %d s returned the wrong points: %w", i, r.span, err)
			}
		}
	}
	var out []*readResult
	for _, sr := range runs {
		r := &readResult{caseInfo: e.info("read", cs), Points: points, SpanS: sr.span, Quanta: sr.quanta, Reads: sr.n,
			Returned: sr.want.Len(), Values: "float64", timing: summarize(sr.lat), ColdMs: latency.Ms(sr.lat[0])}
		if float32s {
			r.Values = "float32"
		}
		if r.Mean > 0 {
			r.PointsPerS = float64(r.Returned) / (r.Mean / 1e3)
		}
		if s, ok := paperReadS[cs.format][sr.span]; ok {
			r.PaperMs = s * 1e3
		}
		out = append(out, r)
	}
	return out, nil
}
