package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/internal/latency"
	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// benchQueryCommand times the queries a dashboard sends to systems that speak
// InfluxDB 1.x's /query (tsdht with --http, InfluxDB 1.x) or the Prometheus HTTP API
// (VictoriaMetrics), already loaded with the same lines (httpapi/internal/lpsend), and
// checks that they answer alike. scripts/bench-dashboard starts the systems, loads
// them and runs it.
func benchQueryCommand() *cli.Command {
	return &cli.Command{
		Name:  "query",
		Usage: "time a dashboard's queries against running HTTP servers (tsdht --http, InfluxDB 1.x, VictoriaMetrics) and compare their answers",
		Description: "Each query runs once to warm up and then --runs times on every --target in turn, round by round,\n" +
			"and every answer is compared with the first influxdb target's (values within a relative 1e-9,\n" +
			"times exact). Prints one JSON object per (system, query) on stdout, then one per system with\n" +
			"the total of the queries every system answered; progress on stderr. The data is what\n" +
			"httpapi/internal/lpsend -workload sends (dashboard, meter for --workload year, dense).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "workload", Value: "dashboard", Usage: "dashboard, year or dense"},
			&cli.StringSliceFlag{Name: "target", Usage: "SYSTEM[:NODES]=URL, one per system, e.g. tsdht:3=http://127.0.0.1:8086; SYSTEM influxdb is the one the others are compared with, victoriametrics is asked in MetricsQL; URL rpc://HOST:PORT asks a tsdht node's RPC address through the Go client, the raw reads only"},
			&cli.StringFlag{Name: "db", Usage: "database (default: the workload's name)"},
			&cli.IntFlag{Name: "days", Value: 7, Usage: "dashboard, year: days the data spans (the dashboard's longest span; year: 365)"},
			&cli.Float64Flag{Name: "hours", Value: 24, Usage: "dense: hours the data spans"},
			&cli.Int64Flag{Name: "end", Usage: "dense: the data's last time in ns since the epoch, as given to lpsend -end (truncated to the minute the same way)"},
			&cli.IntFlag{Name: "runs", Value: 5, Usage: "timed runs of each query on each system, after one to warm up"},
			&cli.DurationFlag{Name: "timeout", Value: 2 * time.Minute, Usage: "per query; a system that takes longer is reported as timed out for that query and not asked it again"},
		},
		Action: runBenchQuery,
	}
}

// queryResult is one JSON line of `tsdht-bench query`: one query on one system.
type queryResult struct {
	Bench    string `json:"bench"` // the workload: dashboard, year or dense
	System   string `json:"system"`
	Nodes    int    `json:"nodes,omitempty"`
	Name     string `json:"name"`
	Language string `json:"language,omitempty"` // influxql or metricsql
	Query    string `json:"query"`
	Span     string `json:"span,omitempty"`
	Runs     int    `json:"runs"`
	// MeanMs and MinMs are over the timed runs that answered; null when none did.
	MeanMs *float64 `json:"mean_ms"`
	MinMs  *float64 `json:"min_ms"`
	Rows   int      `json:"rows"`
	Points int      `json:"points"`
	Series int      `json:"series,omitempty"`
	// Equal says whether the answer is InfluxDB's; null for InfluxDB itself and where
	// the two cannot be compared (Comparison says why).
	Equal      *bool  `json:"equal"`
	Compared   int    `json:"compared_rows,omitempty"`
	EdgeRows   int    `json:"edge_rows_skipped,omitempty"`
	Mismatch   string `json:"mismatch,omitempty"`
	Comparison string `json:"comparison,omitempty"`
	// VsInfluxDB is MeanMs over InfluxDB's for the same query: below 1 is faster.
	VsInfluxDB *float64 `json:"vs_influxdb,omitempty"`
	Timeout    bool     `json:"timeout,omitempty"`
	Error      string   `json:"error,omitempty"`
	Queries    int      `json:"queries,omitempty"` // the total's: how many queries it sums
	// Seconds and PointsPerS are a load's (name "load", written by
	// scripts/bench-dashboard from lpsend's result).
	Seconds    float64 `json:"seconds,omitempty"`
	PointsPerS float64 `json:"points_per_s,omitempty"`
}

// A benchQuery is one query of a workload, in InfluxQL and, where VictoriaMetrics has
// one, in MetricsQL.
type benchQuery struct {
	name, span, influxql string
	// relative: the InfluxQL's window is now() - span, whose left edge moves while the
	// systems are asked in turn; every is its GROUP BY time() window (0: none).
	relative bool
	spanDur  time.Duration
	every    time.Duration
	prom     *promQuery
	get      *getQuery
}

// getQuery is a benchQuery as tsdht's Go client asks it: one series' points with
// from <= t < to (ns), the raw read the InfluxQL asks over /query.
type getQuery struct {
	field    string // the series' key without its database: "pmu,ch=c00#v"
	from, to int64
}

func (g *getQuery) text(db string) string {
	return fmt.Sprintf("client.Get(%q, %d, %d)", db+"/"+g.field, g.from, g.to)
}

// promQuery is a benchQuery as VictoriaMetrics is asked it.
type promQuery struct {
	path   string // /api/v1/export, /api/v1/query or /api/v1/query_range
	params url.Values
	// cmp is how its answer is compared with InfluxDB's; nil when they cannot be.
	cmp *comparison
	// why says how it differs from the InfluxQL, or why it is not compared.
	why string
}

func (p *promQuery) text() string {
	if m := p.params.Get("match[]"); m != "" {
		return p.path + " match[]=" + m
	}
	return p.params.Get("query")
}

// workloadQueries returns the queries of a workload over data of the given days
// (dashboard, year) or hours ending at end (dense).
func workloadQueries(workload string, days int, hours float64, end time.Time) ([]benchQuery, error) {
	rel := func(name, span, every, q string) benchQuery {
		d, _ := time.ParseDuration(strings.Replace(span, "d", "h", 1))
		if strings.HasSuffix(span, "d") {
			d *= 24
		}
		e, _ := time.ParseDuration(strings.Replace(every, "d", "h", 1))
		if strings.HasSuffix(every, "d") {
			e *= 24
		}
		return benchQuery{name: name, span: span, relative: true, spanDur: d, every: e,
			influxql: strings.ReplaceAll(q, "$t", "time >= now() - "+span)}
	}
	var qs []benchQuery
	switch workload {
	case "dashboard":
		if days < 1 {
			return nil, fmt.Errorf("--days %d: the dashboard needs at least 1", days)
		}
		spans := []string{"1d"}
		if days > 1 {
			spans = append(spans, strconv.Itoa(days)+"d")
		}
		for _, s := range spans {
			qs = append(qs,
				rel("mean per hour per host", s, "1h", `SELECT mean("usage") FROM "cpu" WHERE $t GROUP BY time(1h), "host"`),
				rel("one host's values", s, "", `SELECT "usage" FROM "cpu" WHERE "host" = 'h3' AND $t`),
				rel("last per host", s, "", `SELECT last("usage") FROM "cpu" WHERE $t GROUP BY "host"`),
				rel("mean per day", s, "1d", `SELECT mean("usage") FROM "cpu" WHERE $t GROUP BY time(1d)`))
			if s == "1d" {
				qs = append(qs, rel("every field", s, "", `SELECT * FROM "cpu" WHERE $t`))
			}
			qs = append(qs, rel("max, min per 10 min", s, "10m", `SELECT max("usage"), min("idle") FROM "cpu" WHERE $t GROUP BY time(10m)`))
		}
		// What Grafana asks as a dashboard opens (its variables) and as a panel's query
		// is edited: the catalog, with no time range.
		for _, q := range []string{`SHOW TAG VALUES WITH KEY = "host"`, `SHOW TAG VALUES FROM "cpu" WITH KEY = "host" WHERE "dc" = 'dc1'`,
			`SHOW MEASUREMENTS`, `SHOW TAG KEYS FROM "cpu"`, `SHOW FIELD KEYS FROM "cpu"`} {
			qs = append(qs, benchQuery{name: "catalog", span: "—", influxql: q})
		}
	case "year":
		if days < 1 {
			return nil, fmt.Errorf("--days %d: the year needs at least 1", days)
		}
		s := strconv.Itoa(days) + "d"
		qs = append(qs,
			rel("raw", s, "", `SELECT "v" FROM "power" WHERE $t`),
			rel("mean per day", s, "1d", `SELECT mean("v") FROM "power" WHERE $t GROUP BY time(1d)`),
			rel("last", s, "", `SELECT last("v") FROM "power" WHERE $t`))
	case "dense":
		if end.IsZero() || hours < 1.0/60 {
			return nil, fmt.Errorf("dense needs --end (the data's last time, as given to lpsend) and --hours of at least a minute")
		}
		// The load takes minutes, so a window relative to now() would miss the data's
		// end: the dense queries name the data's own span, as Grafana does for an
		// absolute range.
		end = end.Truncate(time.Minute)
		span := time.Duration(hours * float64(time.Hour))
		abs := func(name string, d time.Duration, q string, p *promQuery) benchQuery {
			t := fmt.Sprintf("time >= %dms AND time <= %dms", end.Add(-d).UnixMilli(), end.UnixMilli())
			return benchQuery{name: name, span: durationName(d), influxql: strings.ReplaceAll(q, "$t", t), spanDur: d, prom: p}
		}
		secs := func(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64) }
		qs = append(qs,
			abs("mean, min, max per minute of one channel", span,
				`SELECT mean("v"), min("v"), max("v") FROM "pmu" WHERE "ch" = 'c00' AND $t GROUP BY time(1m)`,
				&promQuery{path: "/api/v1/query_range", params: url.Values{
					"query": {`aggr_over_time(("avg_over_time", "min_over_time", "max_over_time"), pmu_v{ch="c00"}[1m])`},
					"start": {secs(end.Add(-span))}, "end": {secs(end)}, "step": {"60s"}},
					why: "not compared: MetricsQL's windows are (t-1m, t], InfluxQL's [t, t+1m)"}),
			abs("last of every channel", span, `SELECT last("v") FROM "pmu" WHERE $t GROUP BY "ch"`,
				&promQuery{path: "/api/v1/query", params: url.Values{
					"query": {fmt.Sprintf("last_over_time(pmu_v[%ds])", int(span.Seconds()))}, "time": {secs(end)}},
					cmp: &comparison{ignoreCols: true, ignoreTime: true}, why: "values compared per channel; an instant query's time is the query's"}))
		// One channel's raw values over spans from a control app's few seconds to an
		// hour, as each system's export or client reads them.
		for _, raw := range []time.Duration{10 * time.Second, time.Minute, 10 * time.Minute, time.Hour} {
			if raw > span {
				break
			}
			q := abs("one channel's values", raw, `SELECT "v" FROM "pmu" WHERE "ch" = 'c00' AND $t`,
				&promQuery{path: "/api/v1/export", params: url.Values{
					"match[]": {`pmu_v{ch="c00"}`}, "start": {secs(end.Add(-raw))}, "end": {secs(end)}},
					cmp: &comparison{ignoreGroup: true, ignoreCols: true}, why: "times and values compared"})
			// The InfluxQL's window holds its end: the client's ends just after it.
			q.get = &getQuery{field: "pmu,ch=c00#v", from: end.Add(-raw).UnixMilli() * 1e6, to: end.UnixMilli()*1e6 + 1}
			qs = append(qs, q)
		}
	default:
		return nil, fmt.Errorf("--workload %q: want dashboard, year or dense", workload)
	}
	return qs, nil
}

func durationName(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}

// queryTarget is one system asked: over HTTP, or through tsdht's Go client when url
// is rpc://HOST:PORT (a node's RPC address; asked only the queries with a getQuery).
type queryTarget struct {
	system, url string
	nodes       int
	client      *client.Client
}

func (t queryTarget) label() string {
	if t.nodes > 0 {
		return fmt.Sprintf("%s-%d", t.system, t.nodes)
	}
	return t.system
}

func parseTargets(specs []string) ([]queryTarget, error) {
	if len(specs) == 0 {
		return nil, errors.New("no --target: name at least one, SYSTEM[:NODES]=URL")
	}
	var ts []queryTarget
	for _, s := range specs {
		name, u, ok := strings.Cut(s, "=")
		if !ok || !strings.HasPrefix(u, "http") && !strings.HasPrefix(u, "rpc://") {
			return nil, fmt.Errorf("--target %q: want SYSTEM[:NODES]=http://HOST:PORT, or rpc://HOST:PORT for tsdht's Go client", s)
		}
		t := queryTarget{system: name, url: strings.TrimRight(u, "/")}
		if addr, ok := strings.CutPrefix(u, "rpc://"); ok {
			c, err := client.New([]string{addr}, client.Config{})
			if err != nil {
				return nil, fmt.Errorf("--target %q: %v", s, err)
			}
			t.client = c
		}
		if sys, n, ok := strings.Cut(name, ":"); ok {
			nodes, err := strconv.Atoi(n)
			if err != nil || nodes < 1 {
				return nil, fmt.Errorf("--target %q: NODES %q is not a count of nodes", s, n)
			}
			t.system, t.nodes = sys, nodes
		}
		ts = append(ts, t)
	}
	return ts, nil
}

// outcome is what one system did with one query.
type outcome struct {
	ans        answer
	err        error
	timeout    bool
	skip       bool // the system has no form of the query
	asked, got time.Time
	times      []time.Duration
}

func runBenchQuery(c *cli.Context) error {
	targets, err := parseTargets(c.StringSlice("target"))
	if err != nil {
		return err
	}
	workload := c.String("workload")
	var end time.Time
	if ns := c.Int64("end"); ns != 0 {
		end = time.Unix(0, ns)
	}
	queries, err := workloadQueries(workload, c.Int("days"), c.Float64("hours"), end)
	if err != nil {
		return err
	}
	db := c.String("db")
	if db == "" {
		db = workload
	}
	runs, timeout := c.Int("runs"), c.Duration("timeout")
	if runs < 1 {
		return fmt.Errorf("--runs %d: want at least 1", runs)
	}
	base := -1
	for i, t := range targets {
		if t.system == "influxdb" {
			base = i
			break
		}
	}
	enc := json.NewEncoder(c.App.Writer)
	log := c.App.ErrWriter
	totals := make([]queryResult, len(targets))
	answeredByAll := 0
	for _, q := range queries {
		outs := askRounds(c.Context, log, workload, q, targets, db, runs, timeout)
		results := make([]queryResult, len(targets))
		all := true
		for i, t := range targets {
			o := &outs[i]
			if o.skip {
				// A Go client reads raw only: the totals are of the HTTP systems.
				all = all && t.client != nil
				fmt.Fprintf(log, "%s %s %q: %s has no form of it; not asked\n", workload, q.span, q.name, t.label())
				continue
			}
			r := o.result(workload, db, q, t)
			all = all && r.MeanMs != nil
			if base >= 0 && i != base {
				compareWithBase(&r, q, t, o, &outs[base])
			}
			results[i] = r
		}
		for i, r := range results {
			if r.Bench == "" {
				continue
			}
			if base >= 0 && r.MeanMs != nil && results[base].MeanMs != nil && i != base {
				r.VsInfluxDB = timesInfluxDB(*r.MeanMs, *results[base].MeanMs)
			}
			if err := enc.Encode(r); err != nil {
				return err
			}
			if all {
				addTotal(&totals[i], r)
			}
		}
		if all {
			answeredByAll++
		}
	}
	for i, t := range targets {
		if t.client != nil {
			continue // its reads are a few of the queries: no total
		}
		tot := totals[i]
		tot.Bench, tot.System, tot.Nodes, tot.Name, tot.Queries = workload, t.system, t.nodes, "total", answeredByAll
		tot.Query, tot.Runs = "the queries every system answered", runs
		if base >= 0 && i != base && tot.MeanMs != nil && totals[base].MeanMs != nil {
			tot.VsInfluxDB = timesInfluxDB(*tot.MeanMs, *totals[base].MeanMs)
		}
		if err := enc.Encode(tot); err != nil {
			return err
		}
	}
	return nil
}

// askRounds asks every target q once to warm up and then runs times, round by round,
// so that every system meets the machine's other work alike. A target that fails or
// times out is not asked again.
func askRounds(ctx context.Context, log io.Writer, workload string, q benchQuery, targets []queryTarget, db string,
	runs int, timeout time.Duration) []outcome {
	outs := make([]outcome, len(targets))
	for i, t := range targets {
		outs[i].skip = t.system == "victoriametrics" && q.prom == nil || t.client != nil && q.get == nil
	}
	for round := 0; round <= runs; round++ {
		for i, t := range targets {
			o := &outs[i]
			if o.err != nil || o.skip {
				continue
			}
			asked := time.Now()
			ans, took, err := askQuery(ctx, t, q, db, timeout)
			if err != nil {
				o.err, o.timeout = err, errors.Is(err, context.DeadlineExceeded)
				fmt.Fprintf(log, "%s %s %q on %s: %v\n", workload, q.span, q.name, t.label(), err)
				continue
			}
			if round == 0 {
				o.ans, o.asked, o.got = ans, asked, time.Now()
			} else {
				o.times = append(o.times, took)
			}
			fmt.Fprintf(log, "%s %s %q on %s, run %d/%d: %.1f ms, %d rows\n", workload, q.span, q.name, t.label(), round, runs,
				latency.Ms(took), len(ans))
		}
	}
	return outs
}

// result is what t did with q, without the comparison with InfluxDB.
func (o *outcome) result(workload, db string, q benchQuery, t queryTarget) queryResult {
	r := queryResult{Bench: workload, System: t.system, Nodes: t.nodes, Name: q.name, Language: "influxql",
		Query: q.influxql, Span: q.span, Runs: len(o.times), Timeout: o.timeout,
		Rows: len(o.ans), Points: o.ans.points(), Series: o.ans.series()}
	if t.system == "victoriametrics" {
		r.Language, r.Query, r.Comparison = "metricsql", q.prom.text(), q.prom.why
	}
	if t.client != nil {
		r.Language, r.Query, r.Comparison = "go", q.get.text(db), "times and values compared"
	}
	if o.err != nil {
		r.Error = o.err.Error()
	}
	if len(o.times) > 0 {
		r.MeanMs, r.MinMs = roundMs(latency.Mean(o.times)), roundMs(latency.Pct(o.times, 0))
	}
	return r
}

// addTotal adds r's times, counts and agreement to the total tot: equal while every
// answer compared was.
func addTotal(tot *queryResult, r queryResult) {
	if tot.MeanMs == nil {
		tot.MeanMs, tot.MinMs = new(float64), new(float64)
	}
	*tot.MeanMs = math.Round((*tot.MeanMs+*r.MeanMs)*1000) / 1000
	*tot.MinMs = math.Round((*tot.MinMs+*r.MinMs)*1000) / 1000
	tot.Rows += r.Rows
	tot.Points += r.Points
	if r.Equal != nil {
		eq := *r.Equal && (tot.Equal == nil || *tot.Equal)
		tot.Equal = &eq
	}
}

func roundMs(d time.Duration) *float64 {
	v := math.Round(latency.Ms(d)*1000) / 1000
	return &v
}

// timesInfluxDB returns a over InfluxDB's b, rounded to four places.
func timesInfluxDB(a, b float64) *float64 {
	v := math.Round(ratio(a, b)*1e4) / 1e4
	return &v
}

// compareWithBase sets r's Equal (and what it compared) from o's warm-up answer and
// the baseline's, when both answered it.
func compareWithBase(r *queryResult, q benchQuery, t queryTarget, o, base *outcome) {
	if o.asked.IsZero() || base.asked.IsZero() {
		return
	}
	cmp := comparison{}
	if t.system == "victoriametrics" {
		if q.prom.cmp == nil {
			return
		}
		cmp = *q.prom.cmp
	}
	if t.client != nil {
		cmp = comparison{ignoreGroup: true, ignoreCols: true}
	}
	if q.relative {
		// The two queries' now() lay somewhere between when each was asked and
		// answered; rows whose window meets that stretch, less the span, hold what
		// one window had and the other had not.
		lo := earlier(o.asked, base.asked).Add(-q.spanDur).UnixMilli()
		hi := later(o.got, base.got).Add(-q.spanDur).UnixMilli()
		every := q.every.Milliseconds()
		cmp.skip = func(row answerRow) bool { return row.ms+every >= lo && row.ms <= hi }
	}
	eq, compared, skipped, diff := cmp.compare(o.ans, base.ans)
	r.Equal, r.Compared, r.EdgeRows, r.Mismatch = &eq, compared, skipped, diff
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// askQuery sends q to t and returns its answer.
// askQuery asks one query and returns its answer and how long the system took to send
// it whole: from the request to the answer's last byte, not the parse here that follows
// (which costs the same for every system and would hide their differences).
func askQuery(ctx context.Context, t queryTarget, q benchQuery, db string, timeout time.Duration) (answer, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if t.client != nil {
		return askClient(ctx, t.client, q.get, db)
	}
	u := t.url + "/query?" + url.Values{"db": {db}, "epoch": {"ms"}, "q": {q.influxql}}.Encode()
	parse := parseInfluxQL
	if t.system == "victoriametrics" {
		u = t.url + q.prom.path + "?" + q.prom.params.Encode()
		parse = parsePromQuery
		if q.prom.path == "/api/v1/export" {
			parse = parsePromExport
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, err
	}
	asked := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	took := time.Since(asked)
	if err != nil {
		return nil, 0, err
	}
	ans, perr := parse(body)
	if resp.StatusCode != http.StatusOK {
		if perr == nil {
			perr = errors.New("no error in the body")
		}
		return nil, 0, fmt.Errorf("HTTP %d: %v", resp.StatusCode, perr)
	}
	return ans, took, perr
}

// askClient reads g through c and returns its points as the rows of an answer (one
// column, v), and how long the read took.
func askClient(ctx context.Context, c *client.Client, g *getQuery, db string) (answer, time.Duration, error) {
	asked := time.Now()
	res, err := c.Get(ctx, db+"/"+g.field, g.from, g.to, wire.GetOptions{})
	took := time.Since(asked)
	if err != nil {
		return nil, 0, err
	}
	pts := res.Points
	ans := make(answer, pts.Len())
	for i := range ans {
		var v any
		switch {
		case i < len(pts.F):
			v = pts.F[i]
		case i < len(pts.I):
			v = float64(pts.I[i])
		default:
			v = pts.S[i]
		}
		ans[i] = answerRow{ms: pts.T[i] / 1e6, cols: []string{"v"}, vals: []any{v}}
	}
	return ans, took, nil
}
