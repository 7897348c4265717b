package httpapi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/tsdht/tsdht/tsdb/series"
)

// Field types at /write, as InfluxDB 1.x keeps them: a field of a measurement has one
// type, whatever the tag set. A series' own type is fixed by its first write (the
// store refuses another), but a line with a new tag set makes a new series, which
// alone would take any type — and a field whose series hold different types cannot
// be aggregated. So a write is checked against the type the catalog (or this handler,
// since) knows for its database, measurement and field; a line bringing a field of
// another type is refused whole — none of its fields is stored — and the rest of the
// request is written: InfluxDB's `partial write: field type conflict: … dropped=N`.
// Booleans are stored as integers, so the two are one type here.

// fieldTypes remembers the type of each (database, measurement, field) seen, so that
// the catalog is asked about a field once per handler. It starts over past
// maxCachedSeries fields.
type fieldTypes struct {
	m atomic.Pointer[sync.Map] // db \x00 measurement \x00 field → series.Type
	n atomic.Int64
}

func newFieldTypes() *fieldTypes {
	f := &fieldTypes{}
	f.m.Store(new(sync.Map))
	return f
}

// settle returns the type of a field: the one known, else t, which becomes the one
// known (the first of concurrent writers wins).
func (f *fieldTypes) settle(k string, t series.Type) series.Type {
	m := f.m.Load()
	if v, ok := m.Load(k); ok {
		return v.(series.Type)
	}
	if f.n.Add(1) > maxCachedSeries {
		m = new(sync.Map)
		f.m.Store(m)
		f.n.Store(1)
	}
	v, _ := m.LoadOrStore(k, t)
	return v.(series.Type)
}

func (f *fieldTypes) known(k string) (series.Type, bool) {
	v, ok := f.m.Load().Load(k)
	if !ok {
		return series.Unknown, false
	}
	return v.(series.Type), true
}

// catalogFieldType returns the type of a field's series the catalog lists, Unknown
// when it lists none (or there is no catalog).
func (h *Handler) catalogFieldType(ctx context.Context, db, meas, field string) (series.Type, error) {
	infos, err := h.eng.Series(ctx, SeriesQuery{
		Match:  map[string]string{TagDB: db, TagMeasurement: meas, TagField: field},
		Prefix: db + "/" + measurementEscaper.Replace(meas),
	})
	if errors.Is(err, ErrNeedsCatalog) {
		return series.Unknown, nil
	}
	if err != nil {
		return series.Unknown, err
	}
	for _, in := range infos {
		if in.Tags[TagDB] == db && in.Tags[TagMeasurement] == meas && in.Tags[TagField] == field && in.Type != series.Unknown {
			return in.Type, nil
		}
	}
	return series.Unknown, nil
}

// checkFieldTypes drops from batches the lines that bring a field of another type
// than the field has: every point of such a line, of whichever field (the points of a
// series and time). It returns the batches left, how many lines it dropped and why
// (the first conflict, in InfluxDB's words), or an error when the catalog could not
// be asked.
func (h *Handler) checkFieldTypes(ctx context.Context, batches []*seriesBatch) ([]*seriesBatch, int, string, error) {
	type line struct {
		id string // the series' key without its field: one tag set of a measurement
		t  int64
	}
	var (
		bad    map[line]bool
		reason string
	)
	for _, b := range batches {
		db, meas, field := b.tags[TagDB], b.tags[TagMeasurement], b.tags[TagField]
		k := db + "\x00" + meas + "\x00" + field
		want, ok := h.ftypes.known(k)
		if !ok {
			t, err := h.catalogFieldType(ctx, db, meas, field)
			if err != nil {
				return nil, 0, "", fmt.Errorf("looking up the type of field %q of %q: %w", field, meas, err)
			}
			if t == series.Unknown {
				t = b.pts.Type // a new field: this batch (the first of the request to bring it) sets it
			}
			want = h.ftypes.settle(k, t)
		}
		if b.pts.Type == want {
			continue
		}
		if reason == "" {
			reason = fmt.Sprintf("field type conflict: input field %q on measurement %q is type %s, already exists as type %s",
				field, meas, influxType(b.pts.Type), influxType(want))
		}
		if bad == nil {
			bad = map[line]bool{}
		}
		id := lineID(b)
		for _, t := range b.pts.T {
			bad[line{id, t}] = true
		}
	}
	if bad == nil {
		return batches, 0, "", nil
	}
	kept := batches[:0]
	for _, b := range batches {
		id := lineID(b)
		var left series.Points
		left.Type = b.pts.Type
		for i, t := range b.pts.T {
			if !bad[line{id, t}] {
				left.AppendFrom(&b.pts, i)
			}
		}
		if left.Len() == 0 {
			continue
		}
		b.pts = left
		kept = append(kept, b)
	}
	return kept, len(bad), reason, nil
}

// lineID returns a line-protocol series' key without its field: what the series of
// one line's fields share.
func lineID(b *seriesBatch) string {
	return b.key[:len(b.key)-len(tagEscaper.Replace(b.tags[TagField]))-1]
}
