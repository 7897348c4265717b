package main

import (
	"fmt"
	"math/rand"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb"
)

func benchWriteCommand() *cli.Command {
	return &cli.Command{
		Name:  "write",
		Usage: "Table I: one writer issues --count single-point writes one after another; ms per write beside the network floor",
		Description: "As the paper measured: one node (with --local, node 0's coordinator inside this process; with\n" +
			"--cluster, a thin client of the first address) stores --count single 60 Hz measurements one after\n" +
			"another. In the same run it measures the floor: a bare request/response over persistent TCP to as\n" +
			"many peers as the write has remote replicas (rf−1 when the writer is one of them, else rf), in\n" +
			"parallel, against echo servers with no DHT and no store.",
		Flags: append(benchFlags(18, []int{1, 4, 7}),
			&cli.IntFlag{Name: "count", Value: 10000, Usage: "timed single-point writes per case"},
			&cli.IntFlag{Name: "warmup", Value: 200, Usage: "untimed writes (and floor rounds) first: connections, series type"},
			&cli.IntFlag{Name: "write-quorum", Usage: "replicas that must acknowledge each write (default: the nodes' own, a majority of rf)"},
			&cli.StringFlag{Name: "floor-addrs", Usage: "with --cluster: 'tsdht bench echo' servers (HOST:PORT,…; at least rf) on the nodes' hosts, for the floor; without them the floor is not measured"},
		),
		Action: runBench(runBenchWrite),
	}
}

// FloorLatency is the floor beside a write result, in ms.
type FloorLatency struct {
	Mean  float64 `json:"floor_mean_ms"`
	P50   float64 `json:"floor_p50_ms"`
	P99   float64 `json:"floor_p99_ms"`
	Peers float64 `json:"floor_peers"` // remote peers per round, mean over the writes
	// Ratio is the write's mean over the floor's mean; RatioP50 compares medians.
	Ratio    float64 `json:"x_floor"`
	RatioP50 float64 `json:"x_floor_p50"`
}

type writeResult struct {
	caseInfo
	Count       int `json:"count"`
	WriteQuorum int `json:"write_quorum"`
	latency
	PointsPerS float64 `json:"points_per_s"`
	*FloorLatency
	PaperMs float64 `json:"paper_ms,omitempty"`
}

func runBenchWrite(e *benchEnv, c *cli.Context) error {
	count, warmup, wq := c.Int("count"), c.Int("warmup"), c.Int("write-quorum")
	if count < 1 || warmup < 0 {
		return fmt.Errorf("need --count ≥ 1 and --warmup ≥ 0")
	}
	for _, rf := range e.rfs {
		if wq < 0 || wq > rf {
			return fmt.Errorf("--write-quorum %d: must be 1..rf (%d)", wq, rf)
		}
	}
	floorAddrs := splitAddrs(c.String("floor-addrs"))
	writer := "node 0's coordinator, inside this process (as in the paper: one node issues the writes)"
	if e.local == 0 {
		writer = "a thin client of " + e.addrs[0] + " (which coordinates: one more hop than the paper's writer node)"
	}
	e.printf("tsdht bench write: %d sequential single-point writes per case\n", count)
	e.printf("cluster: %s\nwriter:  %s\nmachine: %s\n", e.where(), writer, machine())
	e.printf("floor:   one bare request/response to the write's remote replicas in parallel (echo servers: no DHT, no store)\n\n")
	e.printf("%-6s %3s %3s %9s %9s %9s   %9s %9s %9s %6s %7s   %9s\n",
		"format", "rf", "w", "mean ms", "p50 ms", "p99 ms", "floor ms", "fl p50", "fl p99", "peers", "×floor", "paper ms")
	for _, cs := range e.cases() {
		r, err := e.writeCase(cs, count, warmup, wq, floorAddrs)
		if err != nil {
			return fmt.Errorf("[%s] %w", cs, err)
		}
		fl := "        —         —         —      —       —"
		if f := r.FloorLatency; f != nil {
			fl = fmt.Sprintf("%9.3f %9.3f %9.3f %6.2f %6.2f×", f.Mean, f.P50, f.P99, f.Peers, f.Ratio)
		}
		paper := "—"
		if r.PaperMs > 0 {
			paper = fmt.Sprintf("%.2f", r.PaperMs)
		}
		e.printf("%-6s %3d %3d %9.3f %9.3f %9.3f   %s   %9s\n", cs.format, cs.rf, r.WriteQuorum, r.latency.Mean, r.latency.P50, r.latency.P99, fl, paper)
		if err := e.emit(r); err != nil {
			return err
		}
	}
	return nil
}

func (e *benchEnv) writeCase(cs benchCase, count, warmup, wq int, floorAddrs []string) (*writeResult, error) {
	bc, err := e.start(cs)
	if err != nil {
		return nil, err
	}
	defer bc.Close()

	// A live PMU's timestamps at 60 Hz from now on, issued faster than real time; moved
	// back if needed so that none is further ahead than a node accepts.
	const key = "bench/write/pmu1/vang"
	n := warmup + count
	period := int64(time.Second) / 60
	t0 := time.Now().UnixNano() - max(0, int64(n)*period-int64(5*time.Minute))
	p := &pmu{name: "bench", rnd: rand.New(rand.NewSource(1)), t0: t0}
	data := p.samples(n)["vang"]

	// The floor's fan-out for each timed write: its remote replicas.
	fanout := make([]int, count)
	var fp *floorProber
	if bc.local != nil {
		self := bc.local.Nodes[0].DHT()
		q := tsdb.DefaultConfig().DHT.Quantum
		byQuantum := map[int64]int{}
		for i := range fanout {
			start := q.Start(data.T[warmup+i])
			k, ok := byQuantum[start]
			if !ok {
				for _, r := range self.ReplicaSet(quanta.ShardID(cs.format, key, start), cs.rf) {
					if r.ID != self.Self().ID {
						k++
					}
				}
				byQuantum[start] = k
			}
			fanout[i] = k
		}
		if fp, err = newLocalFloor(cs.rf, e.timeout); err != nil {
			return nil, err
		}
	} else if len(floorAddrs) > 0 {
		for i := range fanout {
			fanout[i] = cs.rf // a thin client is no replica
		}
		fp = newRemoteFloor(floorAddrs, e.timeout)
	}

	r := &writeResult{caseInfo: e.info("write", cs), Count: count, WriteQuorum: wq, PaperMs: paperWriteMs[cs.format][cs.rf]}
	if wq == 0 {
		r.WriteQuorum = cs.rf/2 + 1 // the nodes' default (with --cluster: unless started otherwise)
	}
	if fp != nil {
		defer fp.Close()
	}

	// Writes and floor rounds alternate in blocks, so that both meet the same
	// background (gossip, compactions, GC) and the ratio between them is fair.
	const block = 100
	e.progress("[%s] %d single-point writes (after %d to warm up), floor rounds between blocks of %d…", cs, count, warmup, block)
	w := bc.node(0)
	opt := tsdb.PutOptions{WriteQuorum: wq}
	lat := make([]time.Duration, 0, count)
	var floor []time.Duration
	peers := 0
	var spent time.Duration
	for lo, hi := -warmup, 0; lo < count; lo = hi {
		hi = min(lo+block, count)
		if lo < 0 {
			hi = 0 // the warm-up is a block of its own
		}
		for i := lo; i < hi; i++ {
			t := time.Now()
			stored, err := w.Put(e.ctx, key, data.Slice(warmup+i, warmup+i+1), opt)
			d := time.Since(t)
			if err != nil {
				return nil, fmt.Errorf("write %d: %w", i, err)
			}
			if stored != 1 {
				return nil, fmt.Errorf("write %d: stored %d points, want 1", i, stored)
			}
			if i >= 0 {
				lat = append(lat, d)
				spent += d
			}
		}
		if fp == nil {
			continue
		}
		for i := lo; i < hi; i++ {
			k := cs.rf
			if i >= 0 {
				k = fanout[i]
			}
			d, err := fp.round(e.ctx, k)
			if err != nil {
				return nil, err
			}
			if i >= 0 {
				floor = append(floor, d)
				peers += k
			}
		}
	}
	r.latency = summarize(lat)
	if spent > 0 {
		r.PointsPerS = float64(count) / spent.Seconds()
	}
	if fp != nil {
		f := summarize(floor)
		r.FloorLatency = &FloorLatency{Mean: f.Mean, P50: f.P50, P99: f.P99, Peers: float64(peers) / float64(count)}
		if f.Mean > 0 {
			r.FloorLatency.Ratio = r.latency.Mean / f.Mean
		}
		if f.P50 > 0 {
			r.FloorLatency.RatioP50 = r.latency.P50 / f.P50
		}
	}
	return r, nil
}
