package httpapi

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/influxdata/influxql"
)

// execShow answers the SHOW statements from the catalog (Engine.Series). Without
// one, they fail with ErrNeedsCatalog.
func (h *Handler) execShow(ctx context.Context, stmt influxql.Statement, db string) ([]*row, error) {
	if _, ok := stmt.(*influxql.ShowDatabasesStatement); ok {
		infos, err := h.eng.Series(ctx, SeriesQuery{})
		if err != nil {
			return nil, fmt.Errorf("SHOW DATABASES: %w", err)
		}
		return []*row{listRow("databases", "name", distinct(infos, TagDB))}, nil
	}
	var (
		sdb     string
		sources influxql.Sources
		cond    influxql.Expr
	)
	switch s := stmt.(type) {
	case *influxql.ShowMeasurementsStatement:
		sdb, cond = s.Database, s.Condition
		if s.Source != nil {
			sources = influxql.Sources{s.Source}
		}
	case *influxql.ShowTagKeysStatement:
		sdb, sources, cond = s.Database, s.Sources, s.Condition
	case *influxql.ShowTagValuesStatement:
		sdb, sources, cond = s.Database, s.Sources, s.Condition
	case *influxql.ShowFieldKeysStatement:
		sdb, sources = s.Database, s.Sources
	case *influxql.ShowSeriesStatement:
		sdb, sources, cond = s.Database, s.Sources, s.Condition
	}
	if sdb != "" {
		db = sdb
	}
	if db == "" {
		return nil, errors.New("database name required: add db=NAME to the request or ON db to the statement")
	}
	if _, fieldKeys := stmt.(*influxql.ShowFieldKeysStatement); fieldKeys {
		// From the database's shape, when the catalog answers one (shape.go).
		sh, ok, err := h.shape(ctx, db, "")
		if err != nil {
			return nil, fmt.Errorf("SHOW FIELD KEYS: %w", err)
		}
		if ok {
			if sh.Series == 0 {
				return nil, fmt.Errorf("database not found: %s", db)
			}
			return fieldKeyRows(shapeFieldKeys(sh, sources)), nil
		}
	}
	infos, err := h.eng.Series(ctx, SeriesQuery{Match: map[string]string{TagDB: db}, Prefix: db + "/"})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", strings.SplitN(stmt.String(), " WHERE", 2)[0], err)
	}
	if _, measurements := stmt.(*influxql.ShowMeasurementsStatement); !measurements && len(infos) == 0 {
		// No series: no database (InfluxDB answers SHOW MEASUREMENTS of one with none).
		return nil, fmt.Errorf("database not found: %s", db)
	}
	// Keep the series of the named measurements that satisfy the condition.
	eq, rest, err := splitCondition(cond)
	if err != nil {
		return nil, err
	}
	kept := infos[:0:0]
	for _, in := range infos {
		if in.Tags[TagDB] != db || (eq != nil && !matches(in.Tags, eq, rest)) || eq == nil {
			continue
		}
		if len(sources) > 0 && !inSources(in.Tags[TagMeasurement], sources) {
			continue
		}
		kept = append(kept, in)
	}
	byMeas := map[string][]SeriesInfo{}
	for _, in := range kept {
		m := in.Tags[TagMeasurement]
		byMeas[m] = append(byMeas[m], in)
	}
	measurements := make([]string, 0, len(byMeas))
	for m := range byMeas {
		measurements = append(measurements, m)
	}
	sort.Strings(measurements)

	switch s := stmt.(type) {
	case *influxql.ShowMeasurementsStatement:
		if len(measurements) == 0 {
			return nil, nil
		}
		return []*row{listRow("measurements", "name", measurements)}, nil
	case *influxql.ShowTagKeysStatement:
		var rows []*row
		for _, m := range measurements {
			keys := map[string]bool{}
			for _, in := range byMeas[m] {
				for k := range in.Tags {
					if !strings.HasPrefix(k, "__") {
						keys[k] = true
					}
				}
			}
			if len(keys) > 0 {
				rows = append(rows, listRow(m, "tagKey", sortedSet(keys)))
			}
		}
		return rows, nil
	case *influxql.ShowTagValuesStatement:
		want, err := tagKeyFilter(s)
		if err != nil {
			return nil, err
		}
		var rows []*row
		for _, m := range measurements {
			pairs := map[[2]string]bool{}
			for _, in := range byMeas[m] {
				for k, v := range in.Tags {
					if !strings.HasPrefix(k, "__") && want(k) {
						pairs[[2]string{k, v}] = true
					}
				}
			}
			if len(pairs) == 0 {
				continue
			}
			list := make([][2]string, 0, len(pairs))
			for p := range pairs {
				list = append(list, p)
			}
			sort.Slice(list, func(i, j int) bool {
				if list[i][0] != list[j][0] {
					return list[i][0] < list[j][0]
				}
				return list[i][1] < list[j][1]
			})
			r := &row{Name: m, Columns: []string{"key", "value"}}
			for _, p := range list {
				r.Values = append(r.Values, []any{p[0], p[1]})
			}
			rows = append(rows, r)
		}
		return rows, nil
	case *influxql.ShowFieldKeysStatement:
		fields := map[string]map[string]string{}
		for _, m := range measurements {
			fields[m] = map[string]string{}
			for _, in := range byMeas[m] {
				fields[m][in.Tags[TagField]] = influxType(in.Type)
			}
		}
		return fieldKeyRows(fields), nil
	case *influxql.ShowSeriesStatement:
		set := map[string]bool{}
		for _, in := range kept {
			var tags []tagPair
			for k, v := range in.Tags {
				if !strings.HasPrefix(k, "__") {
					tags = append(tags, tagPair{k, v})
				}
			}
			_ = sortTags(tags)
			var b strings.Builder
			measurementEscaper.WriteString(&b, in.Tags[TagMeasurement])
			for _, t := range tags {
				b.WriteByte(',')
				tagEscaper.WriteString(&b, t.k)
				b.WriteByte('=')
				tagEscaper.WriteString(&b, t.v)
			}
			set[b.String()] = true
		}
		if len(set) == 0 {
			return nil, nil
		}
		return []*row{listRow("", "key", sortedSet(set))}, nil
	}
	return nil, fmt.Errorf("%s is not supported", stmt)
}

// fieldKeyRows returns SHOW FIELD KEYS' rows: per measurement, in the order of their
// names, its fields' names and types (fields: measurement → field → type).
func fieldKeyRows(fields map[string]map[string]string) []*row {
	var rows []*row
	for _, m := range sortedKeys(fields) {
		r := &row{Name: m, Columns: []string{"fieldKey", "fieldType"}}
		for _, f := range sortedKeys(fields[m]) {
			r.Values = append(r.Values, []any{f, fields[m][f]})
		}
		rows = append(rows, r)
	}
	return rows
}

// tagKeyFilter returns which tag keys SHOW TAG VALUES WITH KEY … selects.
func tagKeyFilter(s *influxql.ShowTagValuesStatement) (func(string) bool, error) {
	switch lit := s.TagKeyExpr.(type) {
	case *influxql.StringLiteral:
		switch s.Op {
		case influxql.EQ:
			return func(k string) bool { return k == lit.Val }, nil
		case influxql.NEQ:
			return func(k string) bool { return k != lit.Val }, nil
		}
	case *influxql.ListLiteral:
		set := map[string]bool{}
		for _, v := range lit.Vals {
			set[v] = true
		}
		return func(k string) bool { return set[k] }, nil
	case *influxql.RegexLiteral:
		switch s.Op {
		case influxql.EQREGEX:
			return lit.Val.MatchString, nil
		case influxql.NEQREGEX:
			return func(k string) bool { return !lit.Val.MatchString(k) }, nil
		}
	}
	return nil, fmt.Errorf("SHOW TAG VALUES: unsupported WITH KEY clause")
}

func inSources(m string, sources influxql.Sources) bool {
	for _, s := range sources {
		if sm, ok := s.(*influxql.Measurement); ok {
			if (sm.Regex != nil && sm.Regex.Val.MatchString(m)) || sm.Name == m {
				return true
			}
		}
	}
	return false
}

func distinct(infos []SeriesInfo, tag string) []string {
	set := map[string]bool{}
	for _, in := range infos {
		if v, ok := in.Tags[tag]; ok {
			set[v] = true
		}
	}
	return sortedSet(set)
}

func sortedSet(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func listRow(name, column string, vals []string) *row {
	r := &row{Name: name, Columns: []string{column}}
	for _, v := range vals {
		r.Values = append(r.Values, []any{v})
	}
	return r
}
