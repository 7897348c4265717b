package httpapi

import (
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// csvState is what InfluxDB 1.x's CSV writer keeps across the results of an answer,
// and across the parts of a chunked one: the statement whose header it wrote last.
type csvState struct {
	statementID int
	prefix      []byte // "name,tags," of the series being written
}

// wantsCSV reports whether a request asks for CSV, as InfluxDB 1.x reads Accept.
func wantsCSV(accept string) bool { return accept == "application/csv" || accept == "text/csv" }

// csvAnswer appends results as InfluxDB 1.x answers Accept: application/csv: for each
// statement with series a header "name,tags,time,…" (after an empty line but for the
// first, and again where a series' columns differ from the previous one's), then a
// line per row — the series' name, its tags as k=v pairs, the values: floats in
// shortest 'f' form, times in nanoseconds unless epoch says otherwise, no value as an
// empty field. A statement without series (an error too) writes nothing.
func (a *answerWriter) csvAnswer(results []*result) {
	st := a.csv
	for _, res := range results {
		if res.StatementID != st.statementID {
			if len(res.Series) == 0 {
				continue
			}
			if st.statementID >= 0 {
				a.buf = append(a.buf, '\n')
			}
			st.statementID = res.StatementID
			a.csvHeader(res.Series[0].Columns)
		}
		for i, r := range res.Series {
			if i > 0 && !slices.Equal(res.Series[i-1].Columns, r.Columns) {
				a.buf = append(a.buf, '\n')
				a.csvHeader(r.Columns)
			}
			st.prefix = appendCSVField(st.prefix[:0], r.Name)
			st.prefix = append(st.prefix, ',')
			st.prefix = appendCSVField(st.prefix, setID(r.Tags))
			st.prefix = append(st.prefix, ',')
			if r.table != nil {
				a.table(r.table)
			} else {
				a.values(r.Values)
			}
		}
	}
}

func (a *answerWriter) csvHeader(columns []string) {
	a.buf = append(a.buf, "name,tags"...)
	for _, c := range columns {
		a.buf = append(a.buf, ',')
		a.buf = appendCSVField(a.buf, c)
	}
	a.buf = append(a.buf, '\n')
}

// appendCSVField appends s as encoding/csv writes a field: quoted, with quotes
// doubled, when it holds a comma, quote, CR or LF, starts with white space, or is `\.`.
func appendCSVField(b []byte, s string) []byte {
	quote := s == `\.` || strings.ContainsAny(s, ",\"\r\n")
	if r, _ := utf8.DecodeRuneInString(s); s != "" && unicode.IsSpace(r) {
		quote = true
	}
	if !quote {
		return append(b, s...)
	}
	b = append(b, '"')
	b = append(b, strings.ReplaceAll(s, `"`, `""`)...)
	return append(b, '"')
}

// appendCSVFloat appends f as InfluxDB's CSV does: strconv's shortest 'f' form.
func appendCSVFloat(b []byte, f float64) []byte {
	if d, ok := appendShortDecimal(b, f); ok {
		return d
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64)
}
