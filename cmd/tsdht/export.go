package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/export"
	"github.com/tsdht/tsdht/httpapi"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// export and import: docs/export.md.

func exportCommand() *cli.Command {
	return &cli.Command{
		Name:  "export",
		Usage: "write the points of series to stdout as line protocol (lp), csv or VictoriaMetrics' JSON lines",
		Description: "Selects series as get does (--series, --match k=v, --prefix P) and streams [from, to) of each,\n" +
			"read window by window: memory stays bounded whatever the range holds. lp is influx_inspect export's\n" +
			"layout (# DDL, # DML, # CONTEXT-DATABASE), for series written as line protocol; csv is\n" +
			"\"key,type,time,value\" lines under that header; jsonl is one {\"metric\",\"values\",\"timestamps\"}\n" +
			"object per series and window, timestamps in --time-unit (milliseconds, as VictoriaMetrics counts).\n" +
			"`tsdht import` reads each format back into equal keys and points. A summary goes to stderr,\n" +
			"and progress too when stderr is a terminal.",
		Flags: append(append(exportSelection(), rangeFlags()...),
			clusterFlag, timeoutFlag, clusterKeyFlag,
			&cli.StringFlag{Name: "format", Value: "csv", Usage: "output: lp, csv or jsonl"},
			&cli.StringFlag{Name: "time-unit", Value: "ms", Usage: "jsonl's unit of timestamps: s, ms, us or ns (a point that is not a whole unit is refused, never rounded)"},
		),
		Action: runExport,
	}
}

// exportSelection is get's --series, --match and --prefix, said of an export.
func exportSelection() []cli.Flag {
	fs := selectionFlags("export")
	for _, f := range fs {
		if m, ok := f.(*cli.StringSliceFlag); ok {
			m.Usage = "k=v[,k=v…]: export every series carrying these tags"
		}
	}
	return fs
}

func runExport(c *cli.Context) error {
	multi, err := selectsMany(c, "export")
	if err != nil {
		return err
	}
	from, to, err := parseRange(c, time.Now())
	if err != nil {
		return err
	}
	f, err := export.ParseFormat(c.String("format"))
	if err != nil {
		return badFlag("--format: %w", err)
	}
	unit, err := export.TimeUnit(c.String("time-unit"))
	if err != nil {
		return badFlag("--time-unit: %w", err)
	}
	var key string
	if !multi {
		if key, err = seriesKey(c); err != nil {
			return err
		}
	}
	match, err := matchTags(c)
	if err != nil {
		return err
	}
	cl, err := dialCluster(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	var es []catalog.Entry
	if multi {
		es, err = cl.Series(c.Context, match, c.String("prefix"))
	} else {
		es, err = exactSeries(c.Context, cl, key)
	}
	if err != nil {
		return err
	}
	ss := make([]export.Series, len(es))
	for i, e := range es {
		ss[i] = export.Series{Key: e.Key, Type: e.Type, Tags: e.Tags}
	}
	w, err := export.NewWriter(os.Stdout, f, export.Options{TimeUnit: unit})
	if err != nil {
		return err
	}
	start := time.Now()
	prog := newTTYProgress("export")
	st, err := export.Export(c.Context, clientSource{cl}, ss, from, to, w, func(s export.Stats) {
		prog.show("%d points of %d/%d series", s.Points, s.Series, len(ss))
	})
	prog.clear()
	if err != nil {
		return fmt.Errorf("%w (exported %d points before that)", err, st.Points)
	}
	secs := time.Since(start).Seconds()
	fmt.Fprintf(os.Stderr, "tsdht export: %d points of %d series in %.2fs (%.0f points/s)\n", st.Points, st.Series, secs, float64(st.Points)/secs)
	return nil
}

// exactSeries returns the catalog entry of key, or an unknown-series error with the
// catalog's nearest keys.
func exactSeries(ctx context.Context, cl *client.Client, key string) ([]catalog.Entry, error) {
	es, err := cl.Series(ctx, nil, key)
	if err != nil {
		return nil, err
	}
	for _, e := range es {
		if e.Key == key {
			return []catalog.Entry{e}, nil
		}
	}
	// The command's wrapper (suggestFor) adds the catalog's nearest keys.
	return nil, &rpc.RemoteError{Code: wire.CodeUnknownSeries, Msg: fmt.Sprintf("unknown series %q", key)}
}

// clientSource is an export.Source over the cluster client.
type clientSource struct{ cl *client.Client }

func (s clientSource) Counts(ctx context.Context, key string, from, to, every int64, fn func(start, count int64) error) error {
	return s.cl.AggWindows(ctx, key, from, to, every, wire.GetOptions{}, func(r wire.AggResult) error {
		for i := range r.Windows {
			if err := fn(r.Windows[i].Start, r.Windows[i].Count); err != nil {
				return err
			}
		}
		return nil
	}, nil)
}

func (s clientSource) Read(ctx context.Context, key string, from, to int64) (series.Points, error) {
	res, err := s.cl.Get(ctx, key, from, to, wire.GetOptions{})
	return res.Points, err
}

func importCommand() *cli.Command {
	return &cli.Command{
		Name:      "import",
		Usage:     "write the series of a file (or stdin) exported as lp, csv or jsonl into the cluster",
		ArgsUsage: "[FILE|-]",
		Description: "lp takes `influx_inspect export` output as it comes (# DDL / # DML sections, # CONTEXT-DATABASE\n" +
			"lines; gzip-compressed too) and names series exactly as HTTP /write with that db does; --db names\n" +
			"the database of lines before any # CONTEXT-DATABASE line. csv and jsonl are what `tsdht export`\n" +
			"writes; jsonl also takes VictoriaMetrics' /api/v1/export output (series named as Prometheus remote\n" +
			"write names them). Without --format the format is told from the first line. The input is read\n" +
			"and stored in batches (bounded memory); the first line that cannot be read stops the import,\n" +
			"named by its number, with what was stored before it kept. A summary goes to stderr, and\n" +
			"progress too when stderr is a terminal.",
		Flags: []cli.Flag{
			clusterFlag, timeoutFlag, clusterKeyFlag,
			&cli.StringFlag{Name: "format", Usage: "input: lp, csv or jsonl (default: told from the first line)"},
			&cli.StringFlag{Name: "db", Usage: "lp: database of lines before any # CONTEXT-DATABASE line"},
			&cli.StringFlag{Name: "time-unit", Value: "ms", Usage: "jsonl's unit of timestamps: s, ms, us or ns"},
		},
		Action: runImport,
	}
}

func runImport(c *cli.Context) error {
	if c.NArg() > 1 {
		return usagef(c, "one input: FILE or - (stdin), got %d", c.NArg())
	}
	var f export.Format
	if s := c.String("format"); s != "" {
		var err error
		if f, err = export.ParseFormat(s); err != nil {
			return badFlag("--format: %w", err)
		}
	}
	unit, err := export.TimeUnit(c.String("time-unit"))
	if err != nil {
		return badFlag("--time-unit: %w", err)
	}
	var in io.Reader = os.Stdin
	name := "stdin"
	if p := c.Args().First(); p != "" && p != "-" {
		file, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("import: %w", err)
		}
		defer file.Close()
		in, name = file, p
	}
	br := bufio.NewReaderSize(in, 1<<16)
	if head, _ := br.Peek(2); len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("%s: gzip: %w", name, err)
		}
		defer gz.Close()
		br = bufio.NewReaderSize(gz, 1<<16)
	}
	if f == "" {
		f = sniffFormat(br)
	}
	rd, err := export.NewReader(br, f, export.Options{TimeUnit: unit, DB: c.String("db")})
	if err != nil {
		return err
	}
	cl, err := dialCluster(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	start := time.Now()
	prog := newTTYProgress("import")
	st, err := export.Import(c.Context, rd, &clientSink{cl: cl, tagged: map[string]bool{}}, func(s export.ImportStats) {
		prog.show("%d points from %d lines, %.0f points/s", s.Points, s.Lines, float64(s.Points)/time.Since(start).Seconds())
	})
	prog.clear()
	if err != nil {
		return fmt.Errorf("%s: %w (stored %d points before that)", name, err, st.Points)
	}
	secs := time.Since(start).Seconds()
	fmt.Fprintf(os.Stderr, "tsdht import: %d points from %d lines of %s (%s) in %.2fs (%.0f points/s)\n", st.Points, st.Lines, name, f, secs, float64(st.Points)/secs)
	return nil
}

// sniffFormat tells the format of an import from its first non-blank line: '{' is
// jsonl, csv export's header csv, anything else line protocol.
func sniffFormat(br *bufio.Reader) export.Format {
	head, _ := br.Peek(4096)
	head = bytes.TrimLeft(head, " \t\r\n")
	switch {
	case bytes.HasPrefix(head, []byte("{")):
		return export.JSONL
	case bytes.HasPrefix(head, []byte("key,type,time,value")):
		return export.CSV
	}
	return export.LP
}

// importOptions are those of every write of an import: as through HTTP /write, a new
// series' quantum fits the rate of the points of its first batch (a series already
// written keeps its own).
var importOptions = wire.PutOptions{FitQuanta: true, Quantum: httpapi.UnknownRateQuantum}

// importConcurrency bounds the series of one batch written at once.
const importConcurrency = 8

// clientSink is an export.Sink over the cluster client: each series' points, then —
// once per series and import — its tags into its catalog entry, as /write does.
type clientSink struct {
	cl     *client.Client
	mu     sync.Mutex
	tagged map[string]bool
}

func (s *clientSink) Write(ctx context.Context, ws []export.Write) (int64, error) {
	var (
		mu     sync.Mutex
		stored int64
		wg     sync.WaitGroup
	)
	errs := make([]error, len(ws))
	slots := make(chan struct{}, importConcurrency)
	for i := range ws {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			n, err := s.cl.Put(ctx, ws[i].Key, ws[i].Pts, importOptions)
			mu.Lock()
			stored += int64(n)
			mu.Unlock()
			if err == nil {
				err = s.tag(ctx, ws[i].Key, ws[i].Tags)
			}
			if err != nil {
				errs[i] = fmt.Errorf("series %q: %w", ws[i].Key, err)
			}
		}()
	}
	wg.Wait()
	return stored, errors.Join(errs...)
}

// tag records tags in the series' catalog entry the first time the import meets it.
func (s *clientSink) tag(ctx context.Context, key string, tags map[string]string) error {
	s.mu.Lock()
	done := s.tagged[key]
	s.tagged[key] = true
	s.mu.Unlock()
	if done || len(tags) == 0 {
		return nil
	}
	_, err := s.cl.Meta(ctx, *wire.TagsMeta(key, tags))
	return err
}

// ttyProgress rewrites one status line on stderr, at most once a second, when stderr
// is a terminal; elsewhere it prints nothing.
type ttyProgress struct {
	what  string
	on    bool
	last  time.Time
	shown bool
}

func newTTYProgress(what string) *ttyProgress {
	return &ttyProgress{what: what, on: isatty.IsTerminal(os.Stderr.Fd()), last: time.Now()}
}

func (p *ttyProgress) show(format string, args ...any) {
	if !p.on || time.Since(p.last) < time.Second {
		return
	}
	p.last, p.shown = time.Now(), true
	fmt.Fprintf(os.Stderr, "\r\033[Ktsdht %s: %s", p.what, fmt.Sprintf(format, args...))
}

func (p *ttyProgress) clear() {
	if p.shown {
		fmt.Fprint(os.Stderr, "\r\033[K")
	}
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}
