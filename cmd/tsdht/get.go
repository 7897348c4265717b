package main

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

func getCommand() *cli.Command {
	return &cli.Command{
		Name:  "get",
		Usage: "read the points of a series with from <= timestamp < to",
		Flags: append(selectionFlags("read"),
			clusterFlag, timeoutFlag, clusterKeyFlag,
			&cli.StringFlag{Name: "from", Required: true, Usage: "start of the range (inclusive): ns since the epoch, RFC 3339, a date (2026-11-27), or relative: now, now-5m, -1h, today, yesterday"},
			&cli.StringFlag{Name: "to", Required: true, Usage: "end of the range (exclusive): ns since the epoch, RFC 3339, a date (2026-11-27), or relative: now, now-5m, -1h, today, yesterday"},
			&cli.StringFlag{Name: "format", Value: "csv", Usage: "output: csv (timestamp,value lines) or json"},
			&cli.StringFlag{Name: "time-format", Value: "ns", Usage: "output timestamps as ns (integer nanoseconds since the epoch) or rfc3339 (UTC, nanosecond fraction)"},
			&cli.IntFlag{Name: "read-quorum", Usage: "replicas that must agree a shard is empty (default: the node's)"},
			&cli.BoolFlag{Name: "allow-partial", Usage: "print what could be read when some shard has no reachable replica (exit status 3)"},
		),
		Action: runGet,
	}
}

func runGet(c *cli.Context) error {
	multi, err := selectsMany(c, "read")
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
	now := time.Now()
	from, err := parseTimeFlag(c.String("from"), now)
	if err != nil {
		return badFlag("--from: %w", err)
	}
	to, err := parseTimeFlag(c.String("to"), now)
	if err != nil {
		return badFlag("--to: %w", err)
	}
	if from > to {
		return usagef(c, "--from %d is after --to %d: ranges are [from, to)", from, to)
	}
	format := c.String("format")
	if format != "csv" && format != "json" {
		return usagef(c, "--format %q: want csv or json", format)
	}
	tf := c.String("time-format")
	if tf != "ns" && tf != "rfc3339" {
		return usagef(c, "--time-format %q: want ns or rfc3339", tf)
	}
	stamp := func(t int64) string { return strconv.FormatInt(t, 10) }
	if tf == "rfc3339" {
		stamp = func(t int64) string { return time.Unix(0, t).UTC().Format(time.RFC3339Nano) }
	}
	client, err := dialCluster(c)
	if err != nil {
		return err
	}
	defer client.Close()
	if from, to, err = checkSpan(c, client, key, from, to); err != nil {
		return err
	}
	opt := wire.GetOptions{ReadQuorum: c.Int("read-quorum"), AllowPartial: c.Bool("allow-partial")}
	if multi {
		return getMatch(c, from, to, format, opt)
	}
	var res wire.Result
	var entry *catalog.Entry
	if format == "json" {
		var e catalog.Entry
		res, e, err = client.GetEntry(c.Context, key, from, to, opt)
		entry = &e
	} else {
		res, err = client.Get(c.Context, key, from, to, opt)
	}
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(os.Stdout, 1<<16)
	if format == "json" {
		err = json.NewEncoder(w).Encode(seriesJSON(key, res, entry, tf == "rfc3339"))
	} else {
		err = writeCSV(w, &res.Points, stamp)
	}
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		return err
	}
	if res.Partial {
		return cli.Exit(fmt.Sprintf("tsdht: partial result: %d shards could not be read from any replica", res.Missing), 3)
	}
	return nil
}

func writeCSV(w *bufio.Writer, p *series.Points, stamp func(int64) string) error {
	cw := csv.NewWriter(w)
	for i := range p.T {
		if p.Type == series.String {
			if err := cw.Write([]string{stamp(p.T[i]), p.S[i]}); err != nil {
				return err
			}
			continue
		}
		w.WriteString(stamp(p.T[i]))
		w.WriteByte(',')
		w.WriteString(p.Value(i))
		w.WriteByte('\n')
	}
	cw.Flush()
	return cw.Error()
}

type jsonPoint struct {
	T any `json:"t"` // int64 ns, or an RFC 3339 string with --time-format rfc3339
	V any `json:"v"`
}

// jsonSeries is one series as get --format json prints it: its catalog entry and its
// points, read in one round trip.
type jsonSeries struct {
	Series  string      `json:"series"`
	Type    string      `json:"type"`
	Count   int         `json:"count"`
	Partial bool        `json:"partial"`
	Entry   *jsonEntry  `json:"entry,omitempty"`
	Points  []jsonPoint `json:"points"`
}

func seriesJSON(key string, res wire.Result, e *catalog.Entry, rfc3339 bool) jsonSeries {
	p := &res.Points
	out := jsonSeries{Series: key, Type: p.Type.String(), Count: p.Len(), Partial: res.Partial, Points: make([]jsonPoint, p.Len())}
	if e != nil && e.Key != "" {
		je := entryJSON(e)
		out.Entry = &je
		if p.Len() == 0 {
			out.Type = e.Type.String()
		}
	}
	for i := range p.T {
		v := jsonValue(p, i)
		var t any = p.T[i]
		if rfc3339 {
			t = time.Unix(0, p.T[i]).UTC().Format(time.RFC3339Nano)
		}
		out.Points[i] = jsonPoint{T: t, V: v}
	}
	return out
}

// getMatch reads every series --match/--prefix selects: csv as key,timestamp,value
// lines, json as one array of series.
func getMatch(c *cli.Context, from, to int64, format string, opt wire.GetOptions) error {
	match, err := matchTags(c)
	if err != nil {
		return err
	}
	cl, err := dialCluster(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	results, err := cl.GetMatch(c.Context, match, c.String("prefix"), from, to, opt)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(os.Stdout, 1<<16)
	partial := 0
	if format == "json" {
		all := make([]jsonSeries, len(results))
		for i := range results {
			all[i] = seriesJSON(results[i].Entry.Key, results[i].Result, &results[i].Entry, c.String("time-format") == "rfc3339")
			partial += results[i].Result.Missing
		}
		err = json.NewEncoder(w).Encode(all)
	} else {
		for i := range results {
			if err = writeMatchCSV(w, results[i].Entry.Key, &results[i].Result.Points); err != nil {
				break
			}
			partial += results[i].Result.Missing
		}
	}
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		return err
	}
	if partial > 0 {
		return cli.Exit(fmt.Sprintf("tsdht: partial result: %d shards could not be read from any replica", partial), 3)
	}
	return nil
}

// jsonValue is point i's value as json output carries it.
func jsonValue(p *series.Points, i int) any {
	switch p.Type {
	case series.Float:
		return jsonFloat(p.F[i])
	case series.Int:
		return p.I[i]
	default:
		return p.S[i]
	}
}

// jsonFloat prints NaN and ±Inf, which JSON numbers cannot hold, as strings.
type jsonFloat float64

func (f jsonFloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if v != v || v > 1.7976931348623157e308 || v < -1.7976931348623157e308 {
		return json.Marshal(strconv.FormatFloat(v, 'g', -1, 64))
	}
	return []byte(strconv.FormatFloat(v, 'g', -1, 64)), nil
}

// checkSpan refuses, before any read, a range longer than a read may cover
// (quanta.MaxQuantaPerRange quanta) once narrowed to the series' bounds (key; none with
// --match): `--from 0 --to now` of a series reads only where it has points, while a
// series spanning more than the limit would otherwise be read window by window for
// minutes. Only a range past the bound for the shortest quantum asks the cluster for its
// bounds and its quantum. It returns the range to read.
func checkSpan(c *cli.Context, cl *client.Client, key string, from, to int64) (int64, int64, error) {
	long := func() bool {
		span := to - from
		return span < 0 || span > quanta.MaxQuantaPerRange*int64(time.Second) // < 0: overflowed
	}
	if !long() {
		return from, to, nil
	}
	if key != "" {
		var err error
		if from, to, err = cl.Clamp(c.Context, key, from, to); err != nil {
			return 0, 0, err
		}
		if !long() {
			return from, to, nil
		}
	}
	span := to - from
	if span < 0 {
		span = math.MaxInt64
	}
	q := int64(quanta.DefaultQuantum / time.Second)
	if nodes, err := cl.Status(c.Context); err == nil {
		for _, n := range nodes {
			if n.Reachable && n.Quantum > 0 {
				q = n.Quantum
				break
			}
		}
	}
	limit := quanta.MaxQuantaPerRange * q * int64(time.Second)
	if span <= limit {
		return from, to, nil
	}
	return 0, 0, usagef(c, "--from %s --to %s spans %s; one read covers at most %d quanta (%s with this cluster's %d s quanta): narrow it, e.g. --from -1h --to now",
		c.String("from"), c.String("to"), humanSpan(span), quanta.MaxQuantaPerRange, humanSpan(limit), q)
}

// humanSpan prints a long duration in days or years.
func humanSpan(ns int64) string {
	days := float64(ns) / float64(24*time.Hour)
	if days >= 730 {
		return fmt.Sprintf("%.0f years", days/365.25)
	}
	return fmt.Sprintf("%.0f days", days)
}
