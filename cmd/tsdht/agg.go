package main

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// rangeFlags are --from and --to, which take relative times too.
func rangeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "from", Required: true, Usage: "start of the range (inclusive): ns since the epoch, RFC 3339, a date (2026-11-27), or relative: now, now-5m, -1h, -7d, today, yesterday"},
		&cli.StringFlag{Name: "to", Required: true, Usage: "end of the range (exclusive): ns since the epoch, RFC 3339, a date (2026-11-27), or relative: now, now-5m, -1h, today, yesterday"},
	}
}

// parseRange reads --from and --to against one now.
func parseRange(c *cli.Context, now time.Time) (from, to int64, err error) {
	if from, err = parseTimeFlag(c.String("from"), now); err != nil {
		return 0, 0, badFlag("--from: %w", err)
	}
	if to, err = parseTimeFlag(c.String("to"), now); err != nil {
		return 0, 0, badFlag("--to: %w", err)
	}
	if from > to {
		return 0, 0, badFlag("--from %d is after --to %d: ranges are [from, to)", from, to)
	}
	return from, to, nil
}

// parseWidth parses a positive duration: Go's syntax (1m, 250ms, 1h30m) or whole days
// (1d), or integer nanoseconds.
func parseWidth(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n <= 0 {
			return 0, fmt.Errorf("window width %q must be positive", s)
		}
		return n, nil
	}
	d, err := parseOffset("+" + s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("window width %q: want a positive duration such as 1m, 10s, 1h or 1d", s)
	}
	return int64(d), nil
}

func aggCommand() *cli.Command {
	return &cli.Command{
		Name:  "agg",
		Usage: "aggregate a series per window: one line per non-empty window, computed where the data lives",
		Description: "Windows are aligned to multiples of --every since the epoch (InfluxDB's GROUP BY time(D) with no\n" +
			"offset). csv prints a header \"time,<fn>,…\" then one line per window holding points, ascending;\n" +
			"time is the window's start in ns. Functions: mean, min, max, count, sum, first, last, stddev\n" +
			"(sample, n−1), spread (max−min); string series have count, first and last. An undefined value\n" +
			"(stddev of one point) is empty in csv and null in json.",
		Flags: append(append(rangeFlags(), selectionFlags("aggregate")...),
			clusterFlag, timeoutFlag, clusterKeyFlag,
			&cli.StringFlag{Name: "every", Required: true, Usage: "window width: 1m, 10s, 250ms, 1h, 1d, or ns"},
			&cli.StringFlag{Name: "fn", Value: "mean,min,max,count", Usage: "functions, comma-separated: mean,min,max,count,sum,first,last,stddev,spread"},
			&cli.StringFlag{Name: "format", Value: "csv", Usage: "output: csv or json"},
			&cli.IntFlag{Name: "read-quorum", Usage: "replicas that must agree a shard is empty (default: the node's)"},
			&cli.BoolFlag{Name: "allow-partial", Usage: "print what could be read when some shard has no reachable replica (exit status 3)"},
		),
		Action: runAgg,
	}
}

func runAgg(c *cli.Context) error {
	multi, err := selectsMany(c, "aggregate")
	if err != nil {
		return err
	}
	key := ""
	if !multi {
		var err error
		if key, err = seriesKey(c); err != nil {
			return err
		}
	}
	from, to, err := parseRange(c, time.Now())
	if err != nil {
		return err
	}
	every, err := parseWidth(c.String("every"))
	if err != nil {
		return badFlag("--every: %w", err)
	}
	fns, err := agg.ParseFns(c.String("fn"))
	if err != nil {
		return badFlag("--fn: %w", err)
	}
	format := c.String("format")
	if format != "csv" && format != "json" {
		return badFlag("--format %q: want csv or json", format)
	}
	client, err := dialCluster(c)
	if err != nil {
		return err
	}
	defer client.Close()
	opt := wire.GetOptions{ReadQuorum: c.Int("read-quorum"), AllowPartial: c.Bool("allow-partial")}
	if multi {
		return aggMatch(c, client, from, to, every, fns, format, opt)
	}

	w := bufio.NewWriterSize(os.Stdout, 1<<16)
	out := newAggWriter(w, format, key, every, fns)
	prog := newProgress("agg")
	partial, missing := false, 0
	err = client.AggWindows(c.Context, key, from, to, every, opt,
		func(res wire.AggResult) error {
			for _, fn := range fns {
				if !agg.Supports(fn, res.Type) {
					return fmt.Errorf("--fn %s: series %q holds %s values; string series have count, first and last", fn, key, res.Type)
				}
			}
			partial = partial || res.Partial
			missing += res.Missing
			for i := range res.Windows {
				if err := out.window(&res.Windows[i]); err != nil {
					return err
				}
			}
			return nil
		}, prog.update)
	prog.done()
	if err == nil {
		err = out.finish(partial)
	}
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		return err
	}
	if partial {
		return cli.Exit(fmt.Sprintf("tsdht: partial result: %d shards could not be read from any replica", missing), 3)
	}
	return nil
}

// aggWriter prints windows as they come: csv lines, or one JSON object whose windows
// array is written piece by piece.
type aggWriter struct {
	w      *bufio.Writer
	csv    *csv.Writer
	json   bool
	fns    []agg.Fn
	key    string
	every  int64
	record []string
	n      int
}

func newAggWriter(w *bufio.Writer, format, key string, every int64, fns []agg.Fn) *aggWriter {
	a := &aggWriter{w: w, json: format == "json", fns: fns, key: key, every: every, record: make([]string, len(fns)+1)}
	if !a.json {
		a.csv = csv.NewWriter(w)
		head := []string{"time"}
		for _, fn := range fns {
			head = append(head, fn.String())
		}
		_ = a.csv.Write(head)
	}
	return a
}

func (a *aggWriter) window(win *agg.Window) error {
	if !a.json {
		a.record[0] = strconv.FormatInt(win.Start, 10)
		for k, fn := range a.fns {
			a.record[k+1] = win.Eval(fn).String()
		}
		return a.csv.Write(a.record)
	}
	if a.n == 0 {
		a.open()
	} else {
		a.w.WriteByte(',')
	}
	a.n++
	a.w.WriteString(`{"time":`)
	a.w.WriteString(strconv.FormatInt(win.Start, 10))
	for _, fn := range a.fns {
		v := win.Eval(fn)
		var b []byte
		if v.Kind == series.Float { // NaN and ±Inf as strings, like get
			b, _ = jsonFloat(v.F).MarshalJSON()
		} else {
			b, _ = json.Marshal(v.Any())
		}
		fmt.Fprintf(a.w, ",%q:%s", fn.String(), b)
	}
	a.w.WriteByte('}')
	return nil
}

// open writes the JSON object's head, up to the windows array's bracket.
func (a *aggWriter) open() {
	fns := make([]string, len(a.fns))
	for k, fn := range a.fns {
		fns[k] = fn.String()
	}
	head, _ := json.Marshal(map[string]any{"series": a.key, "every": a.every, "fns": fns})
	a.w.Write(head[:len(head)-1]) // leave the object open
	a.w.WriteString(`,"windows":[`)
}

func (a *aggWriter) finish(partial bool) error {
	if !a.json {
		a.csv.Flush()
		return a.csv.Error()
	}
	if a.n == 0 {
		a.open()
	}
	fmt.Fprintf(a.w, "],\"partial\":%v}\n", partial)
	return nil
}

// progress reports on stderr how far a long command has come, once a second after
// its first second; short commands print nothing.
type progress struct {
	what  string
	start time.Time
	last  time.Time
	shown bool
	out   io.Writer
}

func newProgress(what string) *progress {
	now := time.Now()
	return &progress{what: what, start: now, last: now, out: os.Stderr}
}

func (p *progress) update(done, total int64) {
	now := time.Now()
	if now.Sub(p.start) < time.Second || now.Sub(p.last) < time.Second || total <= 0 {
		return
	}
	p.last, p.shown = now, true
	fmt.Fprintf(p.out, "tsdht %s: %.0f%% of the range after %.1fs\n", p.what, 100*float64(done)/float64(total), now.Sub(p.start).Seconds())
}

func (p *progress) done() {
	if p.shown {
		fmt.Fprintf(p.out, "tsdht %s: done in %.1fs\n", p.what, time.Since(p.start).Seconds())
	}
}

// aggMatch aggregates every series --match/--prefix selects: csv as
// "key,time,<fn>,…" lines (series by key, windows ascending), json as one array of
// {"series", "type", "windows"} objects.
func aggMatch(c *cli.Context, cl *client.Client, from, to, every int64, fns []agg.Fn, format string, opt wire.GetOptions) error {
	match, err := matchTags(c)
	if err != nil {
		return err
	}
	results, err := cl.AggMatch(c.Context, match, c.String("prefix"), from, to, every, opt)
	if err != nil {
		return err
	}
	for _, r := range results {
		for _, fn := range fns {
			if !agg.Supports(fn, r.Result.Type) {
				return fmt.Errorf("--fn %s: series %q holds %s values; string series have count, first and last", fn, r.Entry.Key, r.Result.Type)
			}
		}
	}
	w := bufio.NewWriterSize(os.Stdout, 1<<16)
	missing := 0
	if format == "json" {
		type jsonWindow map[string]any
		type jsonAgg struct {
			Series  string       `json:"series"`
			Type    string       `json:"type"`
			Partial bool         `json:"partial"`
			Windows []jsonWindow `json:"windows"`
		}
		all := make([]jsonAgg, 0, len(results))
		for _, r := range results {
			ja := jsonAgg{Series: r.Entry.Key, Type: r.Result.Type.String(), Partial: r.Result.Partial, Windows: []jsonWindow{}}
			for i := range r.Result.Windows {
				win := &r.Result.Windows[i]
				jw := jsonWindow{"time": win.Start}
				for _, fn := range fns {
					if v := win.Eval(fn); v.Kind == series.Float {
						jw[fn.String()] = jsonFloat(v.F)
					} else {
						jw[fn.String()] = v.Any()
					}
				}
				ja.Windows = append(ja.Windows, jw)
			}
			missing += r.Result.Missing
			all = append(all, ja)
		}
		err = json.NewEncoder(w).Encode(all)
	} else {
		cw := csv.NewWriter(w)
		head := []string{"key", "time"}
		for _, fn := range fns {
			head = append(head, fn.String())
		}
		_ = cw.Write(head)
		rec := make([]string, len(head))
		for _, r := range results {
			for i := range r.Result.Windows {
				win := &r.Result.Windows[i]
				rec[0], rec[1] = r.Entry.Key, strconv.FormatInt(win.Start, 10)
				for k, fn := range fns {
					rec[k+2] = win.Eval(fn).String()
				}
				_ = cw.Write(rec)
			}
			missing += r.Result.Missing
		}
		cw.Flush()
		err = cw.Error()
	}
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		return err
	}
	if missing > 0 {
		return cli.Exit(fmt.Sprintf("tsdht: partial result: %d shards could not be read from any replica", missing), 3)
	}
	return nil
}
