package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/pmu/ingest"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// This file is the only glue between package pmu/ingest and the tsdb client: swap the
// client here.

func pmuCommand() *cli.Command {
	return &cli.Command{
		Name:  "pmu",
		Usage: "ingest an IEEE C37.118.2 stream from a PMU or PDC into the cluster (a PDC client)",
		Description: "Connects to the PMU/PDC over TCP (commands and data; with --udp-data, data as UDP datagrams;\n" +
			"with --udp-only, everything as UDP datagrams),\n" +
			"asks for CFG-2 (and CFG-3, reassembled when sent in fragments, and the\n" +
			"header frame as metadata), turns data on and writes one series per channel:\n" +
			"<prefix><station>/<phasor>/mag|ang (rad) or /re|/im, /freq (Hz), /dfreq (Hz/s), /<analog>,\n" +
			"/digital<N>, /stat and /timequality. With --spool, batches go through a bounded on-disk\n" +
			"spool first, so a cluster outage or a restart loses nothing that reached it. See docs/pmu.md.",
		Flags: []cli.Flag{
			clusterFlag, timeoutFlag, clusterKeyFlag,
			&cli.StringFlag{Name: "connect", Required: true, Usage: "the PMU's or PDC's TCP address, HOST:PORT (4712 by convention)"},
			&cli.StringFlag{Name: "udp-data", Usage: "receive data frames as UDP datagrams on this local address, e.g. :4713 (TCP commands + UDP data; the PMU must be set to send there); default: data over the TCP connection"},
			&cli.BoolFlag{Name: "udp-only", Usage: "commands as UDP datagrams too (UDP-only mode): --connect is then the PMU's UDP address (4713 by convention), --udp-data the local address (default: any free port)"},
			&cli.UintFlag{Name: "idcode", Required: true, Usage: "IDCODE of the data stream (command frames are addressed to it), 1–65534"},
			&cli.StringFlag{Name: "prefix", Usage: "prepended to every series key, e.g. \"grid/\""},
			&cli.StringFlag{Name: "spool", Usage: "store-and-forward directory (default: a bounded in-memory queue only)"},
			&cli.StringFlag{Name: "spool-size", Value: "256MiB", Usage: "size limit of the spool; at the limit new batches are dropped, counted and logged"},
			&cli.BoolFlag{Name: "spool-nosync", Usage: "do not fsync each spooled batch (a power cut may lose the last seconds)"},
			&cli.StringFlag{Name: "float-freq", Value: "actual", Usage: "how float32 FREQ is read: actual (Hz, the standard) or deviation (Hz off nominal)"},
			&cli.DurationFlag{Name: "flush", Value: time.Second, Usage: "samples collect this long before they are queued and written"},
			&cli.IntFlag{Name: "write-quorum", Usage: "replicas that must store each shard (default: the node's)"},
			&cli.StringFlag{Name: "metrics", Usage: "serve the ingester's counters at http://HOST:PORT/metrics (Prometheus text)"},
			&cli.DurationFlag{Name: "stats-every", Value: 30 * time.Second, Usage: "log the counters this often (0: never)"},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"},
		},
		Action: runPMU,
	}
}

// pmuWriter adapts the tsdb client to ingest.Writer: a refusal that retrying cannot
// fix is marked ingest.Rejected; everything else (unreachable, quorum not met,
// timeouts) is retried by the ingester.
type pmuWriter struct {
	c   *tsdb.Client
	opt tsdb.PutOptions
	// pending holds the catalog metadata of series not yet written: an entry exists
	// once a series' first write declared it, so the metadata follows that write.
	mu      sync.Mutex
	pending map[string]wire.MetaReq
}

func (w *pmuWriter) Put(ctx context.Context, key string, pts series.Points) (int, error) {
	n, err := w.c.Put(ctx, key, pts, w.opt)
	var re *rpc.RemoteError
	if errors.As(err, &re) {
		switch re.Code {
		case tsdb.CodeBadInput, tsdb.CodeTypeMismatch, tsdb.CodeExpired, rpc.CodeBadRequest:
			return n, ingest.Rejected(err)
		}
	}
	if err == nil {
		w.describePending(ctx, key)
	}
	return n, err
}

// Describe implements ingest.Describer: station, idcode, stream, channel, quantity,
// unit and nominal frequency become tags of each series' catalog entry, with its unit
// and nominal rate, once the series exists.
func (w *pmuWriter) Describe(ctx context.Context, s ingest.Stream) error {
	rate := 0.0
	if s.Config != nil {
		if r := float64(s.Config.DataRate); r > 0 {
			rate = r
		} else if r < 0 {
			rate = -1 / r
		}
	}
	w.mu.Lock()
	if w.pending == nil {
		w.pending = map[string]wire.MetaReq{}
	}
	for _, m := range s.Series {
		req := wire.TagsMeta(m.Key, s.TagsOf(m))
		req.Unit, req.SetUnit = m.Unit, m.Unit != ""
		req.NominalRate, req.SetRate = rate, rate > 0
		req.Description, req.SetDescription = "C37.118 "+m.Station+" "+m.Channel, true
		w.pending[m.Key] = *req
	}
	keys := make([]string, 0, len(w.pending))
	for k := range w.pending {
		keys = append(keys, k)
	}
	w.mu.Unlock()
	for _, k := range keys {
		w.describePending(ctx, k) // series written before: at once
	}
	return nil
}

// describePending records a series' pending metadata if it exists by now.
func (w *pmuWriter) describePending(ctx context.Context, key string) {
	w.mu.Lock()
	req, ok := w.pending[key]
	w.mu.Unlock()
	if !ok {
		return
	}
	if _, err := w.c.Meta(ctx, req); err != nil {
		return // not written yet (unknown series) or unreachable: after its next write
	}
	w.mu.Lock()
	if cur, ok := w.pending[key]; ok && fmt.Sprint(cur) == fmt.Sprint(req) {
		delete(w.pending, key)
	}
	w.mu.Unlock()
}

func runPMU(c *cli.Context) error {
	id := c.Uint("idcode")
	if id < 1 || id > 65534 {
		return badFlag("--idcode %d: want 1–65534", id)
	}
	spoolBytes, err := store.ParseSize(c.String("spool-size"))
	if err != nil {
		return badFlag("--spool-size: %w", err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return badFlag("--log-level %q: want debug, info, warn or error", c.String("log-level"))
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if ff := c.String("float-freq"); ff != "actual" && ff != "deviation" {
		return badFlag("--float-freq %q: want actual or deviation", ff)
	}
	for _, name := range []string{"connect", "udp-data"} {
		if v := c.String(name); v != "" {
			if _, err := hostPorts(name, v); err != nil {
				return err
			}
		}
	}
	client, err := dialCluster(c)
	if err != nil {
		return err
	}
	defer client.Close()
	cfg := ingest.Config{
		Connect:     c.String("connect"),
		DataUDP:     c.String("udp-data"),
		UDPOnly:     c.Bool("udp-only"),
		IDCode:      uint16(id),
		Prefix:      c.String("prefix"),
		FloatFreq:   ingest.FloatFreq(c.String("float-freq")),
		Flush:       c.Duration("flush"),
		Spool:       c.String("spool"),
		SpoolBytes:  spoolBytes,
		SpoolNoSync: c.Bool("spool-nosync"),
		Logger:      log,
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	in, err := ingest.New(cfg, &pmuWriter{c: client, opt: tsdb.PutOptions{WriteQuorum: c.Int("write-quorum")}})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if addr := c.String("metrics"); addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("--metrics %s: %w", addr, err)
		}
		srv := &http.Server{Handler: pmuMetrics(in), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
	}
	if every := c.Duration("stats-every"); every > 0 {
		go func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					s := in.Stats()
					log.Info("pmu stats", "frames", s.DataFrames, "samples", s.Samples, "stored", s.Stored,
						"dropped", s.Dropped, "rejected", s.Rejected, "bad_crc", s.BadCRC, "bad_frames", s.BadFrames,
						"queued_batches", s.QueuedBatches, "queued_bytes", s.QueuedBytes, "connects", s.Connects,
						"missed_frames", s.MissedFrames, "late_frames", s.LateFrames, "duplicate_frames", s.DuplicateFrames)
				}
			}
		}()
	}
	return in.Run(ctx, 10*time.Second)
}

// pmuMetrics serves the ingester's counters in Prometheus' text format.
func pmuMetrics(in *ingest.Ingester) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		s := in.Stats()
		var b strings.Builder
		for _, m := range []struct {
			name, help string
			v          int64
		}{
			{"tsdht_pmu_connects_total", "TCP sessions opened to the PMU", s.Connects},
			{"tsdht_pmu_data_frames_total", "data frames decoded", s.DataFrames},
			{"tsdht_pmu_bad_crc_frames_total", "frames dropped for a CRC mismatch", s.BadCRC},
			{"tsdht_pmu_bad_frames_total", "frames dropped as malformed", s.BadFrames},
			{"tsdht_pmu_samples_total", "samples decoded", s.Samples},
			{"tsdht_pmu_samples_queued_total", "samples handed to the spool or queue", s.Queued},
			{"tsdht_pmu_samples_stored_total", "samples acknowledged by the cluster", s.Stored},
			{"tsdht_pmu_samples_dropped_total", "samples dropped because the spool or queue was full", s.Dropped},
			{"tsdht_pmu_samples_rejected_total", "samples the cluster refused for good", s.Rejected},
			{"tsdht_pmu_write_retries_total", "writes retried after transient errors", s.WriteRetries},
			{"tsdht_pmu_queued_bytes", "bytes waiting in the spool or queue", s.QueuedBytes},
			{"tsdht_pmu_queued_batches", "batches waiting in the spool or queue", s.QueuedBatches},
			{"tsdht_pmu_spool_torn_bytes", "bytes cut from torn spool tails at start", s.SpoolTornBytes},
			{"tsdht_pmu_missed_frames", "frames skipped by a jump in time (gaps: lost datagrams, outages), less those that came late", s.MissedFrames},
			{"tsdht_pmu_late_frames_total", "frames older than the newest (out of order); stored", s.LateFrames},
			{"tsdht_pmu_duplicate_frames_total", "frames received twice; stored again with the same values", s.DuplicateFrames},
			{"tsdht_pmu_cfg3_errors_total", "CFG-3 frames or fragments refused, unfinished CFG-3s abandoned", s.Cfg3Errors},
		} {
			typ := "counter"
			if !strings.HasSuffix(m.name, "_total") {
				typ = "gauge"
			}
			fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n%s %d\n", m.name, m.help, m.name, typ, m.name, m.v)
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		w.Write([]byte(b.String()))
	})
}
