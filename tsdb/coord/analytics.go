package coord

import (
	"context"
	"math"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Analytics: windowed aggregates computed where the data lives.
//
// A coordinator asks each shard's closest replica for its partial aggregates per window
// and the other replicas only for their statistics digest: the pair's count and
// order-independent point-set hash. Each node gets one request for all of its shards of
// a page (wire.MethodAggSeries: the series named once, shards by quantum start, answers
// packed; wire.MethodAgg for a node that does not know it), and reads their statistics,
// and the points of those whose windows cut their quantum, in one store pass
// (store.AggregateBatch). A shard whose held replicas all agree
// with the one that sent windows is answered by those windows. Otherwise the replicas
// hold different versions: the shard falls back to a read of its points — the read's
// rounds, union and last-write-wins merge, read repair and completeness rule — and is
// aggregated from the merged points. So an aggregate is complete or fails (or, asked
// so, is marked partial), never silently short, like a read.

// Limits.
const (
	// maxAggWindowsPerRequest bounds the windows one replica answer may carry (about
	// 80 bytes each for floats), so the answer stays well inside a frame: the shards
	// of one request are fewer when windows are narrow.
	maxAggWindowsPerRequest = 16 << 10
	// maxAggShardsPerRequest bounds the shards of one replica request (packed, a few
	// bytes a shard: wire.MethodAggSeries; at most wire.MaxAggSeriesShards). Fewer,
	// larger requests cost less (at most Config.ReadConcurrency are in flight): a day
	// at 1-minute windows on 18 nodes measured 388 ms with 64, 99 ms with 512.
	maxAggShardsPerRequest = 512
	// aggPageQuanta is how many quanta an aggregate plans and asks for at once: what
	// it holds besides its windows is bounded by it (a few hundred bytes a quantum),
	// and each page costs a round trip, waiting for the slowest replica. Larger than a
	// read's page (readPageQuanta), as an answer is windows, not points.
	AggPageQuanta = 2048
	// MaxAggWindows bounds the windows of one coordinated aggregate. The client asks
	// for longer ranges in parts (client.Agg).
	MaxAggWindows = wire.MaxAggWindows
)

// aggAnswer is what one replica said about one shard.
type aggAnswer struct {
	ok     bool
	res    wire.ShardAggResult
	isData bool // res.Windows are the replica's windows, not only its digest
}

// Aggregate returns the non-empty windows of width every (ns) over the points of a
// series with from <= t < to, ascending, each window's partial aggregate merged across
// shards. Windows are aligned to multiples of every since the epoch.
func (c *Coordinator) Aggregate(ctx context.Context, key string, from, to, every int64, opt wire.GetOptions) (wire.AggResult, error) {
	if res, ok, err := c.rollupAggregate(ctx, key, from, to, every, opt); ok {
		return res, err
	}
	return c.aggregate(ctx, key, from, to, every, opt, false)
}

// aggregate is Aggregate; byQuorum settles a shard once a read quorum of replicas agree
// (settleAgg), for Latest, whose answer is the latest acknowledged point: a replica
// still receiving a write then costs no second round.
func (c *Coordinator) aggregate(ctx context.Context, key string, from, to, every int64, opt wire.GetOptions, byQuorum bool) (wire.AggResult, error) {
	r, err := c.checkGet(key, from, to, opt)
	if err != nil {
		return wire.AggResult{}, err
	}
	if err := agg.CheckWidth(every); err != nil {
		return wire.AggResult{}, rpc.Errorf(wire.CodeBadInput, "%v", err)
	}
	desc, err := c.types.lookup(ctx, key)
	if err != nil {
		return wire.AggResult{}, err
	}
	typ, q := desc.Type, desc.Q
	var turn *longTurn // nil: a short aggregate
	if from < to && (q.Start(to-1)-q.Start(from))/int64(q) >= ReadPageQuanta {
		// A long aggregate takes its turn with the long reads, before it allocates
		// anything for its range, and its pages are paced (longread.go).
		if turn, err = c.longRead(ctx, key); err != nil {
			return wire.AggResult{}, err
		}
		defer turn.release()
	}
	cover, err := coverQuanta(q, from, to)
	if err != nil {
		return wire.AggResult{}, rpc.Errorf(wire.CodeBadInput, "%v", err)
	}
	res := wire.AggResult{Type: typ}
	var lists [][]agg.Window
	// Page through the quanta, as Get does: what an aggregate holds besides its windows
	// is bounded whatever its range.
	for lo := 0; lo < cover.n; lo += AggPageQuanta {
		if err := ctx.Err(); err != nil {
			return wire.AggResult{}, rpc.Errorf(wire.CodeUnavailable, "aggregate of %q: %v", key, err)
		}
		if err := turn.page(ctx, func(ctx context.Context, b *pageBufs) error {
			b.starts = cover.pageInto(b.starts, lo, AggPageQuanta)
			return c.aggregatePage(ctx, b, key, q, b.starts, from, to, every, r, byQuorum, &res, &lists)
		}); err != nil {
			return wire.AggResult{}, err
		}
	}
	if err := finishAgg(key, &res, lists, cover.n, opt.AllowPartial); err != nil {
		return wire.AggResult{}, err
	}
	return res, nil
}

// finishAgg completes the aggregate res of key over n quanta from the windows of its
// shards, lists: it fails if shards are missing (unless allowPartial) or the windows are
// more than one answer holds.
func finishAgg(key string, res *wire.AggResult, lists [][]agg.Window, n int, allowPartial bool) error {
	if res.Missing > 0 {
		if !allowPartial {
			return rpc.Errorf(wire.CodePartial, "aggregate of %q: %d of %d shards could not be read from any replica", key, res.Missing, n)
		}
		res.Partial = true
	}
	res.Windows = agg.Combine(lists...)
	if len(res.Windows) > MaxAggWindows {
		return rpc.Errorf(wire.CodeTooLarge, "aggregate of %q: %d windows, at most %d per request: ask for a shorter range or wider windows",
			key, len(res.Windows), MaxAggWindows)
	}
	return nil
}

// aggregatePage aggregates the shards of the quanta of length q starting at starts,
// within [from, to): it appends their windows to lists and counts in res.Missing the shards
// no replica could serve. byQuorum is aggregate's.
func (c *Coordinator) aggregatePage(ctx context.Context, b *pageBufs, key string, q quanta.Quantum, starts []int64, from, to, every int64, r int, byQuorum bool, res *wire.AggResult, lists *[][]agg.Window) error {
	spans, err := c.planRead(ctx, b, key, q, starts, from, to)
	if err != nil {
		return err
	}
	answers := c.aggRound(ctx, b, key, spans, every)
	if err := ctx.Err(); err != nil {
		// The caller has gone: reading the points of what went unanswered would be
		// for nobody.
		return rpc.Errorf(wire.CodeUnavailable, "aggregate of %q: %v", key, err)
	}
	c.settlePage(ctx, b, key, spans, answers, every, r, byQuorum, res, lists)
	return nil
}

// settlePage settles the shards spans of key from the first round's answers: it
// appends their windows to lists, reading the points of the shards whose replicas
// disagree, and counts in res.Missing the shards no replica could serve.
func (c *Coordinator) settlePage(ctx context.Context, b *pageBufs, key string, spans []shardSpan, answers [][]aggAnswer, every int64, r int, byQuorum bool, res *wire.AggResult, lists *[][]agg.Window) {
	var differ []shardSpan // shards whose replicas disagree: read their points
	for i := range spans {
		ws, ok, complete := settleAgg(answers[i], r, byQuorum)
		switch {
		case ok:
			*lists = append(*lists, ws)
		case complete:
			// No replica holds the shard, and a quorum says so: it is empty.
		default:
			differ = append(differ, spans[i])
		}
	}
	if len(differ) > 0 {
		read := c.readRounds(ctx, b, key, differ)
		for i := range differ {
			pts, complete := mergeAnswers(read[i], r)
			if !complete {
				res.Missing++
				continue
			}
			c.readRepair(key, &differ[i], read[i], pts)
			*lists = append(*lists, agg.Windows(&pts, differ[i].from, differ[i].to, every))
		}
	}
}

// settleAgg decides one shard from the first round. ok: the windows in hand are the
// shard's (the replica that sent them held it and every other held replica agrees —
// or, byQuorum, at least r replicas, itself included, hold the same copy by digest).
// complete without ok: no replica holds the shard and enough answered to say so.
// Neither: the replicas differ, or the one asked for windows failed: read the points.
//
// byQuorum is enough for the latest acknowledged point: a write was acknowledged by a
// write quorum, which meets any r replicas (w + r > rf), so r agreeing copies all hold
// it; a replica that differs lacks it or holds a write no quorum acknowledged yet.
func settleAgg(ans []aggAnswer, r int, byQuorum bool) (ws []agg.Window, ok, complete bool) {
	var data *aggAnswer
	held, answered := false, 0
	for k := range ans {
		a := &ans[k]
		if !a.ok {
			continue
		}
		answered++
		if a.res.Held && a.res.Count > 0 {
			held = true
			if a.isData {
				data = a
			}
		}
	}
	if !held {
		return nil, false, answered >= min(r, len(ans))
	}
	if data == nil {
		return nil, false, false
	}
	agree, differ := 0, 0
	for k := range ans {
		a := &ans[k]
		if !a.ok {
			continue
		}
		if a.res.Held && a.res.Count == data.res.Count && a.res.Hash == data.res.Hash {
			agree++
		} else if a.res.Held && a.res.Count > 0 {
			differ++
		}
	}
	if byQuorum {
		if agree < min(r, len(ans)) {
			return nil, false, false
		}
	} else if differ > 0 {
		return nil, false, false
	}
	return data.res.Windows, true, true
}

// aggRound asks every shard's closest replica for windows and the others for digests,
// grouped by node.
func (c *Coordinator) aggRound(ctx context.Context, bufs *pageBufs, key string, spans []shardSpan, every int64) [][]aggAnswer {
	// A long aggregate's page reuses the slices of the one before (pagebufs.go).
	bufs = orFresh(bufs)
	answers := bufs.aggAnswersFor(spans)
	// Narrow windows make big answers: fewer shards per request then.
	q := int64(0) // the longest quantum of the spans' series: the most windows a shard holds
	for i := range spans {
		q = max(q, spans[i].ref.Q.Duration().Nanoseconds())
	}
	if q == 0 {
		q = c.cfg.Quantum.Duration().Nanoseconds()
	}
	perShard := q/every + 2
	perRequest := int(max(1, min(maxAggShardsPerRequest, maxAggWindowsPerRequest/perShard)))
	self := c.place.Self().ID
	plan := bufs.plan[:0]
	for i := range spans {
		d := dataReplica(spans[i].replicas, self)
		for j := range spans[i].replicas {
			plan = append(plan, fetch{shard: i, replica: j, data: j == d})
		}
	}
	bufs.plan = plan
	batches := bufs.groupFetches(spans, plan, perRequest)
	// Every batch's request shards, store references and this node's answers, in one
	// array each: a batch has its own part of them.
	reads, refs := reuse(&bufs.aggReads, len(plan)), reuse(&bufs.refs, len(plan))
	var mine []wire.ShardAggResult // a short aggregate's local answer makes its own
	if bufs.long {
		mine = reuse(&bufs.aggResults, len(plan))
	}
	results := cluster.FanOut(ctx, batches, c.fetchLimit(bufs), c.cfg.CallTimeout,
		func(ctx context.Context, b *cluster.PeerBatch[fetch]) (*wire.AggResp, error) {
			off := 0
			for _, o := range batches {
				if o == b {
					break
				}
				off += len(o.Items)
			}
			n := len(b.Items)
			req := &wire.AggReq{Every: every, Shards: reads[off : off+n : off+n]}
			for k, it := range b.Items {
				s := &spans[it.shard]
				req.Shards[k] = wire.ShardAgg{ID: s.ref.ID[:], Start: s.ref.Start, Q: c.wireQ(s.ref.Q), Key: s.key, From: s.from, To: s.to, Digest: !it.data}
			}
			if l := c.replicas.Local(); l != nil && b.Peer.ID == self {
				// This node's store, with the references planned here: no ID to check.
				refs := refs[off : off+n : off+n]
				for k, it := range b.Items {
					refs[k] = spans[it.shard].ref
				}
				var out []wire.ShardAggResult
				if mine != nil {
					out = mine[off : off+n : off+n]
				}
				return l.AggRefs(ctx, every, req.Shards, refs, out, bufs.yield)
			}
			return c.replicas.For(b.Peer).Agg(ctx, req)
		})
	for range batches {
		r := <-results
		if r.Err != nil {
			c.log.Warn("aggregate from a replica failed", "series", key, "peer", cluster.NodeID(r.Batch.Peer), "rpc", r.Batch.Peer.RPCAddr, "err", r.Err)
			continue
		}
		for k, it := range r.Batch.Items {
			answers[it.shard][it.replica] = aggAnswer{ok: true, res: r.Resp.Shards[k], isData: it.data}
		}
	}
	return answers
}

// latestStep is how many quanta Latest looks at first; each further step looks at
// latestGrowth times more, so a series written seconds ago costs one round and one
// silent for a month a handful.
const (
	latestStep   = 64
	latestGrowth = 8
)

// latestBefore returns the latest point of a series in [since, before) — none if it
// has no point there — walking back from before through the quanta's statistics: each
// step is one aggregate of whole-quantum windows, which replicas answer without reading
// points, and the step holding the latest quantum with points answers. Latest uses it
// only where the catalog's tail does not lead to the point (bounds.go).
func (c *Coordinator) latestBefore(ctx context.Context, key string, since, before int64) (series.Points, error) {
	desc, err := c.types.lookup(ctx, key)
	if err != nil {
		return series.Points{}, err
	}
	q := desc.Q.Duration().Nanoseconds()
	hi, step := before, int64(latestStep)
	for hi > since {
		lo := since
		if hi-since > step*q {
			lo = agg.WindowStart(hi-step*q, q)
		}
		res, err := c.Aggregate(ctx, key, lo, hi, spanWindow(lo, hi, q), wire.GetOptions{})
		if err != nil {
			return series.Points{}, err
		}
		if n := len(res.Windows); n > 0 {
			return lastPoint(&res.Windows[n-1]), nil
		}
		hi = lo
		step = min(step*latestGrowth, int64(math.MaxInt64/q/2), quantaPerRangeLimit)
	}
	return series.Points{}, nil
}

// quantaPerRangeLimit keeps one Latest step inside quanta.MaxQuantaPerRange.
const quantaPerRangeLimit = 1 << 19

// DefaultLatestLookback is how far back Latest looks when not told.
const DefaultLatestLookback = 30 * 24 * time.Hour

// lastPoint returns the last point of window w as a one-point series.
func lastPoint(w *agg.Window) series.Points {
	out := series.Points{Type: w.Type}
	switch w.Type {
	case series.Float:
		out.AppendFloat(w.LastT, w.Last)
	case series.Int:
		out.AppendInt(w.LastT, w.ILast)
	case series.String:
		out.AppendString(w.LastT, w.SLast)
	}
	return out
}
