package httpapi

import (
	"context"
	"errors"
	"time"

	"github.com/tsdht/tsdht/tsdb/series"
)

// Engine is what the HTTP surface needs from the cluster: the facade over tsdb. A
// method a build cannot answer yet returns an error wrapping ErrNeedsCatalog (or
// another error), never a made-up answer.
type Engine interface {
	// Write stores points of one series and returns how many reached the write quorum.
	// tags are the series' tags (line protocol: the line's tags plus __db,
	// __measurement, __field; Prometheus: the labels), for the catalog.
	Write(ctx context.Context, key string, tags map[string]string, pts series.Points) (int, error)
	// Read returns the points of a series with from <= t < to, ascending. A series
	// never written returns an error wrapping ErrUnknownSeries; a read that would be
	// partial fails.
	Read(ctx context.Context, key string, from, to int64) (series.Points, error)
	// Aggregate returns the non-empty windows of length every (aligned to multiples of
	// every since the epoch) of a series' points in [from, to), ascending. every may be
	// math.MaxInt64: one window of the whole range.
	Aggregate(ctx context.Context, key string, from, to int64, every time.Duration) (series.Type, []Window, error)
	// Series lists the series whose tags include every pair of q.Match and whose key
	// starts with q.Prefix. Without a catalog it returns ErrNeedsCatalog.
	Series(ctx context.Context, q SeriesQuery) ([]SeriesInfo, error)
	// Ready returns nil when the node has joined its cluster and its store is open,
	// else an error saying what is missing.
	Ready() error
	// Stats returns the node's counters for /metrics.
	Stats(ctx context.Context) (Stats, error)
}

// SeriesQuery selects series of the catalog.
type SeriesQuery struct {
	Match  map[string]string // tag = value pairs every series must carry
	Prefix string            // key prefix ("" = any)
}

// SeriesInfo is one series as the catalog knows it.
type SeriesInfo struct {
	Key  string
	Type series.Type
	Tags map[string]string
}

// Stats are a node's counters, as /metrics exports them.
type Stats struct {
	Shards    int   // (shard, series) pairs held
	Series    int   // series with a declared type held
	Points    int64 // points held
	DiskBytes int64 // bytes the store takes on disk
	Dropped   int64 // quanta dropped by retention or the disk budget

	FlashBytesWritten int64 // bytes the store wrote to flash since it opened (WAL, flushes, compactions)
	AppendedPoints    int64 // new points stored since the store opened
	BufferedAppends   int64 // appends that waited in the store's write buffer (--sync batch, none)
	BufferDrains      int64 // commits that brought the write buffer to the engine

	RepairKnown     bool  // the repair counters below are filled in
	RepairPasses    int64 // repair passes run
	UnderReplicated int64 // pairs with fewer than rf confirmed copies at the last pass
	HintedPoints    int64 // points held for unreachable replicas at the last pass
	PushedPairs     int64 // pairs pushed to owners that lacked them
	PushedPoints    int64
	HandedOff       int64 // pairs handed off and deleted here
	ReadRepairs     int64

	LiveMembers int // members this node sees alive
}

// Window is the aggregate of one GROUP BY time window's points. Values are float64:
// int series convert exactly up to 2^53.
type Window struct {
	Start         int64 // window start, ns since the epoch
	Count         int64
	Sum           float64
	Min, Max      float64
	MinT, MaxT    int64 // when the first point holding Min/Max was stamped
	First, Last   float64
	FirstT, LastT int64
	Mean          float64
	M2            float64 // sum of squared deviations from Mean (Welford)
	ExtremaT      bool    // MinT and MaxT are known (partials stored by older nodes lack them)
}

var (
	// ErrNeedsCatalog is wrapped by what only the series catalog can answer: SHOW
	// queries, tag matches that are not all equalities, GROUP BY a tag the query
	// does not pin. /query answers it with 501.
	ErrNeedsCatalog = errors.New("needs the series catalog, which this node does not have yet")
	// ErrUnknownSeries is wrapped by a read of a series never written.
	ErrUnknownSeries = errors.New("unknown series")
)

// aggregatePoints computes the windows of pts (sorted by time) in [from, to).
// It is the fallback Aggregate computes locally from the points it read; an engine
// whose replicas compute partial aggregates replaces it.
func aggregatePoints(pts *series.Points, from, to int64, every time.Duration) []Window {
	var out []Window
	e := int64(every)
	for i, t := range pts.T {
		if t < from || t >= to {
			continue
		}
		v := value(pts, i)
		start := floorDiv(t, e) * e
		if len(out) == 0 || out[len(out)-1].Start != start {
			out = append(out, Window{Start: start, Min: v, Max: v, MinT: t, MaxT: t, First: v, FirstT: t, ExtremaT: true})
		}
		w := &out[len(out)-1]
		w.Count++
		w.Sum += v
		if v < w.Min {
			w.Min, w.MinT = v, t
		}
		if v > w.Max {
			w.Max, w.MaxT = v, t
		}
		w.Last, w.LastT = v, t
		d := v - w.Mean
		w.Mean += d / float64(w.Count)
		w.M2 += d * (v - w.Mean)
	}
	return out
}

// mergeWindow returns the window of the points of a and b, windows of the same start
// over different series. Selectors choose as InfluxDB does among equal candidates:
// min and max the earliest point, first and last the greater value.
func mergeWindow(a, b Window) Window {
	if a.Count == 0 {
		return b
	}
	if b.Count == 0 {
		return a
	}
	out := a
	out.Count = a.Count + b.Count
	out.Sum = a.Sum + b.Sum
	na, nb, n := float64(a.Count), float64(b.Count), float64(a.Count+b.Count)
	d := b.Mean - a.Mean
	out.Mean = a.Mean + d*nb/n
	out.M2 = a.M2 + b.M2 + d*d*na*nb/n
	out.ExtremaT = a.ExtremaT && b.ExtremaT
	if b.Min < a.Min || (b.Min == a.Min && b.MinT < a.MinT) {
		out.Min, out.MinT = b.Min, b.MinT
	}
	if b.Max > a.Max || (b.Max == a.Max && b.MaxT < a.MaxT) {
		out.Max, out.MaxT = b.Max, b.MaxT
	}
	if b.FirstT < a.FirstT || (b.FirstT == a.FirstT && b.First > a.First) {
		out.First, out.FirstT = b.First, b.FirstT
	}
	if b.LastT > a.LastT || (b.LastT == a.LastT && b.Last > a.Last) {
		out.Last, out.LastT = b.Last, b.LastT
	}
	return out
}

func value(p *series.Points, i int) float64 {
	if p.Type == series.Int {
		return float64(p.I[i])
	}
	return p.F[i]
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}
