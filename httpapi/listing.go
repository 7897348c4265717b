package httpapi

import (
	"context"
	"slices"

	"github.com/influxdata/influxql"
)

// maxFieldListings bounds the fields a SELECT lists its series by (listSeries: each
// field's posting list is read); a statement naming more lists the measurement's series
// whole.
const maxFieldListings = 8

// listSeries lists the series of measurement meas of database db that may answer a
// SELECT: those carrying the WHERE clause's tag equalities (eq), of the fields its
// columns read and its conditions name, when those are few; else every series of the
// measurement with eq's tags (a tag column shows the tags of series whatever their
// field). The listing is a superset: the caller checks each series' database,
// measurement and tags.
//
// Listed by field, a SELECT of two fields of 20 trucks reads the catalog entries of
// those 40 series, not of every field of the 20 trucks, in one listing of all the
// fields (SeriesQuery.Fields): a posting list two fields' listings share is read once. The key prefix bounds every
// listing to the measurement's series, so the database's and the measurement's posting
// lists (every series of them) are read only when nothing else narrows the listing.
// A listing by field that finds nothing is done again whole, so that what the
// measurement holds decides, as before, whether an equality names a tag or a field.
// listed, when not nil, is every series of the measurement, listed for the statement's
// wildcards: the whole listing is taken from it rather than read again.
func (h *Handler) listSeries(ctx context.Context, db, meas string, cols []column, eq map[string]string, rest []influxql.Expr, listed []SeriesInfo) ([]SeriesInfo, error) {
	prefix := db + "/" + measurementEscaper.Replace(meas)
	whole := func() ([]SeriesInfo, error) {
		if listed != nil {
			var out []SeriesInfo
			for _, in := range listed {
				if matches(in.Tags, eq, nil) {
					out = append(out, in)
				}
			}
			return out, nil
		}
		match := pushable(eq)
		if len(match) == 0 {
			match = map[string]string{TagDB: db, TagMeasurement: meas}
		}
		return h.eng.Series(ctx, SeriesQuery{Match: match, Prefix: prefix})
	}
	fields, ok := listedFields(cols, rest)
	if !ok || listed != nil {
		return whole()
	}
	// The fields' listings as one: on a cluster each costs round trips to the tag
	// index's and the entries' replicas, and the fields of one statement share their
	// tag lists and their series' tags (a fleet's list, its trucks' entries).
	infos, err := h.eng.Series(ctx, SeriesQuery{Match: pushable(eq), Prefix: prefix, Fields: fields})
	if err != nil {
		return nil, err
	}
	if len(infos) == 0 {
		return whole()
	}
	return infos, nil
}

// listedFields returns the fields a SELECT's series are listed by: those its columns
// read and every name its conditions (rest) hold (a name that is a tag lists nothing).
// ok is false when the statement shows tags as columns, names no field, or more
// than maxFieldListings.
func listedFields(cols []column, rest []influxql.Expr) (_ []string, ok bool) {
	var fields []string
	add := func(f string) {
		if !slices.Contains(fields, f) {
			fields = append(fields, f)
		}
	}
	for _, c := range cols {
		if c.tag {
			return nil, false
		}
		add(c.field)
	}
	for _, e := range rest {
		influxql.WalkFunc(e, func(n influxql.Node) {
			if ref, isRef := n.(*influxql.VarRef); isRef {
				add(ref.Val)
			}
		})
	}
	return fields, len(fields) > 0 && len(fields) <= maxFieldListings
}
