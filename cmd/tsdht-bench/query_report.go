package main

import (
	"bufio"
	"fmt"
	"strings"
)

// queryWorkloads names and describes the workloads of `tsdht-bench query` for reports.
var queryWorkloads = map[string][2]string{
	"dashboard": {"Dashboard — 8 hosts × 2 fields, a point a minute, the InfluxQL Grafana sends",
		"cpu,dc=dc1,host=h0..h7 usage=…,idle=…, one line a minute per host for the days ending when the load began; " +
			"each query over the last day and the whole span (`time >= now() - span`), as Grafana's `$timeFilter` puts it; " +
			"then the catalog queries Grafana sends as a dashboard opens (its variables) and as a query is edited, with no span."},
	"year": {"One series, a point a minute, for a year",
		"power,meter=m0 v=…, one line a minute for the days ending when the load began; the raw values, the mean per day " +
			"and the last value over the whole span."},
	"dense": {"Dense — 24 float32 channels at 60 Hz",
		"pmu,ch=c00..c23 v=… (float32 readings), 60 frames a second for the hours ending when the load began; the window " +
			"is the data's own (absolute times), since the load takes minutes. VictoriaMetrics is asked in MetricsQL: " +
			"`aggr_over_time` for the per-minute statistics (not compared: its windows are (t-1m, t], InfluxQL's [t, t+1m)), " +
			"`/api/v1/export` for the raw values, `last_over_time` for the last values. The raw reads, over 10 s to an hour, " +
			"are also made through tsdht's Go client against the same node (tsdht-client, `client.Get`): what the HTTP door " +
			"adds to a read. The totals are of the HTTP systems."},
}

// writeQueryTables renders the records of one workload: the loads through /write, then
// every query on every system; first, for the first workload of a report, how to read
// them.
func writeQueryTables(w *bufio.Writer, section, kind string, recs []*queryResult, first bool) {
	fmt.Fprintf(w, "%s %s\n\n%s\n\n", section, queryWorkloads[kind][0], queryWorkloads[kind][1])
	if first {
		fmt.Fprintf(w, "Each query ran once to warm up, then *runs* times on each system in turn. *× InfluxDB*: the mean over "+
			"InfluxDB's (below 1 is faster). *Equal*: the warm-up answer against InfluxDB's, values within a relative 1e-9, "+
			"times exact; rows at the edge of a `now() - span` window, which moved between the two queries, are not "+
			"compared; all-null rows (empty windows) are left out. *Total*: the queries every system answered.\n\n")
	}
	var loads []*queryResult
	for _, r := range recs {
		if r.Name == "load" {
			loads = append(loads, r)
		}
	}
	if len(loads) > 0 {
		fmt.Fprintf(w, "| load through /write | points | seconds | points/s |\n|---|--:|--:|--:|\n")
		for _, r := range loads {
			fmt.Fprintf(w, "| %s | %d | %.2f | %.0f |\n", systemName(r), r.Points, r.Seconds, r.PointsPerS)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "| query | span | system | mean ms | min ms | × InfluxDB | equal | rows | runs |\n")
	fmt.Fprintf(w, "|---|---|---|--:|--:|--:|---|--:|--:|\n")
	last := ""
	for _, r := range recs {
		if r.Name == "load" {
			continue
		}
		// A query's text once, on the first of its systems' rows.
		q := ""
		if r.Query+r.Span != last {
			q = "`" + strings.ReplaceAll(r.Query, "|", `\|`) + "`"
			if r.Name == "total" {
				q = fmt.Sprintf("**total** (%d queries)", r.Queries)
			}
		}
		last = r.Query + r.Span
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %d | %d |\n", q, r.Span, systemName(r), msCell(r, r.MeanMs),
			msCell(r, r.MinMs), ratioCell(r.VsInfluxDB), equalCell(r), r.Rows, r.Runs)
	}
	fmt.Fprintln(w)
}

func systemName(r *queryResult) string {
	switch {
	case r.Nodes == 1:
		return r.System + ", 1 node"
	case r.Nodes > 1:
		return fmt.Sprintf("%s, %d nodes", r.System, r.Nodes)
	}
	return r.System
}

func msCell(r *queryResult, ms *float64) string {
	switch {
	case ms != nil:
		return fmt.Sprintf("%.1f", *ms)
	case r.Timeout:
		return "timed out"
	case r.Error != "":
		return "failed"
	}
	return "—"
}

func ratioCell(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf("%.2f×", *v)
}

// equalCell says whether the answer was InfluxDB's, with the first difference or the
// error where there is one.
func equalCell(r *queryResult) string {
	short := func(s string) string {
		s = strings.ReplaceAll(s, "|", `\|`)
		if len(s) > 120 {
			s = s[:120] + "…"
		}
		return s
	}
	switch {
	case r.Error != "" && r.Equal == nil:
		return "error: " + short(r.Error)
	case r.Equal == nil && r.Comparison != "":
		return short(r.Comparison)
	case r.Equal == nil:
		return "—"
	case *r.Equal:
		return "yes"
	case r.Mismatch != "":
		return "**no**: " + short(r.Mismatch)
	}
	return "**no**"
}
