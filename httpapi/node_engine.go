package httpapi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// NodeEngine is the Engine over a running node's coordinator: writes and reads go
// through it exactly as `tsdht put` and `get` do (batched per shard, acknowledged at
// the write quorum; reads complete or failed).
//
// Series and the tags of writes go through the cluster's series catalog. Aggregate
// asks the replicas for their partial aggregates (tsdb/agg, through the coordinator's
// Aggregate) and returns them as they are.
type NodeEngine struct {
	node *tsdb.Node

	// MaxReadBytes bounds the answer of one Read (points at their wire size, about 16
	// bytes a float point), checked page by page as the coordinator reads, so that a
	// series dense over a query's range fails the statement before it is held in
	// memory. 0 takes DefaultMaxReadBytes.
	MaxReadBytes int

	tagMu sync.Mutex
	tags  map[string]struct{} // series whose tags this engine recorded
}

// DefaultMaxReadBytes is NodeEngine.MaxReadBytes' default: the size of
// Config.MaxQueryPoints' default of float points.
const DefaultMaxReadBytes = 32 << 20

// NewNodeEngine returns the engine over node.
func NewNodeEngine(node *tsdb.Node) *NodeEngine { return &NodeEngine{node: node} }

// Write implements Engine: the points, then — once per series and process — its tags
// into the series' catalog entry, so that SHOW and WHERE on tags find it.
func (e *NodeEngine) Write(ctx context.Context, key string, tags map[string]string, pts series.Points) (int, error) {
	n, err := e.node.Coordinator().Put(ctx, key, pts, writeOptions)
	if err != nil || len(tags) == 0 || e.tagged(key) {
		return n, err
	}
	if err := e.recordTags(ctx, key, tags); err != nil {
		return n, fmt.Errorf("stored %d points of %q, but recording its tags failed: %w", n, key, err)
	}
	return n, nil
}

// maxTagged bounds the series whose tags this engine remembers having recorded.
const maxTagged = 1 << 16

func (e *NodeEngine) tagged(key string) bool {
	e.tagMu.Lock()
	defer e.tagMu.Unlock()
	_, ok := e.tags[key]
	return ok
}

func (e *NodeEngine) remember(key string) {
	e.tagMu.Lock()
	defer e.tagMu.Unlock()
	if e.tags == nil || len(e.tags) >= maxTagged {
		e.tags = make(map[string]struct{})
	}
	e.tags[key] = struct{}{}
}

// Read implements Engine.
func (e *NodeEngine) Read(ctx context.Context, key string, from, to int64) (series.Points, error) {
	res, err := e.node.Coordinator().Get(ctx, key, from, to, tsdb.GetOptions{MaxBytes: e.maxReadBytes()})
	return e.readAnswer(key, res, err)
}

// maxReadBytes is MaxReadBytes or its default.
func (e *NodeEngine) maxReadBytes() int {
	if e.MaxReadBytes == 0 {
		return DefaultMaxReadBytes
	}
	return e.MaxReadBytes
}

// readAnswer is Read's answer from the coordinator's read of key.
func (e *NodeEngine) readAnswer(key string, res tsdb.Result, err error) (series.Points, error) {
	if err != nil {
		switch errorCode(err) {
		case tsdb.CodeUnknownSeries:
			return series.Points{}, fmt.Errorf("%w: %v", ErrUnknownSeries, err)
		case tsdb.CodeTooLarge:
			return series.Points{}, fmt.Errorf("the points of %q in the range exceed %d bytes (NodeEngine.MaxReadBytes): narrow the time range or aggregate with GROUP BY time()", key, e.maxReadBytes())
		}
		return series.Points{}, err
	}
	return res.Points, nil
}

// Aggregate implements Engine with the replicas' partial aggregates. A range of more
// windows than one coordinated aggregate returns is refused before any replica works
// on it, so that the caller asks for it in pages.
func (e *NodeEngine) Aggregate(ctx context.Context, key string, from, to int64, every time.Duration) (series.Type, []agg.Window, error) {
	if tooLarge := tooManyWindows(key, from, to, every); tooLarge != nil {
		return series.Unknown, nil, tooLarge
	}
	res, err := e.node.Coordinator().Aggregate(ctx, key, from, to, int64(every), tsdb.GetOptions{})
	return aggAnswer(key, from, to, every, res, err)
}

// tooManyWindows is the refusal of an aggregate of more windows than one answer holds,
// or nil.
func tooManyWindows(key string, from, to int64, every time.Duration) *TooLargeError {
	tooLarge := &TooLargeError{Key: key, Windows: agg.WindowCount(from, to, int64(every)), MaxWindows: tsdb.MaxAggWindows}
	if tooLarge.Windows > tooLarge.MaxWindows {
		return tooLarge
	}
	return nil
}

// aggAnswer is Aggregate's answer from the coordinator's aggregate of key.
func aggAnswer(key string, from, to int64, every time.Duration, res wire.AggResult, err error) (series.Type, []agg.Window, error) {
	switch {
	case errorCode(err) == tsdb.CodeUnknownSeries:
		return series.Unknown, nil, fmt.Errorf("%w: %v", ErrUnknownSeries, err)
	case errorCode(err) == tsdb.CodeTooLarge:
		// Fewer windows than the limit can still make too large an answer (rollups,
		// frames): pages of half as many.
		n := agg.WindowCount(from, to, int64(every))
		return series.Unknown, nil, &TooLargeError{Key: key, Windows: n, MaxWindows: max(1, n/2)}
	case err != nil:
		return series.Unknown, nil, err
	}
	if res.Type == series.String {
		return res.Type, nil, stringsErr(key)
	}
	out := res.Windows[:0]
	for _, w := range res.Windows {
		if w.Count > 0 {
			out = append(out, w)
		}
	}
	return res.Type, out, nil
}

func stringsErr(key string) error {
	return fmt.Errorf("%w: %q: only count, first and last apply, computed from its points", ErrStringSeries, key)
}

// Series implements Engine from the cluster's series catalog.
func (e *NodeEngine) Series(ctx context.Context, q SeriesQuery) ([]SeriesInfo, error) {
	cq := catalog.Query{Prefix: q.Prefix}
	for k, v := range q.Match {
		cq.Match = append(cq.Match, catalog.Tag{K: k, V: v})
	}
	qs := []catalog.Query{cq}
	if len(q.Fields) > 0 {
		qs = qs[:0]
		for _, f := range q.Fields {
			fq := catalog.Query{Prefix: q.Prefix, Match: append(slices.Clip(cq.Match), catalog.Tag{K: TagField, V: f})}
			qs = append(qs, fq)
		}
	}
	for _, fq := range qs {
		sort.Slice(fq.Match, func(i, j int) bool { return fq.Match[i].K < fq.Match[j].K })
	}
	listed, err := e.node.Coordinator().SeriesListed(ctx, qs)
	if err != nil {
		return nil, err
	}
	out := make([]SeriesInfo, 0, len(listed))
	for _, l := range listed {
		en := l.Entry
		si := SeriesInfo{Key: en.Key, Type: en.Type, Tags: make(map[string]string, len(en.Tags)),
			First: en.First, Last: en.Last, HasBounds: en.HasBounds, listed: l}
		for _, t := range en.Tags {
			si.Tags[t.K] = t.V
		}
		out = append(out, si)
	}
	return out, nil
}

// Ready implements Engine: the node sees itself alive in the membership.
func (e *NodeEngine) Ready() error {
	self := e.node.DHT().Self().ID
	for _, p := range e.node.DHT().Live() {
		if p.ID == self {
			return nil
		}
	}
	return errors.New("this node has not joined its cluster yet")
}

// Stats implements Engine, from the node's own counters, read in process.
func (e *NodeEngine) Stats(ctx context.Context) (Stats, error) {
	st := e.node.Store().Stats()
	ns := e.node.Stats()
	r := ns.Repair
	return Stats{Uplinks: ns.Uplinks, Shards: st.Shards, Series: st.Series, Points: st.Points, DiskBytes: st.DiskBytes,
		Dropped: st.DroppedQuanta, FlashBytesWritten: st.FlashBytesWritten, AppendedPoints: st.AppendedPoints,
		BufferedAppends: st.BufferedAppends, BufferDrains: st.BufferDrains,
		Corruptions: st.Corruptions, WALBytesDropped: st.WALBytesDropped, Refilling: ns.Refilling,
		LiveMembers: len(e.node.DHT().Live()), ReplicaReads: ns.ReadRequests,
		RepairKnown: true, RepairPasses: r.Passes, UnderReplicated: r.UnderReplicated, HintedPoints: r.HintedPoints,
		PushedPairs: r.PushedPairs, PushedPoints: r.PushedPoints, HandedOff: r.DroppedPairs, ReadRepairs: r.ReadRepairs}, nil
}

// Close releases nothing: the engine holds no connection of its own (it reaches
// its node in process). It is here for callers that close what they open.
func (e *NodeEngine) Close() error { return nil }

// errorCode returns the machine-readable code of a tsdb/rpc error, or "".
func errorCode(err error) string {
	var coded interface{ ErrorCode() string }
	if errors.As(err, &coded) {
		return coded.ErrorCode()
	}
	return ""
}

// writeOptions are those of every write through HTTP: a new series gets quanta fitted
// to the rate of its points in its first write (quanta.Fit), since line protocol and
// remote write carry sensors of every rate, not only 60 Hz channels. A first write of
// one point shows no rate: such writers (Telegraf, a meter) report every few seconds
// or slower, one point a request, so an hour holds a few hundred of their points.
var writeOptions = tsdb.PutOptions{FitQuanta: true, Quantum: UnknownRateQuantum}

// UnknownRateQuantum is the quantum of a series whose first write through HTTP holds
// one point of it.
const UnknownRateQuantum quanta.Quantum = 3600
