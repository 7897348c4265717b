package httpapi

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/influxdata/influxql"
)

// execSelect answers a SELECT over its sources: each measurement FROM names — listed,
// or matched by a regular expression against the catalog's measurements — answered
// alone, in the order of their names, as InfluxDB orders its series; wildcards expand
// to the fields and tags of all of them, and SLIMIT and SOFFSET count each
// measurement's series.
func (h *Handler) execSelect(ctx context.Context, qc *queryCost, s *influxql.SelectStatement, db string, now time.Time) ([]*row, error) {
	if s.Target != nil {
		return nil, unsupported("SELECT … INTO")
	}
	var ms []*influxql.Measurement
	var matchedIn []string // the databases of regular expressions that matched nothing
	for _, src := range s.Sources {
		m, ok := src.(*influxql.Measurement)
		if !ok {
			return h.execSubquery(ctx, qc, s, db, now) // subquery.go
		}
		if m.Regex == nil {
			ms = append(ms, m)
			continue
		}
		mdb := db
		if m.Database != "" {
			mdb = m.Database
		}
		names, err := h.measurements(ctx, mdb, m.Regex.Val)
		if err != nil {
			return nil, err
		}
		if len(names) == 0 {
			matchedIn = append(matchedIn, mdb)
		}
		for _, n := range names {
			ms = append(ms, &influxql.Measurement{Database: m.Database, RetentionPolicy: m.RetentionPolicy, Name: n})
		}
	}
	slices.SortStableFunc(ms, func(a, b *influxql.Measurement) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Database, b.Database)
	})
	ms = slices.CompactFunc(ms, func(a, b *influxql.Measurement) bool { return a.Name == b.Name && a.Database == b.Database })
	if len(ms) == 0 {
		// Regular expressions that matched nothing: in databases that exist?
		for _, mdb := range matchedIn {
			if err := h.databaseExists(ctx, mdb); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}
	if len(ms) > 1 && (s.HasFieldWildcard() || s.HasDimensionWildcard()) {
		all := s.Clone()
		all.Sources = make(influxql.Sources, len(ms))
		for i, m := range ms {
			all.Sources[i] = m
		}
		var err error
		if s, err = h.expandWildcards(ctx, all, db, now); err != nil {
			return nil, err
		}
	}
	var rows []*row
	for _, m := range ms {
		one := s
		if len(s.Sources) != 1 || s.Sources[0] != influxql.Source(m) {
			one = s.Clone()
			one.Sources = influxql.Sources{m}
		}
		r, err := h.execMeasurement(ctx, qc, one, db, now)
		if err != nil {
			return nil, err
		}
		if s.SLimit == 0 && s.SOffset > 0 {
			r = nil // InfluxDB 1.x answers SOFFSET without SLIMIT with no series
		}
		r = r[min(s.SOffset, len(r)):]
		if s.SLimit > 0 && len(r) > s.SLimit {
			r = r[:s.SLimit]
		}
		rows = append(rows, r...)
	}
	return rows, nil
}

// measurements returns the measurements of a database whose names re matches, sorted.
func (h *Handler) measurements(ctx context.Context, db string, re *regexp.Regexp) ([]string, error) {
	if db == "" {
		return nil, errDatabaseRequired
	}
	infos, err := h.eng.Series(ctx, SeriesQuery{Match: map[string]string{TagDB: db}, Prefix: db + "/"})
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, in := range infos {
		m := in.Tags[TagMeasurement]
		if in.Tags[TagDB] != db || seen[m] || !re.MatchString(m) {
			continue
		}
		seen[m] = true
		out = append(out, m)
	}
	slices.Sort(out)
	return out, nil
}
