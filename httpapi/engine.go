package httpapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
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
	// math.MaxInt64: one window of the whole range. A range of more windows than one
	// answer holds fails with a *TooLargeError; the caller asks again page by page.
	Aggregate(ctx context.Context, key string, from, to int64, every time.Duration) (series.Type, []agg.Window, error)
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
	// Fields, when not empty, keeps the series whose TagField is one of them: the
	// union of the listings of Match with each field, read as one listing (their
	// shared posting lists and their entries read once).
	Fields []string
}

// SeriesInfo is one series as the catalog knows it.
type SeriesInfo struct {
	Key  string
	Type series.Type
	Tags map[string]string
	// First and Last bound the times written to the series (rounded out: no stored
	// point lies outside them), when HasBounds.
	First, Last int64
	HasBounds   bool

	// listed is the entry the node's listing read (NodeEngine.Series), handed back to
	// its EndsMany so that the series' entry is not read twice; zero from any other
	// engine.
	listed tsdb.Listed
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
	Corruptions       int64 // reads that met damaged stored bytes
	WALBytesDropped   int64 // write-ahead log bytes lost behind a damaged record at start-up
	Refilling         bool  // lost writes at start-up; the peers' repair passes have not all ended

	RepairKnown     bool  // the repair counters below are filled in
	RepairPasses    int64 // repair passes run
	UnderReplicated int64 // pairs with fewer than rf confirmed copies at the last pass
	HintedPoints    int64 // points held for unreachable replicas at the last pass
	PushedPairs     int64 // pairs pushed to owners that lacked them
	PushedPoints    int64
	HandedOff       int64 // pairs handed off and deleted here
	ReadRepairs     int64

	ReplicaReads int64 // read and aggregate requests answered as a replica for other nodes

	LiveMembers int // members this node sees alive

	Uplinks []wire.UplinkStats // the node's uplinks (package uplink)
}

var (
	// ErrNeedsCatalog is wrapped by what only the series catalog can answer: SHOW
	// queries, tag matches that are not all equalities, GROUP BY a tag the query
	// does not pin. /query answers it with 501.
	ErrNeedsCatalog = errors.New("needs the series catalog, which this node does not have yet")
	// ErrUnknownSeries is wrapped by a read of a series never written.
	ErrUnknownSeries = errors.New("unknown series")
	// ErrStringSeries is wrapped by Aggregate of a series of strings, whose partials
	// the replicas do not keep: count, first and last of it are computed from its points.
	ErrStringSeries = errors.New("series holds strings")
)

// TooLargeError is Engine.Aggregate's refusal of a range of more windows than one
// answer holds: ask for pages of at most MaxWindows windows (agg.PageEnd).
type TooLargeError struct {
	Key        string
	Windows    int64 // windows the range meets
	MaxWindows int64 // the most one answer holds, ≥ 1
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("aggregate of %q: %d windows, at most %d per answer: ask in pages of at most %d windows",
		e.Key, e.Windows, e.MaxWindows, e.MaxWindows)
}
