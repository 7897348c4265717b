package main

import (
	"fmt"
	"math/rand"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/internal/latency"
	"github.com/tsdht/tsdht/internal/localcluster"
	"github.com/tsdht/tsdht/internal/pmuplay"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
)

func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "start a small cluster on loopback, play a 60 Hz PMU into it, read history back, print timings",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "nodes", Value: 5, Usage: "nodes in the cluster"},
			&cli.IntFlag{Name: "rf", Value: 3, Usage: "replication factor"},
			&cli.DurationFlag{Name: "history", Value: 3 * time.Minute, Usage: "how much 60 Hz history the PMU plays"},
			&cli.IntFlag{Name: "writes", Value: 1000, Usage: "single-point writes timed for Table I"},
			&cli.IntFlag{Name: "reads", Value: 20, Usage: "reads timed per span for Table II"},
			&cli.StringFlag{Name: "store", Value: "disk", Usage: "the nodes' store, as tsdht node's: disk (pebble in a temporary directory) or memory"},
			&cli.StringFlag{Name: "sync", Value: "always", Usage: "with --store disk: always, batch or none, as tsdht node's"},
		},
		Action: runDemo,
	}
}

func runDemo(c *cli.Context) error {
	nodes, rf := c.Int("nodes"), c.Int("rf")
	if nodes < 1 || rf < 1 || rf > tsdb.MaxRF {
		return fmt.Errorf("need --nodes ≥ 1 and --rf 1..%d", tsdb.MaxRF)
	}
	history := c.Duration("history")
	if history < 150*time.Second {
		return badFlag("--history %v: at least 150s, the longest span the demo reads", history)
	}
	n := int(history / time.Second * 60)
	if err := localcluster.CheckKind(c.String("store")); err != nil {
		err = badFlag("%w", err)
		return err
	}
	mode, err := store.ParseSyncMode(c.String("sync"))
	if err != nil {
		return badFlag("--sync: %w", err)
	}
	storeDesc := "memory store"
	if c.String("store") == "disk" {
		storeDesc = "pebble store, --sync " + mode.String()
	}
	fmt.Printf("tsdht demo: %d nodes on loopback (real TCP, real gossip, %s), rf %d, quantum %v\n", nodes, storeDesc, rf, quanta.DefaultQuantum)
	fmt.Printf("a PMU plays %v of 60 Hz history on %d channels (%d points each)\n\n", history, len(pmuplay.Channels), n)

	type row struct {
		format          string
		ingestPts       int
		ingestDur       time.Duration
		single          []time.Duration
		spans           []int
		counts, expects []int
		reads           [][]time.Duration
	}
	var rows []row
	for _, f := range []quanta.Format{quanta.QFI, quanta.KFI} {
		cl, err := localcluster.Start(c.Context, nodes, "", localcluster.Stores{Kind: c.String("store"), Sync: mode},
			func(_ int, cfg *tsdb.Config) {
				cfg.RF = rf
				cfg.DHT.Format = f
			})
		if err != nil {
			return err
		}
		r := row{format: f.String()}
		err = func() error {
			defer cl.Close()
			writer, err := tsdb.NewClient([]string{cl.Nodes[0].RPCAddr()}, tsdb.DefaultClientConfig())
			if err != nil {
				return err
			}
			defer writer.Close()
			reader, err := tsdb.NewClient([]string{cl.Nodes[len(cl.Nodes)-1].RPCAddr()}, tsdb.DefaultClientConfig())
			if err != nil {
				return err
			}
			defer reader.Close()

			// Play the history in one-second batches, as a PMU concentrator would stream it.
			now := time.Now().UnixNano()
			p := &pmuplay.PMU{Name: "pmu1", Rnd: rand.New(rand.NewSource(1)), T0: now - int64(history) - 3_333_333}
			data := p.Samples(n)
			fmt.Fprintf(os.Stderr, "[%s] writing %d points in 1 s batches…\n", f, n*len(pmuplay.Channels))
			start := time.Now()
			for lo := 0; lo < n; lo += 60 {
				for _, ch := range pmuplay.Channels {
					pts := data[ch]
					b := pts.Slice(lo, min(lo+60, n))
					if _, err := writer.Put(c.Context, p.Key(ch), b, tsdb.PutOptions{}); err != nil {
						return err
					}
				}
			}
			r.ingestDur, r.ingestPts = time.Since(start), n*len(pmuplay.Channels)

			// Table I: single-point writes, one after another, as the paper measured.
			fmt.Fprintf(os.Stderr, "[%s] %d single-point writes…\n", f, c.Int("writes"))
			for i := 0; i < c.Int("writes"); i++ {
				var one series.Points
				one.AppendFloat(now-int64(time.Hour)+int64(i)*int64(time.Second)/60, float64(i))
				t0 := time.Now()
				if _, err := writer.Put(c.Context, "pmu1/single", one, tsdb.PutOptions{}); err != nil {
					return err
				}
				r.single = append(r.single, time.Since(t0))
			}

			// Table II: another node reads the latest 10, 80 and 150 s of history.
			vang := data["vang"]
			end := vang.T[n-1] + 1
			for _, span := range []int{10, 80, 150} {
				from := end - int64(span)*int64(time.Second)
				want := vang.Trim(from, end)
				var lat []time.Duration
				got := 0
				for i := 0; i < c.Int("reads"); i++ {
					t0 := time.Now()
					res, err := reader.Get(c.Context, p.Key("vang"), from, end, tsdb.GetOptions{})
					if err != nil {
						return err
					}
					lat = append(lat, time.Since(t0))
					got = res.Points.Len()
					if err := pmuplay.SamePoints(&want, &res.Points); err != nil {
						return fmt.Errorf("[%s] %d s read: %w", f, span, err)
					}
				}
				r.spans = append(r.spans, span)
				r.counts = append(r.counts, got)
				r.expects = append(r.expects, want.Len())
				r.reads = append(r.reads, lat)
			}
			return nil
		}()
		if err != nil {
			return err
		}
		rows = append(rows, r)
	}

	paperWrite := map[string]string{"qfi": "4.54 (rf 1) … 14.1 (rf 7)", "kfi": "5.05 (rf 1) … 13.4 (rf 7)"}
	paperRead := map[string][]string{"qfi": {"0.176", "4.33", "3.54"}, "kfi": {"0.081", "3.354", "2.45"}}
	fmt.Printf("Streaming ingest (1 s batches of 60 points per channel, client → node 1):\n")
	for _, r := range rows {
		fmt.Printf("  %s  %d points in %v  = %.0f points/s\n", r.format, r.ingestPts, r.ingestDur.Round(time.Millisecond),
			float64(r.ingestPts)/r.ingestDur.Seconds())
	}
	fmt.Printf("\nTable I — single-point write, ms (rf %d; the paper's 18 BeagleBones in brackets)\n", rf)
	fmt.Printf("  %-6s %9s %9s %9s   %s\n", "format", "mean", "p50", "p99", "paper ms")
	for _, r := range rows {
		fmt.Printf("  %-6s %9.3f %9.3f %9.3f   [%s]\n", r.format, latency.Ms(latency.Mean(r.single)), latency.Ms(latency.Pct(r.single, 50)), latency.Ms(latency.Pct(r.single, 99)), paperWrite[r.format])
	}
	fmt.Printf("\nTable II — read of the latest history from another node, trimmed exactly\n")
	fmt.Printf("  %-6s %6s %8s %8s %9s %9s %9s   %s\n", "format", "span", "points", "asked", "mean ms", "p50 ms", "p99 ms", "paper s")
	for _, r := range rows {
		for i, span := range r.spans {
			fmt.Printf("  %-6s %5ds %8d %8d %9.3f %9.3f %9.3f   [%s]\n", r.format, span, r.counts[i], r.expects[i],
				latency.Ms(latency.Mean(r.reads[i])), latency.Ms(latency.Pct(r.reads[i], 50)), latency.Ms(latency.Pct(r.reads[i], 99)), paperRead[r.format][i])
		}
	}
	fmt.Printf("\nEvery read returned exactly the points written in its range (checked value by value).\n")
	return nil
}
