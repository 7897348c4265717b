package coord

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Reads of many series at once: a query over several series (InfluxQL's GROUP BY
// "host" over 8 hosts, a row of columns) asks each node once for every (shard, series)
// it needs, not once per series. GetMany and AggregateMany plan the shards of all their
// series into pages of at most manyPageShards shards; a page's first round asks each
// node one request (tsdb.read, tsdb.agg: requests name a series per shard), cut at
// cluster.MaxShardsPerRequest (reads) or at what an answer of windows holds
// (aggregates); the rounds after it, the merge, the completeness rule, read repair and
// failover are the per-series read's own (readFew, assemble, settlePage), applied
// series by series. A series whose range is a long read (ReadPageQuanta quanta or more)
// or, for an aggregate, one its rollups answer, is read alone as Get or Aggregate
// would: paced, page by page (longread.go).

// SeriesRange names one series and a range [From, To) of it, in ns.
type SeriesRange struct {
	Key      string
	From, To int64
}

// ManyResult is what GetMany read of one series: its points as Get returns them, or why
// it could not read them.
type ManyResult struct {
	wire.Result
	Err error
}

// AggManyResult is what AggregateMany computed of one series: its windows as Aggregate
// returns them, or why it could not.
type AggManyResult struct {
	wire.AggResult
	Err error
}

// MaxManySeries bounds the series of one GetMany or AggregateMany: a call of more is
// refused before anything is planned (the caller asks in parts).
const MaxManySeries = 1 << 14

// manyPageShards bounds the shards one page of a GetMany plans and asks for at once, as
// ReadPageQuanta bounds a Get's page: what a page holds besides its answers.
const manyPageShards = ReadPageQuanta

// manyPage is one page of a GetMany or AggregateMany: the short series it reads and
// their shards, each series' spans spans[at[k]:at[k+1]].
type manyPage struct {
	items []int // indexes into the call's series
	at    []int
	spans []shardSpan
}

// manyPlan is a GetMany's or AggregateMany's series sorted out: those to read alone,
// and the pages of the others.
type manyPlan struct {
	r      int           // the read quorum
	descs  []Desc        // per series, when looked up
	alone  []int         // series read alone: long reads, or answered by rollups
	pages  []manyPage    // the others
	errs   []error       // per series, what refused it (nil: planned)
	quanta []quantaCover // per series, its quanta
}

// planMany checks the series of a GetMany or AggregateMany, looks up their types and
// quanta, and cuts those it reads together into pages of at most pageShards shards.
// alone says which series go alone, beside being long reads.
func (c *Coordinator) planMany(ctx context.Context, items []SeriesRange, opt wire.GetOptions, pageShards int, alone func(i int, d Desc) bool) (*manyPlan, error) {
	if len(items) > MaxManySeries {
		return nil, rpc.Errorf(wire.CodeBadInput, "%d series in one read; at most %d: ask in parts", len(items), MaxManySeries)
	}
	p := &manyPlan{descs: make([]Desc, len(items)), errs: make([]error, len(items)), quanta: make([]quantaCover, len(items))}
	for i, it := range items {
		r, err := c.checkGet(it.Key, it.From, it.To, opt)
		if p.errs[i] = err; err == nil {
			p.r = r // the same for every series: opt's, or the node's
		}
	}
	c.lookupMany(ctx, items, p)
	// Each series' quanta first, so that a page's spans are planned into one array of
	// the size the page needs, not appended from one per series.
	left := 0 // the shards of the series not yet planned
	for i, it := range items {
		if p.errs[i] != nil {
			continue
		}
		q := p.descs[i].Q
		if it.From < it.To && (q.Start(it.To-1)-q.Start(it.From))/int64(q) >= ReadPageQuanta || alone(i, p.descs[i]) {
			p.alone = append(p.alone, i)
			continue
		}
		cover, err := coverQuanta(q, it.From, it.To)
		if err != nil {
			p.errs[i] = rpc.Errorf(wire.CodeBadInput, "%v", err)
			continue
		}
		p.quanta[i] = cover // n is 0 for an empty range: nothing to ask
		left += cover.n
	}
	var (
		page   manyPage
		b      pageBufs // a short read's, for every series
		starts []int64
	)
	flush := func() {
		if len(page.items) > 0 {
			p.pages = append(p.pages, page)
			page = manyPage{}
		}
	}
	for i, it := range items {
		cover := p.quanta[i]
		if p.errs[i] != nil || cover.n == 0 {
			continue
		}
		if len(page.spans)+cover.n > pageShards {
			flush()
		}
		if page.spans == nil {
			page.spans = make([]shardSpan, 0, max(cover.n, min(pageShards, left)))
		}
		left -= cover.n
		at := len(page.spans)
		page.spans = slices.Grow(page.spans, cover.n)[:at+cover.n]
		starts = cover.pageInto(starts[:0], 0, cover.n)
		if err := c.planInto(ctx, &b, page.spans[at:], it.Key, cover.q, starts, it.From, it.To); err != nil {
			page.spans = page.spans[:at]
			p.errs[i], p.quanta[i] = err, quantaCover{}
			continue
		}
		if len(page.at) == 0 {
			page.at = append(page.at, 0)
		}
		page.items = append(page.items, i)
		page.at = append(page.at, len(page.spans))
	}
	flush()
	return p, nil
}

// lookupMany looks up the type and quantum of every series p has not refused: those
// this node has not cached in one request per registry replica (Registry.lookupMany).
func (c *Coordinator) lookupMany(ctx context.Context, items []SeriesRange, p *manyPlan) {
	var keys []string
	var at []int // keys[j] is items[at[j]]
	for i, it := range items {
		if p.errs[i] == nil {
			keys = append(keys, it.Key)
			at = append(at, i)
		}
	}
	descs, errs := c.types.lookupMany(ctx, keys)
	for j, i := range at {
		p.descs[i], p.errs[i] = descs[j], errs[j]
	}
}

// GetMany reads the points of many series, each over its own range, as Get reads each
// (with opt.MaxBytes bounding each series' answer), asking each node once per page for
// the shards of all of them (see above). It returns a result per series, in order.
func (c *Coordinator) GetMany(ctx context.Context, items []SeriesRange, opt wire.GetOptions) ([]ManyResult, error) {
	p, err := c.planMany(ctx, items, opt, manyPageShards, func(int, Desc) bool { return false })
	if err != nil {
		return nil, err
	}
	out := make([]ManyResult, len(items))
	for i := range items {
		out[i].Err = p.errs[i]
		out[i].Points.Type = p.descs[i].Type
	}
	for _, pg := range p.pages {
		if err := ctx.Err(); err != nil {
			for _, i := range pg.items {
				out[i].Err = rpc.Errorf(wire.CodeUnavailable, "read of %q: %v", items[i].Key, err)
			}
			continue
		}
		answers := c.readFew(ctx, nil, manyLabel(len(pg.items)), pg.spans, p.r)
		for k, i := range pg.items {
			lo, hi := pg.at[k], pg.at[k+1]
			res, _, err := c.assemble(items[i].Key, p.descs[i].Type, pg.spans[lo:hi], answers[lo:hi], p.r, opt.AllowPartial, 0)
			if (err != nil || res.Missing > 0) && callerGone(ctx) {
				// Shards unread because the caller stopped waiting, as Get says.
				err = rpc.Errorf(wire.CodeUnavailable, "read of %q: the caller's deadline passed (or it cancelled): ask for a shorter range, or allow the read more time", items[i].Key)
			}
			if err == nil && opt.MaxBytes > 0 && res.Points.WireSize() > opt.MaxBytes {
				err = rpc.Errorf(wire.CodeTooLarge, "read of %q: the answer would exceed %d bytes; ask for a shorter range", items[i].Key, opt.MaxBytes)
			}
			out[i] = ManyResult{Result: res, Err: err}
		}
	}
	for _, i := range p.alone {
		res, err := c.Get(ctx, items[i].Key, items[i].From, items[i].To, opt)
		out[i] = ManyResult{Result: res, Err: err}
	}
	return out, nil
}

// AggregateMany computes, as Aggregate does for each, the windows of width every of
// many series, each over its own range, asking each node once per page for the
// shards of all of them (see above). It returns a result per series, in order.
func (c *Coordinator) AggregateMany(ctx context.Context, items []SeriesRange, every int64, opt wire.GetOptions) ([]AggManyResult, error) {
	if err := agg.CheckWidth(every); err != nil {
		return nil, rpc.Errorf(wire.CodeBadInput, "%v", err)
	}
	p, err := c.planMany(ctx, items, opt, AggPageQuanta, func(i int, d Desc) bool { return c.rollupPlans(items[i], d, every) })
	if err != nil {
		return nil, err
	}
	out := make([]AggManyResult, len(items))
	for i := range items {
		out[i].Err = p.errs[i]
		out[i].Type = p.descs[i].Type
	}
	for _, pg := range p.pages {
		if err := ctx.Err(); err != nil {
			for _, i := range pg.items {
				out[i].Err = rpc.Errorf(wire.CodeUnavailable, "aggregate of %q: %v", items[i].Key, err)
			}
			continue
		}
		answers := c.aggRound(ctx, nil, manyLabel(len(pg.items)), pg.spans, every)
		for k, i := range pg.items {
			if err := ctx.Err(); err != nil {
				out[i].Err = rpc.Errorf(wire.CodeUnavailable, "aggregate of %q: %v", items[i].Key, err)
				continue
			}
			lo, hi := pg.at[k], pg.at[k+1]
			res := wire.AggResult{Type: p.descs[i].Type}
			var lists [][]agg.Window
			c.settlePage(ctx, nil, items[i].Key, pg.spans[lo:hi], answers[lo:hi], every, p.r, false, &res, &lists)
			err := finishAgg(items[i].Key, &res, lists, p.quanta[i].n, opt.AllowPartial)
			out[i] = AggManyResult{AggResult: res, Err: err}
		}
	}
	for _, i := range p.alone {
		res, err := c.Aggregate(ctx, items[i].Key, items[i].From, items[i].To, every, opt)
		out[i] = AggManyResult{AggResult: res, Err: err}
	}
	return out, nil
}

// rollupPlans says whether this node's rollups would answer an aggregate of it, a
// series described by d (rollupAggregate): AggregateMany then leaves it to Aggregate.
func (c *Coordinator) rollupPlans(it SeriesRange, d Desc, every int64) bool {
	if c.rollup == nil || d.Q != c.cfg.Quantum {
		return false
	}
	_, ok := c.rollup.Plan(it.From, it.To, every, time.Now())
	return ok
}

// manyLabel names the series of a page in the log lines of its requests.
func manyLabel(n int) string { return fmt.Sprintf("(%d series)", n) }
