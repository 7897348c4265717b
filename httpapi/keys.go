package httpapi

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tsdht/tsdht/tsdb/catalog"
)

// Tags the line-protocol mapping adds to a series' own tags (defined with the catalog,
// which every surface reads them from).
const (
	TagDB          = catalog.TagDB
	TagMeasurement = catalog.TagMeasurement
	TagField       = catalog.TagField
)

// lpEscaper escapes as line protocol does: a measurement's commas and spaces, and a
// tag key's, tag value's or field key's commas, equals signs and spaces.
var (
	measurementEscaper = strings.NewReplacer(`,`, `\,`, ` `, `\ `)
	tagEscaper         = strings.NewReplacer(`,`, `\,`, `=`, `\=`, ` `, `\ `)
)

// tagPair is one tag of a line.
type tagPair struct{ k, v string }

// LineKey returns the series key of one field of a line-protocol point, as DESIGN.md
// fixes it: "db/measurement,k1=v1,k2=v2#field", tags sorted by key, with line
// protocol's escaping. tags must be sorted by key.
func LineKey(db, measurement string, tags []tagPair, field string) string {
	var b strings.Builder
	b.Grow(len(db) + len(measurement) + len(field) + 16*len(tags))
	b.WriteString(db)
	b.WriteByte('/')
	measurementEscaper.WriteString(&b, measurement)
	for _, t := range tags {
		b.WriteByte(',')
		tagEscaper.WriteString(&b, t.k)
		b.WriteByte('=')
		tagEscaper.WriteString(&b, t.v)
	}
	b.WriteByte('#')
	tagEscaper.WriteString(&b, field)
	return b.String()
}

// lineTags returns the catalog tags of a line-protocol series.
func lineTags(db, measurement string, tags []tagPair, field string) map[string]string {
	m := make(map[string]string, len(tags)+3)
	for _, t := range tags {
		m[t.k] = t.v
	}
	m[TagDB], m[TagMeasurement], m[TagField] = db, measurement, field
	return m
}

// sortTags sorts tags by key and refuses a key given twice.
func sortTags(tags []tagPair) error {
	sort.Slice(tags, func(i, j int) bool { return tags[i].k < tags[j].k })
	for i := 1; i < len(tags); i++ {
		if tags[i].k == tags[i-1].k {
			return fmt.Errorf("tag key %q given twice", tags[i].k)
		}
	}
	return nil
}

// labelEscaper escapes a label value as Prometheus' text format does.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// PromKey returns the series key of a Prometheus series: `name{l1="v1",…}` with the
// labels other than __name__ sorted by name and their values escaped as in
// Prometheus' text format; a series with no other label is just `name`.
// labels must be sorted by name.
func PromKey(name string, labels []tagPair) string {
	var b strings.Builder
	b.WriteString(name)
	n := 0
	for _, l := range labels {
		if l.k == "__name__" {
			continue
		}
		if n == 0 {
			b.WriteByte('{')
		} else {
			b.WriteByte(',')
		}
		n++
		b.WriteString(l.k)
		b.WriteString(`="`)
		labelEscaper.WriteString(&b, l.v)
		b.WriteByte('"')
	}
	if n > 0 {
		b.WriteByte('}')
	}
	return b.String()
}
