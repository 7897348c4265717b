package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
)

// benchReportCommand turns the JSON lines of bench runs into the Markdown report of
// docs/bench, with the paper's figures beside ours, and into data files for a plot.
func benchReportCommand() *cli.Command {
	return &cli.Command{
		Name:      "report",
		Usage:     "render bench --json results (files or stdin) as Markdown beside the paper's Tables I and II",
		ArgsUsage: "[RESULTS.jsonl…]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "title", Value: "tsdht against the paper", Usage: "the report's heading"},
			&cli.StringFlag{Name: "machine", Usage: "what the results were measured on (default: not stated)"},
			&cli.StringFlag{Name: "setup", Usage: "a paragraph on how the cluster was run"},
			// Not a StringSliceFlag: that splits values at commas, and commands have them.
			&cli.GenericFlag{Name: "command", Value: &verbatimList{}, Usage: "the command(s) that produced the results, shown verbatim; repeat for several"},
			&cli.StringFlag{Name: "plot", Usage: "also write gnuplot data: PREFIX-write.dat and PREFIX-read.dat"},
			&cli.IntFlag{Name: "level", Value: 1, Usage: "the heading level of the title (its tables one deeper): 2 makes the report a section of a longer document"},
			&cli.BoolFlag{Name: "no-paper-note", Usage: "leave out the paragraph on how the paper measured (a longer document states it once)"},
		},
		Action: runBenchReport,
	}
}

// paperNote says how the paper measured, whose figures reports set beside tsdht's.
const paperNote = "The paper: Krentz, Dubey, Karsai, *Towards an Edge-Located Time-Series Database*, §V — 18 BeagleBone Blacks " +
	"(1 GHz Cortex-A8), Go net/rpc over HTTP with gob, in-memory store, one flat switched network."

// benchRecord is any bench result, as decoded from its JSON line.
type benchRecord struct {
	caseInfo
	write  *writeResult
	read   *readResult
	ingest *ingestResult
	query  *queryResult
}

func readRecords(r io.Reader, out []benchRecord) ([]benchRecord, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || !strings.HasPrefix(line, "{") {
			continue
		}
		var rec benchRecord
		if err := json.Unmarshal([]byte(line), &rec.caseInfo); err != nil {
			return nil, fmt.Errorf("%q: %w", line, err)
		}
		var err error
		switch rec.Bench {
		case "write":
			rec.write = new(writeResult)
			err = json.Unmarshal([]byte(line), rec.write)
		case "read":
			rec.read = new(readResult)
			err = json.Unmarshal([]byte(line), rec.read)
		case "ingest":
			rec.ingest = new(ingestResult)
			err = json.Unmarshal([]byte(line), rec.ingest)
		case "dashboard", "year", "dense":
			rec.query = new(queryResult)
			err = json.Unmarshal([]byte(line), rec.query)
		default:
			err = fmt.Errorf("unknown bench %q", rec.Bench)
		}
		if err != nil {
			return nil, fmt.Errorf("%q: %w", line, err)
		}
		out = append(out, rec)
	}
	return out, sc.Err()
}

func runBenchReport(c *cli.Context) error {
	var recs []benchRecord
	var err error
	if c.NArg() == 0 {
		recs, err = readRecords(os.Stdin, nil)
	}
	for _, path := range c.Args().Slice() {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		recs, err = readRecords(f, recs)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	if err != nil {
		return err
	}
	if len(recs) == 0 {
		return fmt.Errorf("no bench results in the input")
	}
	level := c.Int("level")
	if level < 1 || level > 5 {
		return fmt.Errorf("--level %d: want 1..5", level)
	}
	title, section := strings.Repeat("#", level), strings.Repeat("#", level+1)
	w := bufio.NewWriter(c.App.Writer)
	fmt.Fprintf(w, "%s %s\n\n", title, c.String("title"))
	if m := c.String("machine"); m != "" {
		fmt.Fprintf(w, "Measured on %s.\n\n", m)
	}
	if s := c.String("setup"); s != "" {
		fmt.Fprintf(w, "%s\n\n", s)
	}
	if cmds := *c.Generic("command").(*verbatimList); len(cmds) > 0 {
		fmt.Fprintf(w, "```sh\n%s\n```\n\n", strings.Join(cmds, "\n"))
	}
	if !c.Bool("no-paper-note") {
		fmt.Fprintf(w, "%s\n\n", paperNote)
	}

	var writes, reads, ingests []benchRecord
	queries := map[string][]*queryResult{}
	for _, r := range recs {
		switch r.Bench {
		case "write":
			writes = append(writes, r)
		case "read":
			reads = append(reads, r)
		case "ingest":
			ingests = append(ingests, r)
		default:
			queries[r.Bench] = append(queries[r.Bench], r.query)
		}
	}
	if len(writes) > 0 {
		fmt.Fprintf(w, "%s Table I — single-point write, ms per write\n\n", section)
		fmt.Fprintf(w, "One writer issues single-point writes one after another. *Floor*: a bare request/response to the write's "+
			"remote replicas in parallel over the same persistent TCP connections, with no DHT and no store, measured in "+
			"the same run. *w*: replicas that acknowledge before the write returns.\n\n")
		fmt.Fprintf(w, "*Bare* (with --local): the same round over plain TCP to plain Go echo servers, 16 bytes, no rpc layer. "+
			"*Rebuilt* (with --paper): the paper's design rebuilt (internal/paperdht: net/rpc over HTTP, gob, in-memory hashmap) "+
			"on as many nodes, same rf and quorum, writes interleaved with tsdht's.\n\n")
		fmt.Fprintf(w, "| format | rf | w | paper | tsdht mean | p50 | p99 | floor mean | floor p50 | × floor (mean) | × floor (p50) | bare mean | bare p50 | × bare (mean) | × bare (p50) | rebuilt mean | rebuilt p50 | rebuilt ÷ tsdht | paper ÷ tsdht | writes | nodes | store, sync |\n")
		fmt.Fprintf(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
		for _, rec := range writes {
			r := rec.write
			fl := "| — | — | — | —"
			if f := r.FloorLatency; f != nil {
				fl = fmt.Sprintf("| %.3f | %.3f | %.2f× | %.2f×", f.Mean, f.P50, f.Ratio, f.RatioP50)
			}
			bare := "| — | — | — | —"
			if b := r.BareLatency; b != nil {
				bare = fmt.Sprintf("| %.3f | %.3f | %.2f× | %.2f×", b.Mean, b.P50, b.Ratio, b.RatioP50)
			}
			rebuilt := "| — | — | —"
			if rb := r.RebuiltLatency; rb != nil {
				how := ""
				if rb.Lookup {
					how = " (lookup)"
				}
				rebuilt = fmt.Sprintf("| %.3f%s | %.3f | %.1f×", rb.Mean, how, rb.P50, rb.Speedup)
			}
			fmt.Fprintf(w, "| %s | %d | %d | %s | %.3f | %.3f | %.3f %s %s %s | %s | %d | %d | %s, %s |\n",
				strings.ToUpper(r.IDFormat), r.RF, r.WriteQuorum, paperCell(r.PaperMs, 2), r.timing.Mean, r.timing.P50,
				r.timing.P99, fl, bare, rebuilt, speedup(r.PaperMs, r.timing.Mean), r.Count, r.Nodes, r.Store, r.Sync)
		}
		fmt.Fprintln(w)
	}
	if len(reads) > 0 {
		fmt.Fprintf(w, "%s Table II — read of the latest history from another node, ms per read\n\n", section)
		fmt.Fprintf(w, "One series written at 60 Hz; another node reads the latest span, trimmed exactly (the paper padded to "+
			"whole quanta). Every read returned exactly the points asked for (checked). *Cold*: the first read of the span.\n\n")
		fmt.Fprintf(w, "*Replicas*: which of each shard's replicas a read asks — all of them (the default), or a read quorum "+
			"chosen to ask few nodes (`--read-quorum-only`). *÷ shortest*: the mean over the mean of the shortest span of "+
			"the same format, replicas and values in this table. *Values*: float64 (full precision, noise in every bit: "+
			"about 8 bytes a point on the wire) or float32 (readings as a C37.118 PMU sends them: about 4).\n\n")
		fmt.Fprintf(w, "| format | replicas | values | span | quanta | points returned | paper | tsdht mean | p50 | p99 | cold | ÷ shortest | paper ÷ tsdht | reads | rf | nodes | store, sync |\n")
		fmt.Fprintf(w, "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
		for _, r := range reads {
			x := r.read
			fmt.Fprintf(w, "| %s | %s | %s | %s | %d | %d | %s | %.3f | %.3f | %.3f | %.3f | %s | %s | %d | %d | %d | %s, %s |\n",
				strings.ToUpper(x.IDFormat), replicasRead(x.ReadQuorumOnly), valuesName(x.Values), spanName(x.SpanS), x.Quanta, x.Returned,
				paperCell(x.PaperMs, 0), x.Mean, x.P50, x.P99, x.ColdMs, overShortest(x, reads), speedup(x.PaperMs, x.Mean),
				x.Reads, x.RF, x.Nodes, x.Store, x.Sync)
		}
		fmt.Fprintln(w)
	}
	if len(ingests) > 0 {
		fmt.Fprintf(w, "%s Ingest — concurrent 60 Hz series in batches\n\n", section)
		fmt.Fprintf(w, "| format | rf | nodes | series | batch | backfill s | seconds | points | points/s | batch mean ms | p50 | p99 | node skew | store, sync |\n")
		fmt.Fprintf(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
		for _, r := range ingests {
			x := r.ingest
			fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %.0f | %.1f | %d | %.0f | %.2f | %.2f | %.2f | %.2f | %s, %s |\n",
				strings.ToUpper(x.IDFormat), x.RF, x.Nodes, x.Series, x.Batch, x.BackfillS, x.Seconds, x.Points, x.PointsPerS,
				x.Mean, x.P50, x.P99, x.NodeSkew, x.Store, x.Sync)
		}
		fmt.Fprintln(w)
	}
	first := true
	for _, kind := range []string{"dashboard", "year", "dense"} {
		if len(queries[kind]) > 0 {
			writeQueryTables(w, section, kind, queries[kind], first)
			first = false
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if prefix := c.String("plot"); prefix != "" {
		return writePlotData(prefix, writes, reads)
	}
	return nil
}

// replicasRead names which replicas of each shard a read asked.
func replicasRead(quorumOnly bool) string {
	if quorumOnly {
		return "read quorum"
	}
	return "all"
}

// valuesName names what a read's values were; float64 for results that predate the
// field.
func valuesName(v string) string {
	if v == "" {
		return "float64"
	}
	return v
}

// overShortest returns x's mean over that of the shortest span measured in the same
// case (format, rf, nodes, replicas read), as "2.9×", or "—" for the shortest itself.
func overShortest(x *readResult, reads []benchRecord) string {
	var short *readResult
	for _, r := range reads {
		y := r.read
		if y.IDFormat == x.IDFormat && y.RF == x.RF && y.Nodes == x.Nodes && y.ReadQuorumOnly == x.ReadQuorumOnly &&
			y.Target == x.Target && valuesName(y.Values) == valuesName(x.Values) && (short == nil || y.SpanS < short.SpanS) {
			short = y
		}
	}
	if short == nil || short == x || short.SpanS == x.SpanS || short.Mean == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f×", x.Mean/short.Mean)
}

func paperCell(ms float64, prec int) string {
	if ms == 0 {
		return "—"
	}
	return fmt.Sprintf("%.*f", prec, ms)
}

func speedup(paper, ours float64) string {
	if paper == 0 || ours == 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f×", paper/ours)
}

func spanName(s int) string {
	switch {
	case s%86400 == 0:
		return fmt.Sprintf("%d d", s/86400)
	case s%3600 == 0:
		return fmt.Sprintf("%d h", s/3600)
	}
	return fmt.Sprintf("%d s", s)
}

// writePlotData writes one row per case: label, the paper's figure (or "?"), ours, and
// for writes the floor, all in ms, for gnuplot's clustered histograms.
func writePlotData(prefix string, writes, reads []benchRecord) error {
	var wb, rb strings.Builder
	fmt.Fprintf(&wb, "# case paper_ms tsdht_mean_ms floor_mean_ms\n")
	for _, rec := range writes {
		r := rec.write
		floor := "?"
		if r.FloorLatency != nil {
			floor = fmt.Sprintf("%g", r.FloorLatency.Mean)
		}
		fmt.Fprintf(&wb, "\"%s rf%d\" %s %g %s\n", strings.ToUpper(r.IDFormat), r.RF, plotNum(r.PaperMs), r.timing.Mean, floor)
	}
	fmt.Fprintf(&rb, "# case paper_ms tsdht_mean_ms\n")
	for _, rec := range reads {
		r := rec.read
		label := strings.ToUpper(r.IDFormat) + " " + spanName(r.SpanS)
		if r.ReadQuorumOnly {
			label += " rq"
		}
		if r.Values == "float32" {
			label += " f32"
		}
		fmt.Fprintf(&rb, "\"%s\" %s %g\n", label, plotNum(r.PaperMs), r.Mean)
	}
	if err := os.WriteFile(prefix+"-write.dat", []byte(wb.String()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(prefix+"-read.dat", []byte(rb.String()), 0o644)
}

func plotNum(v float64) string {
	if v == 0 {
		return "?"
	}
	return fmt.Sprintf("%g", v)
}

// verbatimList collects every value of a repeated flag as given.
type verbatimList []string

func (v *verbatimList) Set(s string) error { *v = append(*v, s); return nil }
func (v *verbatimList) String() string     { return strings.Join(*v, "\n") }
