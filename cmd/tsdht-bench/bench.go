package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/internal/cliflag"
	"github.com/tsdht/tsdht/internal/latency"
	"github.com/tsdht/tsdht/internal/localcluster"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
)

// newApp is tsdht-bench: the benchmarks that reproduce the paper's Tables I and II and
// measure what the paper did not — the network floor under a write, long reads, and
// sustained ingest. Every measuring command follows DESIGN.md's benchmark output
// contract. They are a binary of their own so that the node binary carries none of
// their code (nor the paper's design rebuilt, internal/paperdht).
func newApp() *cli.App {
	return &cli.App{
		Name:  "tsdht-bench",
		Usage: "measure tsdht's writes, reads and ingest as the paper did (and more); --json for scripts",
		Description: "Each measuring command runs one case per (--id-format, --rf) against --local N nodes inside\n" +
			"this process (a fresh cluster per case) or against a running --cluster. With --json it prints\n" +
			"one JSON object per case on stdout (fields: DESIGN.md, \"Benchmark output contract\");\n" +
			"progress goes to stderr.",
		Commands: []*cli.Command{
			benchWriteCommand(),
			benchReadCommand(),
			benchIngestCommand(),
			benchEchoCommand(),
			benchQueryCommand(),
			benchReportCommand(),
		},
	}
}

// paperWriteMs is the paper's Table I: ms per single-point write on 18 BeagleBone
// Blacks, by ID format and replication factor.
var paperWriteMs = map[quanta.Format]map[int]float64{
	quanta.QFI: {1: 4.54, 4: 10.9, 7: 14.1},
	quanta.KFI: {1: 5.05, 4: 10.1, 7: 13.4},
}

// paperReadS is the paper's Table II: seconds to read the given span (s) of 60 Hz
// history on 18 BeagleBone Blacks, by ID format.
var paperReadS = map[quanta.Format]map[int]float64{
	quanta.QFI: {10: 0.176, 80: 4.33, 150: 3.54},
	quanta.KFI: {10: 0.081, 80: 3.354, 150: 2.45},
}

// benchFlags are the flags every measuring subcommand takes; defaults are per
// subcommand.
func benchFlags(local int, rf []int) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "cluster", Usage: "RPC addresses of a running cluster, HOST:PORT[,…]; then --rf and --id-format must name its settings"},
		&cli.IntFlag{Name: "local", Value: local, Usage: "without --cluster: start N nodes inside this process, on loopback (real TCP, real gossip), afresh for every case"},
		&cli.IntSliceFlag{Name: "rf", Value: cli.NewIntSlice(rf...), Usage: "replication factors, one case each, e.g. 1,4,7"},
		&cli.StringSliceFlag{Name: "id-format", Value: cli.NewStringSlice("qfi", "kfi"), Usage: "shard ID layouts, one case each: qfi, kfi, hfi, or several"},
		&cli.StringFlag{Name: "sync", Value: store.DefaultPebbleOptions().Sync.String(), Usage: "--local store durability: always, batch or none (see go doc ./tsdb/store SyncMode); with --cluster only reported"},
		&cli.StringFlag{Name: "store", Value: "disk", Usage: "--local store, as tsdht node's: disk (pebble under --data) or memory (lost on exit, as the paper's prototype)"},
		&cli.StringFlag{Name: "data", Usage: "directory for the --local nodes' data (default: a fresh temporary directory, removed afterwards)"},
		&cli.BoolFlag{Name: "json", Usage: "print one JSON object per case on stdout, progress on stderr"},
		&cli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile of the whole run (with --local: the nodes too) to this file"},
		&cli.StringFlag{Name: "memprofile", Usage: "write a heap profile (allocations of the whole run: go tool pprof -sample_index=alloc_space) to this file at the end"},
		&cli.StringFlag{Name: "routing", Value: "full", Usage: "--local nodes' routing mode: full or kademlia (see tsdht node --routing)"},
		&cli.BoolFlag{Name: "read-quorum-only", Usage: "--local nodes read a read quorum of each shard's replicas, not all (see go doc ./tsdb Config.ReadQuorumOnly); with --cluster only reported: say so when its nodes run tsdht node --read-quorum-only"},
		cliflag.Timeout,
	}
}

// benchEnv is what a bench subcommand was asked to do.
type benchEnv struct {
	ctx     context.Context
	out     io.Writer // results
	log     io.Writer // progress
	json    bool
	local   int      // nodes in this process; 0 with --cluster
	addrs   []string // --cluster
	formats []quanta.Format
	rfs     []int
	sync    store.SyncMode
	store   string
	dataDir string
	timeout time.Duration
	routing dht.Routing // of the --local nodes
	quorum  bool        // the --local nodes read a read quorum of replicas only
}

// benchCase is one measured configuration.
type benchCase struct {
	format quanta.Format
	rf     int
}

func (cs benchCase) String() string { return fmt.Sprintf("%s rf %d", cs.format, cs.rf) }

// caseInfo is the part of every JSON result that says what was measured.
type caseInfo struct {
	Bench    string `json:"bench"`
	IDFormat string `json:"id_format"`
	RF       int    `json:"rf"`
	Sync     string `json:"sync"`
	Store    string `json:"store"`
	Nodes    int    `json:"nodes"`
	// Target says who issued the requests: "local" (a node's coordinator inside the
	// bench process) or "cluster" (a thin client over TCP).
	Target string `json:"target"`
	// Routing is the --local nodes' routing mode, "full" or "kademlia"; empty with
	// --cluster (the nodes' own).
	Routing string `json:"routing,omitempty"`
	// ReadQuorumOnly says the nodes read a read quorum of each shard's replicas, not
	// all of them (with --cluster: as --read-quorum-only said of them).
	ReadQuorumOnly bool `json:"read_quorum_only,omitempty"`
}

func newBenchEnv(c *cli.Context) (*benchEnv, error) {
	e := &benchEnv{
		ctx:     c.Context,
		out:     c.App.Writer,
		log:     c.App.ErrWriter,
		json:    c.Bool("json"),
		addrs:   cliflag.SplitAddrs(c.String("cluster")),
		rfs:     c.IntSlice("rf"),
		store:   c.String("store"),
		dataDir: c.String("data"),
		timeout: c.Duration("timeout"),
	}
	if e.out == nil {
		e.out = os.Stdout
	}
	if e.log == nil {
		e.log = os.Stderr
	}
	var err error
	e.quorum = c.Bool("read-quorum-only")
	if e.routing, err = dht.ParseRouting(c.String("routing")); err != nil {
		return nil, fmt.Errorf("--routing: %w", err)
	}
	if e.sync, err = store.ParseSyncMode(c.String("sync")); err != nil {
		return nil, fmt.Errorf("--sync: %w", err)
	}
	if err := localcluster.CheckKind(e.store); err != nil {
		return nil, err
	}
	for _, s := range c.StringSlice("id-format") {
		for _, part := range cliflag.SplitAddrs(s) { // also accepts "qfi,kfi" in one argument
			f, err := quanta.ParseFormat(part)
			if err != nil {
				return nil, fmt.Errorf("--id-format: %w", err)
			}
			e.formats = append(e.formats, f)
		}
	}
	if len(e.formats) == 0 || len(e.rfs) == 0 {
		return nil, errors.New("need at least one --id-format and one --rf")
	}
	for _, rf := range e.rfs {
		if rf < 1 || rf > tsdb.MaxRF {
			return nil, fmt.Errorf("--rf %d: must be 1..%d", rf, tsdb.MaxRF)
		}
	}
	if len(e.addrs) > 0 {
		if len(e.formats) != 1 || len(e.rfs) != 1 {
			return nil, errors.New("with --cluster, give exactly one --rf and one --id-format: those the cluster's nodes run")
		}
		return e, nil
	}
	e.local = c.Int("local")
	if e.local < 1 {
		return nil, errors.New("need --cluster or --local N (N ≥ 1)")
	}
	for _, rf := range e.rfs {
		if rf > e.local {
			return nil, fmt.Errorf("--rf %d needs at least %d nodes; --local is %d", rf, rf, e.local)
		}
	}
	return e, nil
}

// cases lists the configurations to measure, format-major as the paper's tables are.
func (e *benchEnv) cases() []benchCase {
	var out []benchCase
	for _, f := range e.formats {
		for _, rf := range e.rfs {
			out = append(out, benchCase{f, rf})
		}
	}
	return out
}

func (e *benchEnv) progress(format string, args ...any) {
	fmt.Fprintf(e.log, format+"\n", args...)
}

// info describes a case for its JSON result.
func (e *benchEnv) info(bench string, cs benchCase) caseInfo {
	ci := caseInfo{Bench: bench, IDFormat: cs.format.String(), RF: cs.rf, Sync: e.sync.String(), Store: e.store,
		Nodes: e.local, Target: "local", Routing: e.routing.String(), ReadQuorumOnly: e.quorum}
	if e.local == 0 {
		ci.Routing = ""
		ci.Nodes, ci.Target, ci.Store = len(e.addrs), "cluster", "cluster" // the nodes' own: --sync is as reported
	}
	if ci.Store == "memory" {
		ci.Sync = "none" // RAM only: nothing ever reaches a disk
	}
	return ci
}

// where says in words what the bench runs against, for the human-readable header.
func (e *benchEnv) where() string {
	if e.local == 0 {
		return fmt.Sprintf("a running cluster of %d given nodes (--cluster), driven by thin clients over TCP", len(e.addrs))
	}
	st := "disk store (pebble), sync " + e.sync.String()
	if e.store == "memory" {
		st = "memory store (as the paper's prototype)"
	}
	return fmt.Sprintf("%d nodes inside this process on loopback (real TCP, real gossip), %s", e.local, st)
}

// emit prints one result as a JSON line when --json is set.
func (e *benchEnv) emit(v any) error {
	if !e.json {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(e.out, "%s\n", b)
	return err
}

// printf prints human-readable results, unless --json is set.
func (e *benchEnv) printf(format string, args ...any) {
	if !e.json {
		fmt.Fprintf(e.out, format, args...)
	}
}

// seriesRW is what the benches drive: a node's Coordinator in process, or a thin Client.
type seriesRW interface {
	Put(ctx context.Context, key string, pts series.Points, opt tsdb.PutOptions) (int, error)
	Get(ctx context.Context, key string, from, to int64, opt tsdb.GetOptions) (tsdb.Result, error)
}

// benchCluster is what one case runs against.
type benchCluster struct {
	local   *tsdb.LocalCluster // with --local
	clients []*tsdb.Client     // with --cluster: one per address, coordinating through it
}

// size returns the number of nodes the bench can address.
func (bc *benchCluster) size() int {
	if bc.local != nil {
		return len(bc.local.Nodes)
	}
	return len(bc.clients)
}

// node returns the coordinator of node i (mod size): in process with --local, a thin
// client of the i-th --cluster address otherwise.
func (bc *benchCluster) node(i int) seriesRW {
	if bc.local != nil {
		return bc.local.Nodes[i%len(bc.local.Nodes)].Coordinator()
	}
	return bc.clients[i%len(bc.clients)]
}

func (bc *benchCluster) Close() error {
	var errs []error
	for _, c := range bc.clients {
		errs = append(errs, c.Close())
	}
	if bc.local != nil {
		errs = append(errs, bc.local.Close())
	}
	return errors.Join(errs...)
}

// start brings up the cluster of a case: fresh nodes with --local, clients of the
// running nodes with --cluster (checking that its replica sets have --rf nodes).
func (e *benchEnv) start(cs benchCase) (*benchCluster, error) {
	if e.local == 0 {
		return e.dial(cs)
	}
	e.progress("[%s] starting %d nodes, routing %v…", cs, e.local, e.routing)
	t0 := time.Now()
	dir := e.dataDir
	if dir != "" {
		dir = filepath.Join(dir, fmt.Sprintf("%s-rf%d-%d", cs.format, cs.rf, time.Now().UnixNano()))
	}
	// Convergence may take up to --timeout (minutes on an emulated ARM core).
	startCtx, cancel := context.WithTimeout(e.ctx, e.timeout)
	defer cancel()
	lc, err := localcluster.Start(startCtx, e.local, dir, localcluster.Stores{Kind: e.store, Sync: e.sync},
		func(_ int, cfg *tsdb.Config) {
			cfg.RF = cs.rf
			cfg.DHT.Format = cs.format
			cfg.DHT.Routing = e.routing
			cfg.ReadQuorumOnly = e.quorum
		})
	if err != nil {
		return nil, err
	}
	e.progress("[%s] %d nodes live after %v", cs, e.local, time.Since(t0).Round(time.Millisecond))
	return &benchCluster{local: lc}, nil
}

func (e *benchEnv) dial(cs benchCase) (*benchCluster, error) {
	bc := &benchCluster{}
	cfg := tsdb.DefaultClientConfig()
	cfg.Timeout = e.timeout
	for i := range e.addrs {
		// Address i first, the others to fail over to.
		addrs := append(append([]string{}, e.addrs[i:]...), e.addrs[:i]...)
		cl, err := tsdb.NewClient(addrs, cfg)
		if err != nil {
			bc.Close()
			return nil, err
		}
		bc.clients = append(bc.clients, cl)
	}
	reps, err := bc.clients[0].Locate(e.ctx, quanta.KeyID("tsdht-bench-probe"))
	if err != nil {
		bc.Close()
		return nil, fmt.Errorf("--cluster: %w", err)
	}
	if len(reps) != cs.rf {
		bc.Close()
		return nil, fmt.Errorf("--cluster has replica sets of %d nodes, but --rf is %d: start the nodes with --rf %d",
			len(reps), cs.rf, cs.rf)
	}
	return bc, nil
}

// sealHistory seals, in every --local pebble store, the quanta that ended long enough
// ago: the state history is in once the background sealer has passed, measured
// without waiting for it.
func (e *benchEnv) sealHistory(bc *benchCluster) {
	if bc.local == nil {
		return
	}
	pairs := 0
	for _, n := range bc.local.Nodes {
		if p, ok := n.Store().(*store.Pebble); ok {
			k, err := p.SealNow(time.Now())
			if err != nil {
				e.progress("seal: %v", err)
			}
			pairs += k
		}
	}
	if pairs > 0 {
		e.progress("sealed %d (shard, series) pairs of history into compressed chunks", pairs)
	}
}

// runBench wraps a bench subcommand's action with the common set-up: flags, profile,
// and the cases.
func runBench(run func(e *benchEnv, c *cli.Context) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		e, err := newBenchEnv(c)
		if err != nil {
			return err
		}
		if path := c.String("cpuprofile"); path != "" {
			f, err := os.Create(path)
			if err != nil {
				return fmt.Errorf("--cpuprofile: %w", err)
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				return fmt.Errorf("--cpuprofile: %w", err)
			}
			defer pprof.StopCPUProfile()
		}
		if path := c.String("memprofile"); path != "" {
			f, err := os.Create(path)
			if err != nil {
				return fmt.Errorf("--memprofile: %w", err)
			}
			defer f.Close()
			defer func() {
				if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
					e.progress("--memprofile: %v", err)
				}
			}()
		}
		return run(e, c)
	}
}

// timing summarises request latencies in milliseconds.
type timing struct {
	Mean float64 `json:"mean_ms"`
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
}

func summarize(ds []time.Duration) timing {
	return timing{Mean: latency.Ms(latency.Mean(ds)), P50: latency.Ms(latency.Pct(ds, 50)), P99: latency.Ms(latency.Pct(ds, 99))}
}

// machine describes the host in one line, for reports.
func machine() string {
	cpu := runtime.GOARCH
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d CPUs (GOMAXPROCS %d), %s/%s, %s", cpu, runtime.NumCPU(), runtime.GOMAXPROCS(0),
		runtime.GOOS, runtime.GOARCH, runtime.Version())
}
