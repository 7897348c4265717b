package main

import (
	"fmt"
	"math/rand"
	"runtime"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/internal/cliflag"
	"github.com/tsdht/tsdht/internal/cputime"
	"github.com/tsdht/tsdht/internal/paperdht"
	"github.com/tsdht/tsdht/internal/pmuplay"
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
			"parallel, against echo servers with no DHT and no store — through package rpc (floor) and, with\n" +
			"--local, through plain TCP to plain Go echo servers (bare). With --local and --paper it also\n" +
			"writes the same points to the paper's design rebuilt (internal/paperdht: net/rpc over HTTP, gob,\n" +
			"an in-memory hashmap) on as many nodes, at the same rf and write quorum. Writes, floors and the\n" +
			"rebuild take turns in blocks of 100, so all meet the same background. With --local and --sync\n" +
			"batch or none, each block of writes ends by draining every node's write buffer: its time (spread\n" +
			"over the block's writes) and CPU count as the writes', not as whichever block it would fall in.",
		Flags: append(benchFlags(18, []int{1, 4, 7}),
			&cli.IntFlag{Name: "count", Value: 10000, Usage: "timed single-point writes per case"},
			&cli.IntFlag{Name: "warmup", Value: 200, Usage: "untimed writes (and floor rounds) first: connections, series type"},
			&cli.IntFlag{Name: "write-quorum", Usage: "replicas that must acknowledge each write (default: the nodes' own, a majority of rf)"},
			&cli.BoolFlag{Name: "paper", Usage: "with --local: also write to the paper's design rebuilt (internal/paperdht) in the same run, interleaved"},
			&cli.BoolFlag{Name: "paper-dial", Usage: "with --paper: the rebuild dials a connection for every RPC and closes it after the answer (net/rpc's package example) instead of keeping one per peer"},
			&cli.BoolFlag{Name: "paper-lookup", Usage: "with --paper: the rebuild finds each write's replicas by Kademlia's iterative FIND_NODE over RPC first, as Kademlia's STORE does (default: from its own full member list)"},
			&cli.StringFlag{Name: "floor-addrs", Usage: "with --cluster: 'tsdht-bench echo' servers (HOST:PORT,…; at least rf) on the nodes' hosts, for the floor; without them the floor is not measured"},
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

// BareLatency is the bare floor beside a write result (--local only), in ms: plain TCP
// to plain Go echo servers, as many as the write's remote replicas.
type BareLatency struct {
	Mean float64 `json:"bare_mean_ms"`
	P50  float64 `json:"bare_p50_ms"`
	P99  float64 `json:"bare_p99_ms"`
	// Ratio is the write's mean over the bare floor's mean; RatioP50 compares medians.
	Ratio    float64 `json:"x_bare"`
	RatioP50 float64 `json:"x_bare_p50"`
}

// RebuiltLatency is the paper's design rebuilt (internal/paperdht) writing the same
// points in the same run (--paper), in ms.
type RebuiltLatency struct {
	Mean float64 `json:"rebuilt_mean_ms"`
	P50  float64 `json:"rebuilt_p50_ms"`
	P99  float64 `json:"rebuilt_p99_ms"`
	// Speedup is the rebuild's mean over tsdht's mean; SpeedupP50 compares medians.
	Speedup    float64 `json:"rebuilt_over_tsdht"`
	SpeedupP50 float64 `json:"rebuilt_over_tsdht_p50"`
	// Lookup says the rebuild found each write's replicas by an iterative FIND_NODE
	// lookup over RPC (--paper-lookup).
	Lookup bool `json:"rebuilt_lookup,omitempty"`
	// DialEach says the rebuild dialed a connection per RPC (--paper-dial).
	DialEach bool `json:"rebuilt_dial_each,omitempty"`
}

// WriteCPU is the bench process's CPU time (user + system, all threads: with --local
// the coordinator, every replica and the kernel's loopback work) spent while each
// kind of operation ran, per operation, in µs. Background work of the idle cluster
// (gossip, timers) runs meanwhile and is counted too; Idle says how much of it there
// is, measured before the timed blocks.
type WriteCPU struct {
	Write float64 `json:"cpu_us_per_write"`
	Floor float64 `json:"cpu_us_per_floor,omitempty"`
	Bare  float64 `json:"cpu_us_per_bare,omitempty"`
	// Idle is the idle cluster's CPU in µs per ms of wall time (1000: a whole core).
	Idle float64 `json:"cpu_idle_us_per_ms"`
	// Allocs and AllocBytes are the process's heap allocations while the writes ran,
	// per write: what feeds the garbage collector.
	Allocs     float64 `json:"allocs_per_write"`
	AllocBytes float64 `json:"alloc_bytes_per_write"`
}

type writeResult struct {
	caseInfo
	Count       int `json:"count"`
	WriteQuorum int `json:"write_quorum"`
	timing
	CPU        WriteCPU `json:"cpu"`
	PointsPerS float64  `json:"points_per_s"`
	*FloorLatency
	*BareLatency
	*RebuiltLatency
	PaperMs float64 `json:"paper_ms,omitempty"`
}

func runBenchWrite(e *benchEnv, c *cli.Context) error {
	count, warmup, wq, paper := c.Int("count"), c.Int("warmup"), c.Int("write-quorum"), c.Bool("paper")
	lookup, dial := c.Bool("paper-lookup"), c.Bool("paper-dial")
	if (lookup || dial) && !paper {
		return fmt.Errorf("--paper-lookup and --paper-dial need --paper")
	}
	if paper && e.local == 0 {
		return fmt.Errorf("--paper needs --local: the rebuild runs inside the bench process")
	}
	if count < 1 || warmup < 0 {
		return fmt.Errorf("need --count ≥ 1 and --warmup ≥ 0")
	}
	for _, rf := range e.rfs {
		if wq < 0 || wq > rf {
			return fmt.Errorf("--write-quorum %d: must be 1..rf (%d)", wq, rf)
		}
	}
	floorAddrs := cliflag.SplitAddrs(c.String("floor-addrs"))
	writer := "node 0's coordinator, inside this process (as in the paper: one node issues the writes)"
	if e.local == 0 {
		writer = "a thin client of " + e.addrs[0] + " (which coordinates: one more hop than the paper's writer node)"
	}
	e.printf("tsdht-bench write: %d sequential single-point writes per case\n", count)
	e.printf("cluster: %s\nwriter:  %s\nmachine: %s\n", e.where(), writer, machine())
	e.printf("floor:   one bare request/response to the write's remote replicas in parallel (echo servers: no DHT, no store)\n")
	e.printf("bare:    the same over plain TCP to plain Go echo servers, 16 bytes, no rpc layer (--local only)\n")
	if paper {
		how := "one kept connection per peer"
		if dial {
			how = "a connection dialed per RPC"
		}
		if lookup {
			how += ", a FIND_NODE lookup before each write"
		}
		e.printf("rebuilt: the paper's design rebuilt (internal/paperdht: net/rpc over HTTP, gob, in-memory; %s), same nodes count, rf and quorum\n", how)
	}
	e.printf("\n%-6s %3s %3s %9s %9s %9s   %9s %9s %9s %6s %7s   %9s %9s %7s %7s   %9s %9s %7s   %9s\n",
		"format", "rf", "w", "mean ms", "p50 ms", "p99 ms", "floor ms", "fl p50", "fl p99", "peers", "×floor",
		"bare ms", "bare p50", "×bare", "×b p50", "rebuilt", "rb p50", "rb÷ts", "paper ms")
	for _, cs := range e.cases() {
		r, err := e.writeCase(cs, count, warmup, wq, floorAddrs, paper, rebuildOpts{lookup: lookup, dialEach: dial})
		if err != nil {
			return fmt.Errorf("[%s] %w", cs, err)
		}
		fl := "        —         —         —      —       —"
		if f := r.FloorLatency; f != nil {
			fl = fmt.Sprintf("%9.3f %9.3f %9.3f %6.2f %6.2f×", f.Mean, f.P50, f.P99, f.Peers, f.Ratio)
		}
		bare := "        —         —       —       —"
		if b := r.BareLatency; b != nil {
			bare = fmt.Sprintf("%9.3f %9.3f %6.2f× %6.2f×", b.Mean, b.P50, b.Ratio, b.RatioP50)
		}
		rebuilt := "        —         —       —"
		if rb := r.RebuiltLatency; rb != nil {
			rebuilt = fmt.Sprintf("%9.3f %9.3f %6.1f×", rb.Mean, rb.P50, rb.Speedup)
		}
		paperMs := "—"
		if r.PaperMs > 0 {
			paperMs = fmt.Sprintf("%.2f", r.PaperMs)
		}
		e.printf("%-6s %3d %3d %9.3f %9.3f %9.3f   %s   %s   %s   %9s\n", cs.format, cs.rf, r.WriteQuorum, r.timing.Mean, r.timing.P50, r.timing.P99, fl, bare, rebuilt, paperMs)
		e.printf("       cpu µs per write %.0f, per floor round %.0f, per bare round %.0f (process CPU while each ran; idle cluster %.0f µs per ms); %.0f allocations, %.0f bytes per write\n",
			r.CPU.Write, r.CPU.Floor, r.CPU.Bare, r.CPU.Idle, r.CPU.Allocs, r.CPU.AllocBytes)
		if err := e.emit(r); err != nil {
			return err
		}
	}
	return nil
}

func (e *benchEnv) writeCase(cs benchCase, count, warmup, wq int, floorAddrs []string, paper bool, ro rebuildOpts) (*writeResult, error) {
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
	p := &pmuplay.PMU{Name: "bench", Rnd: rand.New(rand.NewSource(1)), T0: t0}
	data := p.Samples(n)["vang"]

	// The floor's fan-out for each timed write: its remote replicas.
	fanout := make([]int, count)
	var fp *floorProber
	var bf *bareFloor
	var rebuilt *rebuiltCluster
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
		if bf, err = newBareFloor(cs.rf); err != nil {
			fp.Close()
			return nil, err
		}
		defer bf.Close()
		if paper {
			if rebuilt, err = startRebuilt(e.local, cs.format, q, ro); err != nil {
				fp.Close()
				return nil, err
			}
			defer rebuilt.Close()
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
	var floor, bare, rb []time.Duration
	peers := 0
	rbQuorum := r.WriteQuorum
	var spent time.Duration
	var cpuWrite, cpuFloor, cpuBare time.Duration // process CPU while each ran, timed blocks only
	var mallocs, allocBytes uint64                // heap allocations while the writes ran
	var ms runtime.MemStats
	cpuSince := func(c0 time.Duration, lo int, into *time.Duration) {
		if lo >= 0 {
			*into += cputime.Process() - c0
		}
	}
	for lo, hi := -warmup, 0; lo < count; lo = hi {
		hi = min(lo+block, count)
		if lo < 0 {
			hi = 0 // the warm-up is a block of its own
		}
		if lo == 0 { // after the warm-up: what the idle cluster burns by itself
			c0, t0 := cputime.Process(), time.Now()
			time.Sleep(200 * time.Millisecond)
			r.CPU.Idle = float64(cputime.Process()-c0) / float64(time.Since(t0)) * 1e3
		}
		runtime.ReadMemStats(&ms)
		m0, b0 := ms.Mallocs, ms.TotalAlloc
		c0 := cputime.Process()
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
		if lo >= 0 && bc.local != nil {
			// The replicas' write buffers (--sync batch and none) would drain during the
			// blocks that follow, out of the writes' accounts: drain them now, and count
			// the time and CPU as the block's writes', the time spread evenly over them.
			t := time.Now()
			if err := drainWriteBuffers(bc.local.Nodes); err != nil {
				return nil, err
			}
			share := time.Since(t) / time.Duration(hi-lo)
			for j := len(lat) - (hi - lo); j < len(lat); j++ {
				lat[j] += share
			}
			spent += share * time.Duration(hi-lo)
		}
		cpuSince(c0, lo, &cpuWrite)
		if lo >= 0 {
			runtime.ReadMemStats(&ms)
			mallocs, allocBytes = mallocs+ms.Mallocs-m0, allocBytes+ms.TotalAlloc-b0
		}
		if rebuilt != nil {
			for i := lo; i < hi; i++ {
				t := time.Now()
				err := rebuilt.put(key, data.T[warmup+i], data.F[warmup+i], cs.rf, rbQuorum)
				d := time.Since(t)
				if err != nil {
					return nil, fmt.Errorf("rebuilt paper design, write %d: %w", i, err)
				}
				if i >= 0 {
					rb = append(rb, d)
				}
			}
		}
		if fp == nil {
			continue
		}
		// timeRounds times one floor round per write of the block, each to as many
		// peers as that write had remote replicas, into lat, cpu and (unless nil) peers.
		timeRounds := func(round func(k int) (time.Duration, error), lat *[]time.Duration, cpu *time.Duration, peers *int) error {
			c0 := cputime.Process()
			for i := lo; i < hi; i++ {
				k := cs.rf
				if i >= 0 {
					k = fanout[i]
				}
				d, err := round(k)
				if err != nil {
					return err
				}
				if i >= 0 {
					*lat = append(*lat, d)
					if peers != nil {
						*peers += k
					}
				}
			}
			cpuSince(c0, lo, cpu)
			return nil
		}
		if err := timeRounds(func(k int) (time.Duration, error) { return fp.round(e.ctx, k) }, &floor, &cpuFloor, &peers); err != nil {
			return nil, err
		}
		if bf == nil {
			continue
		}
		if err := timeRounds(func(k int) (time.Duration, error) { return bf.round(k, e.timeout) }, &bare, &cpuBare, nil); err != nil {
			return nil, err
		}
	}
	us := func(d time.Duration) float64 { return float64(d) / 1e3 / float64(count) }
	r.CPU.Write, r.CPU.Floor, r.CPU.Bare = us(cpuWrite), us(cpuFloor), us(cpuBare)
	r.CPU.Allocs, r.CPU.AllocBytes = float64(mallocs)/float64(count), float64(allocBytes)/float64(count)
	r.timing = summarize(lat)
	if spent > 0 {
		r.PointsPerS = float64(count) / spent.Seconds()
	}
	if fp != nil {
		f := summarize(floor)
		r.FloorLatency = &FloorLatency{Mean: f.Mean, P50: f.P50, P99: f.P99, Peers: float64(peers) / float64(count),
			Ratio: ratio(r.timing.Mean, f.Mean), RatioP50: ratio(r.timing.P50, f.P50)}
	}
	if bf != nil {
		b := summarize(bare)
		r.BareLatency = &BareLatency{Mean: b.Mean, P50: b.P50, P99: b.P99,
			Ratio: ratio(r.timing.Mean, b.Mean), RatioP50: ratio(r.timing.P50, b.P50)}
	}
	if rebuilt != nil {
		x := summarize(rb)
		r.RebuiltLatency = &RebuiltLatency{Mean: x.Mean, P50: x.P50, P99: x.P99, Lookup: ro.lookup, DialEach: ro.dialEach,
			Speedup: ratio(x.Mean, r.timing.Mean), SpeedupP50: ratio(x.P50, r.timing.P50)}
	}
	return r, nil
}

// ratio returns a over b, or 0 when b is not positive (nothing measured).
func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// rebuiltCluster is the paper's design rebuilt (internal/paperdht) on as many nodes as
// the --local cluster, written to by its node 0 as tsdht's writer is node 0.
type rebuiltCluster struct {
	nodes  *paperdht.Cluster
	writer *paperdht.Client
}

// rebuildOpts are the rebuild's costlier readings of the paper: a lookup before each
// write (--paper-lookup), a connection per RPC (--paper-dial).
type rebuildOpts struct{ lookup, dialEach bool }

func startRebuilt(n int, f quanta.Format, q quanta.Quantum, ro rebuildOpts) (*rebuiltCluster, error) {
	nodes, err := paperdht.StartCluster(n)
	if err != nil {
		return nil, fmt.Errorf("rebuilt paper design: %w", err)
	}
	w := nodes.Client(0, f, q)
	w.Lookup, w.DialEach = ro.lookup, ro.dialEach
	return &rebuiltCluster{nodes: nodes, writer: w}, nil
}

func (rc *rebuiltCluster) put(key string, t int64, v float64, rf, quorum int) error {
	return rc.writer.Put(key, t, v, rf, quorum)
}

func (rc *rebuiltCluster) Close() {
	rc.writer.Close()
	rc.nodes.Close()
}

// drainWriteBuffers moves what waits in the nodes' write buffers into their engines.
func drainWriteBuffers(nodes []*tsdb.Node) error {
	for _, n := range nodes {
		if n == nil {
			continue
		}
		if d, ok := n.Store().(interface{ DrainWriteBuffer() error }); ok {
			if err := d.DrainWriteBuffer(); err != nil {
				return fmt.Errorf("drain a node's write buffer: %w", err)
			}
		}
	}
	return nil
}
