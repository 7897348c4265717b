package promapi

import (
	"context"
	"fmt"
	"sort"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
)

// The catalog tags that httpapi's /write records of a line-protocol series.
const (
	tagDB          = catalog.TagDB
	tagMeasurement = catalog.TagMeasurement
	tagField       = catalog.TagField
)

// dbLabel is the label that names a line-protocol series' database, unless the
// series has a tag of that name.
const dbLabel = "db"

// maxNameSplits bounds the catalog lookups one metric name turns into: one per '_'
// in it, each a guess at where the measurement ends and the field begins.
const maxNameSplits = 16

// entryLabels returns the Prometheus labels of a catalog entry, and false for a
// series PromQL cannot see (no Prometheus name, no line-protocol measurement, or a
// series of strings):
//   - a series written by remote write carries its labels as tags, __name__ included;
//   - a series written by /write is `measurement_field{tags…, db="…"}`, as
//     VictoriaMetrics names InfluxDB line protocol.
func entryLabels(e *catalog.Entry) (labels.Labels, bool) {
	if e.Type == series.String {
		return labels.EmptyLabels(), false
	}
	var name, db, meas, field string
	for _, t := range e.Tags {
		switch t.K {
		case labels.MetricName:
			name = t.V
		case tagDB:
			db = t.V
		case tagMeasurement:
			meas = t.V
		case tagField:
			field = t.V
		}
	}
	b := labels.NewScratchBuilder(len(e.Tags) + 1)
	switch {
	case name != "":
		for _, t := range e.Tags {
			b.Add(t.K, t.V)
		}
	case meas != "" && field != "":
		hasDB := false
		for _, t := range e.Tags {
			if t.K == tagDB || t.K == tagMeasurement || t.K == tagField {
				continue
			}
			hasDB = hasDB || t.K == dbLabel
			b.Add(t.K, t.V)
		}
		b.Add(labels.MetricName, meas+"_"+field)
		if !hasDB && db != "" {
			b.Add(dbLabel, db)
		}
	default:
		return labels.EmptyLabels(), false
	}
	b.Sort()
	return b.Labels(), true
}

// catalogQueries returns the catalog queries whose union holds every series the
// matchers can select: the equalities become posting lists to intersect, so that a
// selector such as up{job="node"} reads two posting lists, not the whole catalog.
// A metric name equality becomes one query for remote-written series and one per
// way the name splits into measurement_field at a '_'. Nothing is a superset the
// caller need not filter: it checks every matcher against the labels after.
// ok is false when no series can match (an equality no tag can hold).
func catalogQueries(ms []*labels.Matcher) (qs []catalog.Query, ok bool) {
	var common []catalog.Tag
	name, hasName := "", false
	for _, m := range ms {
		if m.Type != labels.MatchEqual || m.Value == "" {
			continue
		}
		switch m.Name {
		case labels.MetricName:
			if hasName && name != m.Value {
				return nil, false
			}
			name, hasName = m.Value, true
			continue
		case dbLabel, tagDB, tagMeasurement, tagField:
			// db is a tag or the line-protocol database; the pseudo-tags are not labels.
			continue
		}
		if catalog.ValidateTagKey(m.Name) != nil || catalog.ValidateTagValue(m.Name, m.Value) != nil {
			return nil, false
		}
		common = append(common, catalog.Tag{K: m.Name, V: m.Value})
	}
	with := func(extra ...catalog.Tag) catalog.Query {
		match := append(append([]catalog.Tag(nil), common...), extra...)
		sort.Slice(match, func(i, j int) bool { return match[i].K < match[j].K })
		return catalog.Query{Match: match}
	}
	if !hasName {
		return []catalog.Query{with()}, true
	}
	if catalog.ValidateTagValue(labels.MetricName, name) == nil {
		qs = append(qs, with(catalog.Tag{K: labels.MetricName, V: name}))
	}
	for i, n := 0, 0; i < len(name) && n < maxNameSplits; i++ {
		if name[i] != '_' || i == 0 || i == len(name)-1 {
			continue
		}
		n++
		m, f := catalog.Tag{K: tagMeasurement, V: name[:i]}, catalog.Tag{K: tagField, V: name[i+1:]}
		if catalog.ValidateTagValue(m.K, m.V) == nil && catalog.ValidateTagValue(f.K, f.V) == nil {
			qs = append(qs, with(m, f))
		}
	}
	return qs, len(qs) > 0
}

// matches reports whether lset satisfies every matcher.
func matches(lset labels.Labels, ms []*labels.Matcher) bool {
	for _, m := range ms {
		if !m.Matches(lset.Get(m.Name)) {
			return false
		}
	}
	return true
}

// selected is one series a selector chose: its catalog entry and its labels.
type selected struct {
	entry  catalog.Entry
	labels labels.Labels
}

// selectSeries returns the series of the catalog that ms select and that hold points
// in [mint, maxt] ms by their catalog bounds, sorted by labels, at most max of them.
func selectSeries(ctx context.Context, cat Catalog, ms []*labels.Matcher, mint, maxt int64, max int) ([]selected, error) {
	qs, ok := catalogQueries(ms)
	if !ok {
		return nil, nil
	}
	seen := make(map[string]bool)
	var out []selected
	for _, q := range qs {
		entries, err := cat.Series(ctx, q)
		if err != nil {
			return nil, err
		}
		for i := range entries {
			e := &entries[i]
			if seen[e.Key] || (e.HasBounds && (e.Last < mint*1e6 || e.First >= (maxt+1)*1e6)) {
				continue
			}
			lset, ok := entryLabels(e)
			if !ok || !matches(lset, ms) {
				continue
			}
			seen[e.Key] = true
			if len(out) >= max {
				return nil, &LimitError{What: "series", Limit: max, Hint: "narrow the selector with more label matchers"}
			}
			out = append(out, selected{entry: *e, labels: lset})
		}
	}
	sort.Slice(out, func(i, j int) bool { return labels.Compare(out[i].labels, out[j].labels) < 0 })
	return out, nil
}

// LimitError is a selection or read past one of the Config's limits.
type LimitError struct {
	What  string // "series" or "samples"
	Limit int
	Hint  string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("more than %d %s selected, the most one query reads: %s", e.Limit, e.What, e.Hint)
}
