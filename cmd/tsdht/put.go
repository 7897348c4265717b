package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// putBatch is how many parsed points put sends at once: big enough to amortise a round
// trip, small enough that a bad line late in a stream finds most points acknowledged.
const putBatch = 10_000

// plausibleFrom is the earliest integer timestamp put accepts without --any-time: no
// deployment of tsdht measured anything before 1990, and epoch seconds or milliseconds
// read as nanoseconds land in January 1970.
var plausibleFrom = time.Date(1990, 1, 1, 0, 0, 0, 0, time.UTC)

// plausibleAhead is how far past the local clock an integer timestamp may be without
// --any-time: a day covers clock skew; nanoseconds read as microseconds land centuries on.
const plausibleAhead = 24 * time.Hour

func putCommand() *cli.Command {
	return &cli.Command{
		Name:  "put",
		Usage: `write points read from stdin, one "timestamp,value" per line (or a wide CSV: "time,a,b,c")`,
		Description: "Timestamps are integers in --time-unit since the epoch (default ns), RFC 3339, or relative\n" +
			"(now, now-5m, -90s). An integer timestamp that lands before 1990-01-01 or more than a day after\n" +
			"this machine's clock is refused, naming the line and the unit that would fit (--any-time accepts it).\n" +
			"Values are floats unless --type says otherwise. Strings need --type string: without it a value that is\n" +
			"not a number is refused, so a typo (6O.1) cannot make a new series a string series for good. Strings\n" +
			"containing commas or quotes are CSV-quoted. Blank lines and lines starting with # are skipped.\n" +
			"Wide CSV: a header line whose first field is \"time\" or \"timestamp\" followed by column names, or\n" +
			"--columns a,b,c with no header, writes one series per column, named --series-prefix + column;\n" +
			"empty cells are skipped.\n" +
			"On a bad line, put stops, reports the line and how many points were stored, and exits 1.",
		Flags: []cli.Flag{
			clusterFlag, timeoutFlag, clusterKeyFlag,
			&cli.StringFlag{Name: "series", Usage: "series key, 1–256 bytes of UTF-8 (for two-column input)"},
			&cli.StringFlag{Name: "type", Usage: "value type: float, int or string (default: float; strings need --type string)"},
			&cli.IntFlag{Name: "write-quorum", Usage: "replicas that must store each shard (default: the node's)"},
			&cli.StringFlag{Name: "quantum", Usage: "quantum length of a new series, 1s..7d (its first write fixes it; a series already written keeps its own), or \"fit\" to choose it from the rate of the points (default: the cluster's)"},
			&cli.StringFlag{Name: "time-unit", Value: "ns", Usage: "unit of integer timestamps: s, ms, us or ns"},
			&cli.BoolFlag{Name: "any-time", Usage: "accept integer timestamps before 1990 or more than a day ahead"},
			&cli.StringFlag{Name: "columns", Usage: "names of the value columns of a wide CSV without a header, a,b,c"},
			&cli.StringFlag{Name: "series-prefix", Usage: "wide CSV: series key = this prefix + column name"},
		},
		Action: runPut,
	}
}

// timeUnits maps --time-unit to nanoseconds per unit, in the order put suggests them.
var timeUnits = []struct {
	name string
	ns   int64
}{{"s", 1e9}, {"ms", 1e6}, {"us", 1e3}, {"ns", 1}}

func unitNanos(name string) (int64, bool) {
	for _, u := range timeUnits {
		if u.name == name {
			return u.ns, true
		}
	}
	return 0, false
}

// timeParser turns one CSV timestamp field into nanoseconds.
type timeParser struct {
	unit     string
	perUnit  int64
	anyTime  bool
	now      time.Time
	from, to int64 // plausible range of integer timestamps, ns
}

func newTimeParser(unit string, anyTime bool, now time.Time) (*timeParser, error) {
	per, ok := unitNanos(unit)
	if !ok {
		return nil, fmt.Errorf("--time-unit %q: want s, ms, us or ns", unit)
	}
	return &timeParser{unit: unit, perUnit: per, anyTime: anyTime, now: now,
		from: plausibleFrom.UnixNano(), to: now.Add(plausibleAhead).UnixNano()}, nil
}

func (p *timeParser) parse(s string) (int64, error) {
	s = strings.TrimSpace(s)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return parseTimeFlag(s, p.now)
	}
	ns := n * p.perUnit
	overflow := p.perUnit != 1 && ns/p.perUnit != n
	if !overflow && (p.anyTime || (ns >= p.from && ns <= p.to)) {
		return ns, nil
	}
	msg := fmt.Sprintf("timestamp %s read as %s since the epoch is %s, implausible (before 1990 or more than a day ahead)",
		s, unitWord(p.unit), time.Unix(0, ns).UTC().Format(time.RFC3339))
	if overflow {
		msg = fmt.Sprintf("timestamp %s read as %s is out of range (int64 nanoseconds: years 1677–2262)", s, unitWord(p.unit))
	}
	for _, u := range timeUnits {
		if m := n * u.ns; m/u.ns == n && m >= p.from && m <= p.to {
			msg += fmt.Sprintf("; it looks like %s: try --time-unit %s", unitWord(u.name), u.name)
			break
		}
	}
	return 0, errors.New(msg + " (--any-time stores it as it is)")
}

func unitWord(u string) string {
	switch u {
	case "s":
		return "epoch seconds"
	case "ms":
		return "epoch milliseconds"
	case "us":
		return "epoch microseconds"
	}
	return "epoch nanoseconds"
}

// column is one series being written: its key, type and the points not yet sent.
type column struct {
	key string
	typ series.Type
	buf series.Points
}

func runPut(c *cli.Context) error {
	var typ series.Type
	var err error
	if s := c.String("type"); s != "" {
		if typ, err = series.ParseType(s); err != nil {
			return usagef(c, "--type: %v", err)
		}
	}
	tp, err := newTimeParser(c.String("time-unit"), c.Bool("any-time"), time.Now())
	if err != nil {
		return usagef(c, "%v", err)
	}
	opt := wire.PutOptions{WriteQuorum: c.Int("write-quorum")}
	if s := c.String("quantum"); s == "fit" {
		opt.FitQuanta = true
	} else if s != "" {
		d, err := time.ParseDuration(strings.Replace(s, "d", "h", 1))
		if strings.HasSuffix(s, "d") && err == nil {
			d *= 24
		}
		q, qerr := quanta.NewQuantum(d)
		if err != nil || qerr != nil || q > quanta.MaxQuantum {
			return usagef(c, "--quantum %q: want a duration from 1s to 7d (10m, 6h, 1d) or \"fit\"", s)
		}
		opt.Quantum = q
	}
	prefix := c.String("series-prefix")
	var cols []*column // nil until the first record decides the shape of the input
	newCols := func(names []string) error {
		seen := map[string]bool{}
		for _, name := range names {
			key := prefix + strings.TrimSpace(name)
			if err := series.ValidateKey(key); err != nil {
				return fmt.Errorf("column %q: series %q: %w", name, key, err)
			}
			if seen[key] {
				return fmt.Errorf("column %q appears twice", name)
			}
			seen[key] = true
			cols = append(cols, &column{key: key, typ: typ})
		}
		return nil
	}
	if s := c.String("columns"); s != "" {
		if err := newCols(strings.Split(s, ",")); err != nil {
			return usagef(c, "--columns: %v", err)
		}
	} else if c.IsSet("series") {
		key, err := seriesKey(c)
		if err != nil {
			return usagef(c, "%v", err)
		}
		cols = []*column{{key: key, typ: typ}}
	}
	if c.IsSet("series") && c.IsSet("columns") {
		return usagef(c, "--series names one series; --columns names several (with --series-prefix): give one")
	}

	cl, err := dialCluster(c)
	if err != nil {
		return err
	}
	defer cl.Close()

	stored, pending, waited := 0, 0, int64(0)
	flush := func() error {
		for _, col := range cols {
			if col.buf.Len() == 0 {
				continue
			}
			r, err := cl.PutReport(c.Context, col.key, col.buf, opt)
			stored += r.Stored
			waited += r.WaitedMillis
			col.buf = series.Points{}
			if err != nil {
				return fmt.Errorf("series %q: %w", col.key, err)
			}
		}
		pending = 0
		return nil
	}
	fail := func(err error) error {
		return fmt.Errorf("%w (stored %s before that)", err, storedWhat(stored, cols))
	}

	r := csv.NewReader(os.Stdin)
	r.FieldsPerRecord = -1
	r.Comment = '#'
	r.ReuseRecord = true
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		line, _ := r.FieldPos(0)
		if err != nil {
			if flushErr := flush(); flushErr != nil {
				return fail(flushErr)
			}
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				line = pe.Line
			}
			return fail(fmt.Errorf("stdin line %d: %v", line, err))
		}
		if line == 1 && len(rec) >= 2 && isTimeHeader(rec[0]) {
			if cols == nil {
				if len(rec) == 2 {
					return usagef(c, "stdin has one value column %q: name its series with --series, or give --series-prefix", rec[1])
				}
				if err := newCols(rec[1:]); err != nil {
					return fail(fmt.Errorf("stdin line 1 (header): %v", err))
				}
			}
			continue // a header
		}
		if cols == nil {
			return usagef(c, "missing --series (or a header line \"time,a,b\", or --columns a,b)")
		}
		if err := appendRow(cols, tp, rec, &pending); err != nil {
			if flushErr := flush(); flushErr != nil {
				return fail(flushErr)
			}
			return fail(fmt.Errorf("stdin line %d: %v", line, err))
		}
		if pending >= putBatch {
			if err := flush(); err != nil {
				return fail(err)
			}
		}
	}
	if err := flush(); err != nil {
		return fail(err)
	}
	msg := "stored " + storedWhat(stored, cols)
	if waited > 0 {
		msg += fmt.Sprintf(" (after waiting %.1f s for the cluster to notice failed nodes)", float64(waited)/1000)
	}
	fmt.Fprintln(os.Stderr, msg)
	return nil
}

func isTimeHeader(s string) bool {
	s = strings.ToLower(strings.TrimSpace(s))
	return s == "time" || s == "timestamp"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

func storedWhat(n int, cols []*column) string {
	if len(cols) == 1 {
		return fmt.Sprintf("%s of series %q", plural(n, "point", "points"), cols[0].key)
	}
	keys := make([]string, len(cols))
	for i, c := range cols {
		keys[i] = c.key
	}
	sort.Strings(keys)
	return fmt.Sprintf("%s in %s (%s)", plural(n, "point", "points"), plural(len(cols), "series", "series"), strings.Join(keys, ", "))
}

// appendRow parses one "timestamp,v1,v2…" record into the columns' buffers.
func appendRow(cols []*column, tp *timeParser, rec []string, pending *int) error {
	if len(rec) != len(cols)+1 {
		if len(cols) == 1 {
			return fmt.Errorf("want 2 fields \"timestamp,value\", got %d", len(rec))
		}
		return fmt.Errorf("want %d fields (timestamp and %d columns), got %d", len(cols)+1, len(cols), len(rec))
	}
	t, err := tp.parse(rec[0])
	if err != nil {
		return err
	}
	for i, col := range cols {
		v := rec[i+1]
		if len(cols) > 1 && strings.TrimSpace(v) == "" {
			continue
		}
		if err := appendValue(&col.buf, &col.typ, t, v); err != nil {
			if len(cols) > 1 {
				return fmt.Errorf("column %q: %v", col.key, err)
			}
			return err
		}
		*pending++
	}
	return nil
}

// appendValue parses one value into b. Without --type the input is floats: a value that
// is not a number is refused with a message naming --type string, since the first write
// of a series fixes its type for good.
func appendValue(b *series.Points, typ *series.Type, t int64, v string) error {
	switch *typ {
	case series.Unknown:
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return fmt.Errorf("value %q is not a number: to write strings pass --type string "+
				"(a series' first write fixes its type for good, so put never guesses it)", v)
		}
		b.AppendFloat(t, f)
	case series.Float:
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return fmt.Errorf("value %q is not a float (this input is a float series)", v)
		}
		b.AppendFloat(t, f)
	case series.Int:
		i, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return fmt.Errorf("value %q is not an int64 (this input is an int series)", v)
		}
		b.AppendInt(t, i)
	case series.String:
		if len(v) > series.MaxStringValueLen {
			return fmt.Errorf("string value of %d bytes; at most %d allowed", len(v), series.MaxStringValueLen)
		}
		b.AppendString(t, v)
	}
	return nil
}
