package wire

import (
	"fmt"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
)

// Analytics methods.
const (
	// MethodAgg asks a replica for windowed partial aggregates of shards, or only their
	// statistics digests: AggReq → AggResp. Windows inside one quantum come from the
	// points; windows covering whole quanta from the pairs' statistics.
	MethodAgg = "tsdb.agg"
	// MethodAggregate coordinates a windowed aggregate for a thin client:
	// AggregateReq → AggregateResp.
	MethodAggregate = "tsdb.aggregate"
	// MethodLatest coordinates a series' latest point: LatestReq → LatestResp.
	MethodLatest = "tsdb.latest"
)

// MaxAggWindows bounds the windows of one coordinated aggregate (MethodAggregate).
const MaxAggWindows = 32 << 10

// ShardAgg asks for one series' windows in one shard over From <= t < To.
type ShardAgg struct {
	ID     []byte `msgpack:"id"`
	Start  int64  `msgpack:"q"`
	// Q is the quantum's length in seconds, the series' own; 0 is the cluster's.
	Q int64 `msgpack:"ql,omitempty"`
	Key    string `msgpack:"k"`
	From   int64  `msgpack:"f"`
	To     int64  `msgpack:"t"`
	Digest bool   `msgpack:"d"` // only the statistics digest, no windows
}

// AggReq asks a replica for shards' windows of width Every ns (MethodAgg).
type AggReq struct {
	Every  int64      `msgpack:"e"`
	Shards []ShardAgg `msgpack:"s"`
}

// AggResp answers an AggReq, one ShardAggResult per ShardAgg, in order.
type AggResp struct {
	Shards []ShardAggResult `msgpack:"s"`
}

// ShardAggResult answers one ShardAgg. Count and Hash digest the replica's whole pair
// (agg.Partial's Count and order-independent Hash): replicas with equal digests hold the
// same points. Held is as in ShardResult.
type ShardAggResult struct {
	Held  bool        `msgpack:"h"`
	Count int64       `msgpack:"c"`
	Hash  uint64      `msgpack:"x"`
	Type  series.Type `msgpack:"y"`
	// Packed holds the windows on the wire (agg.AppendWindowsWire); Windows holds them
	// decoded (Unpack), and is what a replica in the same process fills.
	Packed  []byte       `msgpack:"w,omitempty"`
	Windows []agg.Window `msgpack:"-"`
}

// Pack moves Windows into Packed for the wire.
func (r *ShardAggResult) Pack() {
	if len(r.Windows) > 0 {
		r.Packed = agg.AppendWindowsWire(nil, r.Type, r.Windows)
	}
	r.Windows = nil
}

// Unpack decodes Packed into Windows.
func (r *ShardAggResult) Unpack() error {
	if len(r.Packed) == 0 {
		return nil
	}
	t, ws, err := agg.DecodeWindowsWire(r.Packed)
	if err != nil {
		return err
	}
	if r.Type != series.Unknown && t != r.Type {
		return fmt.Errorf("windows of type %s in an answer of type %s", t, r.Type)
	}
	r.Windows, r.Packed = ws, nil
	return nil
}

// AggregateReq asks a node to coordinate windows of width Every over From <= t < To
// (MethodAggregate).
type AggregateReq struct {
	Key          string `msgpack:"k"`
	From         int64  `msgpack:"f"`
	To           int64  `msgpack:"t"`
	Every        int64  `msgpack:"e"`
	ReadQuorum   int    `msgpack:"r"`
	AllowPartial bool   `msgpack:"partial"`
}

// AggregateResp answers an AggregateReq: the non-empty windows, ascending, packed
// (agg.AppendWindowsWire).
type AggregateResp struct {
	Type    series.Type `msgpack:"y"`
	Packed  []byte      `msgpack:"w"`
	Partial bool        `msgpack:"partial"`
	Missing int         `msgpack:"missing"`
}

// AggResult is the answer to a windowed aggregate.
type AggResult struct {
	Type    series.Type  // the series' value type
	Windows []agg.Window // non-empty windows, ascending
	// Partial and Missing as in Result.
	Partial bool
	Missing int
}

// LatestReq asks for the latest point of a series at or before Before (MethodLatest).
type LatestReq struct {
	Key    string `msgpack:"k"`
	Before int64  `msgpack:"b"` // ns; the search starts here and walks back
	Since  int64  `msgpack:"s"` // ns; how far back the search goes
}

// LatestResp is a series' latest point in [Since, Before): one point, or none.
type LatestResp struct {
	Point series.Points `msgpack:"p"`
}

// MethodBounds coordinates a series' time bounds within a range: BoundsReq → BoundsResp.
// A client asks it before a read or an aggregate over a range much wider than the
// series, and reads only between the bounds.
const MethodBounds = "tsdb.bounds"

// BoundsReq asks for the bounds of a series' points with From <= t < To (MethodBounds).
type BoundsReq struct {
	Key  string `msgpack:"k"`
	From int64  `msgpack:"f"`
	To   int64  `msgpack:"t"`
}

// BoundsResp bounds a series' points in the range asked: every point with From <= t <
// To has First <= t <= Last. Last is the time of the latest point there (exact); First
// may be earlier than the first point (the catalog keeps it rounded down to an hour).
// Found is false when the range holds no point.
type BoundsResp struct {
	Found bool  `msgpack:"ok"`
	First int64 `msgpack:"f"`
	Last  int64 `msgpack:"l"`
}
