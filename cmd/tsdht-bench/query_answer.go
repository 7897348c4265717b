package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// An answer is a query's result reduced to what two systems must agree on: its rows,
// each the group it belongs to (the series' tags or labels, sorted; the measurement or
// metric name left out), its time in ms and its values. Rows whose every value is
// null (InfluxQL's fill(null) for an empty window) are left out: a dashboard draws a
// null and a missing row alike.
type answer []answerRow

type answerRow struct {
	group string
	ms    int64
	cols  []string
	vals  []any // float64 or string
}

// points counts the values of the answer.
func (a answer) points() int {
	n := 0
	for _, r := range a {
		n += len(r.vals)
	}
	return n
}

// series counts the answer's groups.
func (a answer) series() int {
	n := 0
	for i := range a {
		if i == 0 || a[i].group != a[i-1].group {
			n++
		}
	}
	return n
}

func (a answer) sort() {
	sort.SliceStable(a, func(i, j int) bool {
		if a[i].group != a[j].group {
			return a[i].group < a[j].group
		}
		if a[i].ms != a[j].ms {
			return a[i].ms < a[j].ms
		}
		return fmt.Sprint(a[i].vals) < fmt.Sprint(a[j].vals)
	})
}

// groupOf names a series' group by its tags. The metric name is not part of it, nor,
// for VictoriaMetrics, the db label it adds to what it takes through /write?db=.
func groupOf(tags map[string]string) string {
	keys := make([]string, 0, len(tags))
	for k, v := range tags {
		if k != "__name__" && k != promDBLabel {
			keys = append(keys, k+"="+v)
		}
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

// parseInfluxQL reads InfluxDB 1.x's /query JSON (epoch=ms): an error anywhere in it is
// the answer's error.
func parseInfluxQL(body []byte) (answer, error) {
	var resp struct {
		Error   string `json:"error"`
		Results []struct {
			Error  string `json:"error"`
			Series []struct {
				Name    string            `json:"name"`
				Tags    map[string]string `json:"tags"`
				Columns []string          `json:"columns"`
				Values  [][]any           `json:"values"`
			} `json:"series"`
		} `json:"results"`
	}
	if err := decodeNumbers(body, &resp, "InfluxDB 1.x JSON"); err != nil {
		return nil, err
	}
	if resp.Error != "" {
		return nil, errors.New(resp.Error)
	}
	var a answer
	for _, res := range resp.Results {
		if res.Error != "" {
			return nil, errors.New(res.Error)
		}
		for _, s := range res.Series {
			if len(s.Columns) > 0 && s.Columns[0] != "time" {
				// A SHOW statement's list: a row of values each, in order, the series'
				// name its group.
				for i, v := range s.Values {
					row := answerRow{group: s.Name, ms: int64(i), cols: s.Columns}
					for _, x := range v {
						y, err := jsonValue(x)
						if err != nil {
							return nil, fmt.Errorf("series %s: %v", s.Name, err)
						}
						row.vals = append(row.vals, y)
					}
					a = append(a, row)
				}
				continue
			}
			if len(s.Columns) == 0 {
				return nil, fmt.Errorf("series %v: no columns", s.Tags)
			}
			// Columns sorted by name, so that two systems that order them differently
			// (SELECT *) still agree.
			order := make([]int, len(s.Columns)-1)
			for i := range order {
				order[i] = i + 1
			}
			sort.Slice(order, func(i, j int) bool { return s.Columns[order[i]] < s.Columns[order[j]] })
			cols := make([]string, len(order))
			for i, c := range order {
				cols[i] = s.Columns[c]
			}
			for _, v := range s.Values {
				if len(v) != len(s.Columns) {
					return nil, fmt.Errorf("series %v: a row of %d values under %d columns", s.Tags, len(v), len(s.Columns))
				}
				ms, err := jsonInt(v[0])
				if err != nil {
					return nil, fmt.Errorf("series %v: time %v: %v", s.Tags, v[0], err)
				}
				row := answerRow{group: groupOf(s.Tags), ms: ms, cols: cols}
				empty := true
				for _, c := range order {
					x, err := jsonValue(v[c])
					if err != nil {
						return nil, fmt.Errorf("series %v column %s: %v", s.Tags, s.Columns[c], err)
					}
					empty = empty && x == nil
					row.vals = append(row.vals, x)
				}
				if !empty {
					a = append(a, row)
				}
			}
		}
	}
	a.sort()
	return a, nil
}

// promDBLabel is the label VictoriaMetrics gives what it takes through /write?db=.
// The InfluxQL answers compared with its answers never have such a tag (the workloads
// have none).
const promDBLabel = "db"

// parsePromQuery reads a Prometheus HTTP API answer (/api/v1/query or query_range), as
// VictoriaMetrics gives it.
func parsePromQuery(body []byte) (answer, error) {
	var resp struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  []any             `json:"value"`
				Values [][]any           `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := decodeNumbers(body, &resp, "a Prometheus API answer"); err != nil {
		return nil, err
	}
	if resp.Status != "success" {
		return nil, fmt.Errorf("status %q: %s", resp.Status, resp.Error)
	}
	var a answer
	for _, s := range resp.Data.Result {
		samples := s.Values
		if s.Value != nil {
			samples = append(samples, s.Value)
		}
		for _, p := range samples {
			if len(p) != 2 {
				return nil, fmt.Errorf("series %v: sample %v, want [time, value]", s.Metric, p)
			}
			sec, err := jsonFloat(p[0])
			if err != nil {
				return nil, fmt.Errorf("series %v: time %v: %v", s.Metric, p[0], err)
			}
			str, _ := p[1].(string)
			v, err := strconv.ParseFloat(str, 64)
			if err != nil {
				return nil, fmt.Errorf("series %v: value %v: %v", s.Metric, p[1], err)
			}
			a = append(a, answerRow{group: groupOf(s.Metric), ms: int64(math.Round(sec * 1000)), vals: []any{v}})
		}
	}
	a.sort()
	return a, nil
}

// parsePromExport reads VictoriaMetrics' /api/v1/export: a JSON object per series per
// line.
func parsePromExport(body []byte) (answer, error) {
	var a answer
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var s struct {
			Metric     map[string]string `json:"metric"`
			Values     []float64         `json:"values"`
			Timestamps []int64           `json:"timestamps"`
		}
		if err := json.Unmarshal(line, &s); err != nil {
			return nil, fmt.Errorf("not an export line (%v): %.200s", err, line)
		}
		if len(s.Values) != len(s.Timestamps) {
			return nil, fmt.Errorf("series %v: %d values, %d timestamps", s.Metric, len(s.Values), len(s.Timestamps))
		}
		for i := range s.Values {
			a = append(a, answerRow{group: groupOf(s.Metric), ms: s.Timestamps[i], vals: []any{s.Values[i]}})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	a.sort()
	return a, nil
}

// decodeNumbers decodes body, what it should be, into v with its numbers as written
// (json.Number): a time in ms is an integer, not a float's approximation.
func decodeNumbers(body []byte, v any, what string) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("not %s (%v): %.200s", what, err, body)
	}
	return nil
}

func jsonInt(v any) (int64, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("%T, want a number", v)
	}
	return n.Int64()
}

func jsonFloat(v any) (float64, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("%T, want a number", v)
	}
	return n.Float64()
}

func jsonValue(v any) (any, error) {
	switch x := v.(type) {
	case nil, string, bool:
		return x, nil
	case json.Number:
		return x.Float64()
	}
	return nil, fmt.Errorf("%T %v: want a number, string, bool or null", v, v)
}

// comparison says how two answers must agree.
type comparison struct {
	// skip leaves out rows two systems cannot agree on: those whose window meets the
	// range in which the left edge of a relative window (now() - span) moved between
	// the two queries.
	skip func(r answerRow) bool
	// Across query languages (VictoriaMetrics against InfluxQL) the groups, column
	// names and, for an instant query, the time are not the same thing.
	ignoreGroup, ignoreCols, ignoreTime bool
}

// valueTolerance is how far (relative) two floats may differ and still be equal: sums
// taken in another order round differently.
const valueTolerance = 1e-9

// compare returns whether a and b agree, how many rows were compared and left out
// (the larger of the two answers' counts), and the first difference.
func (c comparison) compare(a, b answer) (equal bool, compared, skipped int, diff string) {
	keep := func(x answer) answer {
		var out answer
		for _, r := range x {
			if c.skip == nil || !c.skip(r) {
				out = append(out, r)
			}
		}
		skipped = max(skipped, len(x)-len(out))
		return out
	}
	a, b = keep(a), keep(b)
	for i := 0; i < min(len(a), len(b)); i++ {
		if d := c.rowDiff(a[i], b[i]); d != "" {
			return false, i, skipped, fmt.Sprintf("row %d: %s", i, d)
		}
	}
	if len(a) != len(b) {
		return false, min(len(a), len(b)), skipped, fmt.Sprintf("%d rows against %d", len(a), len(b))
	}
	return true, len(a), skipped, ""
}

func (c comparison) rowDiff(x, y answerRow) string {
	show := func(r answerRow) string { return fmt.Sprintf("{%s} %d %v=%v", r.group, r.ms, r.cols, r.vals) }
	switch {
	case !c.ignoreGroup && x.group != y.group,
		!c.ignoreTime && x.ms != y.ms,
		!c.ignoreCols && strings.Join(x.cols, ",") != strings.Join(y.cols, ","),
		len(x.vals) != len(y.vals):
		return show(x) + " against " + show(y)
	}
	for i := range x.vals {
		if !sameValue(x.vals[i], y.vals[i]) {
			return show(x) + " against " + show(y)
		}
	}
	return ""
}

func sameValue(a, b any) bool {
	fa, oka := a.(float64)
	fb, okb := b.(float64)
	if oka && okb {
		return math.Abs(fa-fb) <= valueTolerance*math.Max(1, math.Max(math.Abs(fa), math.Abs(fb)))
	}
	return a == b
}
