package httpapi

import (
	"context"
	"math"
	"time"

	"github.com/influxdata/influxql"

	"github.com/tsdht/tsdht/tsdb/catalog"
)

// ShapeLister is an Engine that answers a measurement's fields, their types and its
// tag keys from the catalog's shapes (catalog.Shape: one small answer per node), so
// that SELECT *, SHOW FIELD KEYS and the type of a field need not list every series of
// the measurement. Without it, or when it fails, they list the series (Engine.Series).
type ShapeLister interface {
	Shape(ctx context.Context, q catalog.ShapeQuery) (catalog.Shape, error)
}

// Shape implements ShapeLister through the node's coordinator.
func (e *NodeEngine) Shape(ctx context.Context, q catalog.ShapeQuery) (catalog.Shape, error) {
	return e.node.Coordinator().Shape(ctx, q)
}

// shape returns the shape of measurement meas of database db (every measurement of
// it when meas is ""). ok is false when the engine cannot answer one: the caller
// lists the series instead, which answers the same or fails saying why.
func (h *Handler) shape(ctx context.Context, db, meas string) (_ catalog.Shape, ok bool, err error) {
	return h.shapeWith(ctx, db, meas, "")
}

// shapeWith is shape carrying the values of tag key valuesOf too, when not "".
func (h *Handler) shapeWith(ctx context.Context, db, meas, valuesOf string) (_ catalog.Shape, ok bool, err error) {
	sl, can := h.eng.(ShapeLister)
	if !can {
		return catalog.Shape{}, false, nil
	}
	prefix := db + "/"
	if meas != "" {
		prefix += measurementEscaper.Replace(meas)
	}
	s, err := sl.Shape(ctx, catalog.ShapeQuery{Prefix: prefix, DB: db, Measurement: meas, ValuesOf: valuesOf})
	if err != nil {
		return catalog.Shape{}, false, ctx.Err() // nil unless the statement is over
	}
	return s, true, nil
}

// shardGroupRange returns the times [lo, hi) of the shard groups [from, to) meets: as
// InfluxDB lists the fields of the shard groups a range meets, a field none of whose
// series was written in those weeks (by the catalog's bounds) is left out.
func shardGroupRange(from, to int64) (lo, hi int64) {
	lo, hi = from, to
	if lo != math.MinInt64 {
		lo = time.Unix(0, lo).UTC().Truncate(shardGroup).UnixNano()
	}
	if hi != math.MaxInt64 && hi > math.MinInt64 {
		hi = time.Unix(0, hi-1).UTC().Truncate(shardGroup).Add(shardGroup).UnixNano()
	}
	return lo, hi
}

// shapeDimensions returns what FieldDimensions answers from a measurement's shape:
// each field written in the shard groups of [from, to), of the type of its first
// series by key, and the measurement's tag keys.
func shapeDimensions(s catalog.Shape, meas string, from, to int64) (map[string]influxql.DataType, map[string]struct{}) {
	lo, hi := shardGroupRange(from, to)
	fields := map[string]influxql.DataType{}
	first := map[string]string{} // field → MinKey of the row that gave its type
	for i := range s.Fields {
		f := &s.Fields[i]
		if f.Measurement != meas || hi == math.MinInt64 || !f.Meets(lo, hi-1) {
			continue
		}
		if k, seen := first[f.Field]; !seen || f.MinKey < k {
			first[f.Field], fields[f.Field] = f.MinKey, influxType2(f.Type)
		}
	}
	dims := map[string]struct{}{}
	for _, k := range s.TagKeys[meas] {
		dims[k] = struct{}{}
	}
	return fields, dims
}

// shapeFieldKeys returns SHOW FIELD KEYS' fields from the shape of a database: per
// measurement the sources select, each field with the type of its last series by key,
// as the listing of every series answers it (fieldKeyRows).
func shapeFieldKeys(s catalog.Shape, sources influxql.Sources) map[string]map[string]string {
	out := map[string]map[string]string{}
	last := map[[2]string]string{} // (measurement, field) → MaxKey of the row that gave its type
	for _, f := range s.Fields {
		if len(sources) > 0 && !inSources(f.Measurement, sources) {
			continue
		}
		if out[f.Measurement] == nil {
			out[f.Measurement] = map[string]string{}
		}
		mf := [2]string{f.Measurement, f.Field}
		if k, seen := last[mf]; !seen || f.MaxKey > k {
			last[mf], out[f.Measurement][f.Field] = f.MaxKey, influxType(f.Type)
		}
	}
	return out
}
