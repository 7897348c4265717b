package coord

import (
	"context"
	"errors"
	"fmt"
	"runtime/trace"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Writes of many series at once.
//
// A batch of line protocol or a Prometheus remote write names hundreds of series. Put
// writes one series: one replica request per replica per series. PutMany writes them
// all in one fan-out: every shard of every series is grouped by replica, so each replica
// gets one request (cut by maxRequestBytes) per PutMany, and the batch to this node's own
// store is cut into a few parts written at once, so that their disk syncs are shared.
// Each series is still acknowledged at the write quorum of each of its shards, exactly as
// Put acknowledges it, and each series gets its own result.

// SeriesPut is the points of one series in a PutMany.
type SeriesPut struct {
	Key    string
	Points series.Points
	// Tags, if any, are the tags a series new to the catalog is created with: posted and
	// recorded in its entry in the same catalog round that creates it (an HTTP write's
	// tags). A series that exists keeps its tags; SeriesResult.Tagged says whether its
	// entry holds these.
	Tags map[string]string
}

// SeriesResult is what PutMany did with one series: how many points reached their write
// quorum, and why the rest did not (nil when all did). Err carries an rpc.RemoteError
// code as Put's errors do: wire.CodeBadInput, wire.CodeTypeMismatch and wire.CodeExpired refuse the
// points themselves (sending them again will not help); wire.CodeUnavailable means the
// cluster failed (retrying the write is safe: writes are idempotent).
type SeriesResult struct {
	Stored int
	Err    error
	// Waited is how long the series' write waited for failed replicas to leave
	// placement (retrying its shards, or readying its type and catalog entry) before it
	// was stored or gave up; 0 when it did not wait.
	Waited time.Duration
	// Tagged says that the series' catalog entry holds every tag of its SeriesPut.Tags
	// (it was created with them, or had them already): nothing is left to record.
	Tagged bool
	// widening says that the series' entry is being merged beside its points, its
	// newest with it when it needs one (widenBeside): nothing else reports its newest.
	widening bool
}

// PutMany writes points of many series, as Put would write each, and returns one result
// per series, in the order of puts. Put is PutMany of one series: both run the same
// steps and the same write hooks (writeHooks). A series whose shards missed their
// quorum because replicas were unreachable is retried (Config.WriteRetry). A write that
// names more series this coordinator does not know than its new-series budget admits is
// refused whole before anything is stored: every result carries the *BudgetError
// (newseries.go).
func (c *Coordinator) PutMany(ctx context.Context, puts []SeriesPut, opt wire.PutOptions) []SeriesResult {
	res := make([]SeriesResult, len(puts))
	if len(puts) == 0 {
		return res
	}
	if err := c.admitPuts(puts); err != nil {
		return budgetRefused(res, err)
	}
	start := time.Now()
	deadline := start.Add(c.cfg.WriteRetry)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	region := trace.StartRegion(ctx, "putmany.prepare")
	paused := c.placedPauses.Load()
	w, prepared, ok := c.prepareMany(ctx, deadline, puts, opt, res)
	region.End()
	if !ok {
		return res
	}
	// Waited only when readying the series paused for failed replicas to leave
	// placement (untilPlaced), not when its round trips were merely slow: a bulk load of
	// new series logged every series of every batch as having waited.
	if waited := time.Since(start); waited > 50*time.Millisecond && c.placedPauses.Load() != paused {
		for i := range res {
			res[i].Waited = waited
		}
	}
	// What travels beside the points (a series reaching a newer quantum reports it:
	// bounds.go) starts before them; a series is acknowledged only once it is done.
	waits := append(make([]func([]SeriesResult), 0, len(prepared)+len(c.hooks.beside)), prepared...)
	for _, h := range c.hooks.beside {
		waits = append(waits, h(ctx, deadline, puts, res, w))
	}
	region = trace.StartRegion(ctx, "putmany.write")
	c.writeRounds(ctx, start, deadline, puts, res, w)
	region.End()
	region = trace.StartRegion(ctx, "putmany.beside")
	for _, wait := range waits {
		wait(res)
	}
	region.End()
	defer trace.StartRegion(ctx, "putmany.stored").End()
	for _, h := range c.hooks.stored {
		h(ctx, puts, res)
	}
	return res
}

// writeRounds writes the points of every series of puts that is ready (res[i].Err ==
// nil), all in one fan-out (writeMany), and then, while a series' shards miss their
// quorum because replicas failed, its unstored points again against their replica sets
// as they are then, with a growing pause, until deadline. Writes are idempotent, so a
// replica that did store a retried point is not harmed.
func (c *Coordinator) writeRounds(ctx context.Context, start, deadline time.Time, puts []SeriesPut, res []SeriesResult, w int) {
	pts := make([]series.Points, len(puts)) // what each series still has to store
	var pending []int
	for i := range puts {
		if res[i].Err == nil && puts[i].Points.Len() > 0 {
			pending = append(pending, i)
			pts[i] = puts[i].Points
		}
	}
	pause := 100 * time.Millisecond
	for len(pending) > 0 {
		// Every shard of every pending series, with the series it belongs to.
		var spans []shardSpan
		var owner []int
		run := make([][2]int, len(puts)) // each series' spans, [lo, hi)
		for _, i := range pending {
			ss, err := c.splitByQuantum(ctx, puts[i].Key, pts[i])
			if err != nil {
				res[i].Err = err
				continue
			}
			for range ss {
				owner = append(owner, i)
			}
			run[i] = [2]int{len(spans), len(spans) + len(ss)}
			spans = append(spans, ss...)
		}
		t := c.writeMany(ctx, puts, spans, owner, w)
		var again []int
		var last map[int]error
		for _, i := range pending {
			if res[i].Err != nil {
				continue
			}
			lo, hi := run[i][0], run[i][1]
			res[i].Stored += t.stored(lo, hi)
			err := t.firstErr(lo, hi)
			if err == nil {
				continue
			}
			if replicaAnswered(err) && !unavailable(err) {
				// The points themselves were refused: sending them again will not help.
				res[i].Err = writeError(puts[i].Key, res[i].Stored, puts[i].Points.Len(), w, err)
				continue
			}
			if last == nil {
				last = map[int]error{}
			}
			last[i] = err
			pts[i] = t.unstored(lo, hi)
			again = append(again, i)
		}
		if len(again) == 0 {
			break
		}
		wait := min(pause, time.Until(deadline))
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				wait = 0
			case <-t.C:
			}
		}
		if wait <= 0 {
			for _, i := range again {
				why := last[i]
				if res[i].Waited > 0 {
					why = fmt.Errorf("%w (after retrying for %v)", why, res[i].Waited.Round(time.Millisecond))
				}
				res[i].Err = writeError(puts[i].Key, res[i].Stored, puts[i].Points.Len(), w, why)
			}
			return
		}
		pause = min(2*pause, time.Second)
		for _, i := range again {
			res[i].Waited = time.Since(start)
		}
		pending = again
	}
	for _, i := range pending {
		if res[i].Err == nil && res[i].Waited > 0 {
			c.log.Info("write stored after waiting for failed replicas to leave placement", "series", puts[i].Key,
				"waited", res[i].Waited.Round(time.Millisecond).String())
		}
	}
}

// markManyLate marks at their homes the late points of every series that stored some
// (markLate: rollup.go); a failed mark becomes the series' error when it had none.
func (c *Coordinator) markManyLate(ctx context.Context, puts []SeriesPut, res []SeriesResult) {
	if c.rollup == nil {
		return
	}
	marks := func(i int) bool { return res[i].Stored != 0 && c.keepsRollups(puts[i].Key) }
	mark := func(i int) {
		if err := c.markLate(ctx, puts[i].Key, &puts[i].Points); err != nil && res[i].Err == nil {
			res[i].Err = err
		}
	}
	if len(puts) == 1 {
		// One series, the common write: marked on this goroutine, without waiting for
		// another to be scheduled (mostly without a mark at all: rollup.Client.Mark).
		if marks(0) {
			mark(0)
		}
		return
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, c.cfg.ReadConcurrency)
	for i := range puts {
		if !marks(i) {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			mark(i)
		})
	}
	wg.Wait()
}

// prepareMany checks every series and runs the prepareAll hooks on those that pass (their
// types fixed in the registry, their catalog entries kept: what the caches answer
// costs no round trip, the rest goes for all of them at once, catalog_many.go); a
// series that fails gets its error in res. It returns the write quorum and the waits of
// what the hooks left to go beside the points, or false when the options themselves
// are wrong (every result then carries the error).
func (c *Coordinator) prepareMany(ctx context.Context, deadline time.Time, puts []SeriesPut, opt wire.PutOptions, res []SeriesResult) (int, []func([]SeriesResult), bool) {
	w := c.cfg.WriteQuorum
	if opt.WriteQuorum != 0 {
		w = opt.WriteQuorum
	}
	if w < 1 || w > c.cfg.RF {
		err := rpc.Errorf(wire.CodeBadInput, "write quorum %d: must be 1..rf (%d)", w, c.cfg.RF)
		for i := range res {
			res[i].Err = err
		}
		return 0, nil, false
	}
	for i := range puts {
		p := &puts[i]
		if p.Points.Len() == 0 {
			continue
		}
		p.Points.Normalize()
		_, res[i].Err = c.checkPut(p.Key, p.Points, opt)
	}
	var waits []func([]SeriesResult)
	if len(c.hooks.prepareAll) > 0 {
		var ready []int
		for i := range puts {
			if res[i].Err == nil && puts[i].Points.Len() > 0 {
				ready = append(ready, i)
			}
		}
		for _, h := range c.hooks.prepareAll {
			if len(ready) == 0 {
				break
			}
			waits = append(waits, h(ctx, deadline, puts, ready, opt, res, w))
			ready = slices.DeleteFunc(ready, func(i int) bool { return res[i].Err != nil })
		}
	}
	return w, waits, true
}

// inParallel runs f for each of items on at most maxPrepareParallel goroutines (not one
// per item: a write of thousands of new series keeps a fixed number of stacks), and
// returns when every call has.
func inParallel(items []int, f func(i int)) {
	if len(items) == 0 {
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(len(items), maxPrepareParallel) {
		wg.Go(func() {
			for {
				k := int(next.Add(1)) - 1
				if k >= len(items) {
					return
				}
				f(items[k])
			}
		})
	}
	wg.Wait()
}

// maxPrepareParallel bounds the series of one PutMany whose round trips (a newest
// quantum reported alone: putmany_newest.go) are under way at once.
const maxPrepareParallel = 64

// writeMany sends every shard to all its replicas at once, one request per replica (cut
// by size), and returns when each shard has reached quorum or can no longer reach it;
// the replica writes still in flight then finish in the background, and any replica
// that does not answer leaves a hint. The batch to this node is cut into up to
// localParts parts written at once.
func (c *Coordinator) writeMany(ctx context.Context, puts []SeriesPut, spans []shardSpan, owner []int, w int) *shardTally {
	t := newShardTally(spans, w)
	size := func(s int) int { return cluster.ShardWriteOverhead + len(puts[owner[s]].Key) + spans[s].pts.WireSize() }
	batches := cluster.GroupByPeer(func(yield func(dht.Peer, int) bool) {
		for s := range spans {
			for _, p := range spans[s].replicas {
				if !yield(p, s) {
					return
				}
			}
		}
	}, 0, size)
	self := c.place.Self().ID
	var remote, local []*cluster.PeerBatch[int]
	for _, b := range batches {
		if b.Peer.ID != self {
			remote = append(remote, b)
			continue
		}
		per := 1
		if parts := c.localParts; parts > 0 {
			per = (len(b.Items) + parts - 1) / parts
		}
		for lo := 0; lo < len(b.Items); lo += per {
			local = append(local, &cluster.PeerBatch[int]{Peer: b.Peer, Items: b.Items[lo:min(lo+per, len(b.Items))]})
		}
	}
	if len(local) == 1 {
		// One part: WriteFanOut writes it itself, once the remote requests are on their
		// way, with no worker, timer or channel of its own.
		remote, local = append(remote, local[0]), nil
	}
	req := func(b *cluster.PeerBatch[int]) *wire.WriteReq {
		r := &wire.WriteReq{Shards: make([]wire.ShardWrite, len(b.Items))}
		for j, s := range b.Items {
			sp := &spans[s]
			r.Shards[j] = wire.ShardWrite{ID: sp.ref.ID[:], Start: sp.ref.Start, Q: c.wireQ(sp.ref.Q), Key: puts[owner[s]].Key, Points: sp.pts}
		}
		return r
	}
	// WriteFanOut's requests: every replica of a single-shard batch gets the same
	// request, which WriteFanOut then encodes once (a single-point write to rf
	// replicas). Only WriteFanOut's goroutine calls it.
	single := make([]*wire.WriteReq, len(spans))
	fanReq := func(b *cluster.PeerBatch[int]) *wire.WriteReq {
		if len(b.Items) != 1 {
			return req(b)
		}
		s := b.Items[0]
		if single[s] == nil {
			single[s] = req(b)
		}
		return single[s]
	}
	hints := &shardHints{c: c, spans: spans, puts: puts, owner: owner}
	bg := context.WithoutCancel(ctx)
	results := cluster.WriteFanOut(bg, c.replicas, self, c.commits, remote, c.cfg.CallTimeout, fanReq, hints.hint)
	locals := c.writeParts(bg, local, req) // nil: no parts of its own
	// A replica refuses a request of several shards whole when it refuses one of them (a
	// type conflict, a point past the retention): each of its shards then goes again
	// alone, so that only the series at fault fails. alone, made at the first such
	// answer, holds every answer of those.
	var alone chan cluster.FanResult[int, *wire.WriteResp]
	pending := len(remote) + len(local)
	for received := 0; t.undecided > 0 && received < pending; received++ {
		var r cluster.FanResult[int, *wire.WriteResp]
		select {
		case r = <-results:
		case r = <-locals:
		case r = <-alone:
		case <-ctx.Done():
			for s := range spans {
				if !t.decided(s) && t.err(s) == nil {
					t.setErr(s, rpc.Errorf(wire.CodeUnavailable, "%v", ctx.Err()))
				}
			}
			return t
		}
		if len(r.Batch.Items) > 1 && r.Err != nil && replicaAnswered(r.Err) {
			if alone == nil {
				total := 0
				for _, b := range batches {
					total += len(b.Items)
				}
				alone = make(chan cluster.FanResult[int, *wire.WriteResp], total)
			}
			pending += len(r.Batch.Items)
			c.writeAlone(bg, r.Batch, req, alone)
			continue
		}
		t.add(r.Batch.Items, r.Batch.Peer, r.Err)
	}
	return t
}

// writeParts writes the parts of the batch to this node's own store at once, on
// StoreWorkers, under one deadline (they start together), and returns the channel
// their answers come on; nil when there are none.
func (c *Coordinator) writeParts(ctx context.Context, parts []*cluster.PeerBatch[int], req func(*cluster.PeerBatch[int]) *wire.WriteReq) chan cluster.FanResult[int, *wire.WriteResp] {
	if len(parts) == 0 {
		return nil
	}
	out := make(chan cluster.FanResult[int, *wire.WriteResp], len(parts))
	lctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	var left sync.WaitGroup
	left.Add(len(parts))
	go func() { left.Wait(); cancel() }()
	r := c.replicas.For(parts[0].Peer)
	for _, b := range parts {
		cluster.StoreWorkers.Run(func() {
			resp, err := r.Write(lctx, req(b))
			out <- cluster.FanResult[int, *wire.WriteResp]{Batch: b, Resp: resp, Err: err}
			left.Done()
		})
	}
	return out
}

// writeAlone writes each shard of b to b's replica in a request of its own, on
// StoreWorkers, each answer going to out.
func (c *Coordinator) writeAlone(ctx context.Context, b *cluster.PeerBatch[int], req func(*cluster.PeerBatch[int]) *wire.WriteReq, out chan<- cluster.FanResult[int, *wire.WriteResp]) {
	rep := c.replicas.For(b.Peer)
	for _, s := range b.Items {
		one := &cluster.PeerBatch[int]{Peer: b.Peer, Items: []int{s}}
		cluster.StoreWorkers.Run(func() {
			cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
			resp, err := rep.Write(cctx, req(one))
			cancel()
			out <- cluster.FanResult[int, *wire.WriteResp]{Batch: one, Resp: resp, Err: err}
		})
	}
}

// replicaAnswered reports whether err is a replica's answer (an rpc.RemoteError), not
// a call that went unanswered.
func replicaAnswered(err error) bool {
	var re *rpc.RemoteError
	return errors.As(err, &re)
}
