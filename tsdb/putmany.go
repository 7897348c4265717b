package tsdb

import (
	"context"
	"errors"
	"fmt"
	"runtime/trace"
	"sync"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/catalog"
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
}

// SeriesResult is what PutMany did with one series: how many points reached their write
// quorum, and why the rest did not (nil when all did). Err carries an rpc.RemoteError
// code as Put's errors do: CodeBadInput, CodeTypeMismatch and CodeExpired refuse the
// points themselves (sending them again will not help); CodeUnavailable means the
// cluster failed (retrying the write is safe: writes are idempotent).
type SeriesResult struct {
	Stored int
	Err    error
}

// PutMany writes points of many series, as Put would write each, and returns one result
// per series, in the order of puts. A series whose shards missed their quorum because
// replicas were unreachable is retried as Put retries (Config.WriteRetry).
func (c *Coordinator) PutMany(ctx context.Context, puts []SeriesPut, opt PutOptions) []SeriesResult {
	res := make([]SeriesResult, len(puts))
	if len(puts) == 0 {
		return res
	}
	deadline := time.Now().Add(c.cfg.WriteRetry)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	region := trace.StartRegion(ctx, "putmany.prepare")
	w, ok := c.prepareMany(ctx, deadline, puts, opt, res)
	region.End()
	if !ok {
		return res
	}
	// A series reaching a newer quantum reports it beside its points (bounds.go): all
	// such series at once, one request per registry replica; a series is acknowledged
	// only once its report is stored too.
	newest := c.startNewestMany(ctx, deadline, puts, res, w)
	// Every shard of every series that is ready, with the series it belongs to.
	var spans []shardSpan
	var owner []int
	for i := range puts {
		if res[i].Err != nil || puts[i].Points.Len() == 0 {
			continue
		}
		ss, err := c.splitByQuantum(ctx, puts[i].Key, puts[i].Points)
		if err != nil {
			res[i].Err = err
			continue
		}
		for range ss {
			owner = append(owner, i)
		}
		spans = append(spans, ss...)
	}
	if len(spans) == 0 {
		newest.wait(res)
		return res
	}
	region = trace.StartRegion(ctx, "putmany.write")
	t := c.writeMany(ctx, puts, spans, owner, w)
	region.End()
	// Per series: what reached quorum, and the first failure of the rest.
	retry := make(map[int]bool)
	for s := range spans {
		i := owner[s]
		if t.acks[s] >= w {
			res[i].Stored += spans[s].pts.Len()
			continue
		}
		if res[i].Err == nil {
			res[i].Err = t.errs[s]
			if res[i].Err == nil {
				res[i].Err = rpc.Errorf(CodeUnavailable, "no answer in time")
			}
		}
		var re *rpc.RemoteError
		retry[i] = !errors.As(res[i].Err, &re) || re.Code == CodeUnavailable
	}
	var wg sync.WaitGroup
	for i, again := range retry {
		if !again {
			res[i].Err = c.manyError(puts[i].Key, res[i].Stored, puts[i].Points.Len(), w, res[i].Err)
			continue
		}
		// Replicas failed: the series goes again alone, through Put's retries, with the
		// points that did not reach quorum (idempotent for any replica that has them).
		rest := unstoredOf(spans, owner, t.acks, w, i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.PutReport(ctx, puts[i].Key, rest, opt)
			res[i].Stored += r.Stored
			res[i].Err = err
		}()
	}
	wg.Wait()
	region = trace.StartRegion(ctx, "putmany.newest")
	newest.wait(res)
	region.End()
	defer trace.StartRegion(ctx, "putmany.marklate").End()
	c.markManyLate(ctx, puts, res)
	return res
}

// markManyLate marks at their homes the late points of every series that stored some
// (markLate: rollup.go), as Put does; a failed mark becomes the series' error when it
// had none. A series retried through PutReport was marked there too: marking twice only
// makes a home pull again.
func (c *Coordinator) markManyLate(ctx context.Context, puts []SeriesPut, res []SeriesResult) {
	if c.rollup == nil {
		return
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, c.cfg.ReadConcurrency)
	for i := range puts {
		if res[i].Stored == 0 {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := c.markLate(ctx, puts[i].Key, &puts[i].Points); err != nil && res[i].Err == nil {
				res[i].Err = err
			}
		})
	}
	wg.Wait()
}

// manyError words the failure of one series of a PutMany as Put would.
func (c *Coordinator) manyError(key string, stored, total, w int, err error) error {
	code := CodeUnavailable
	var re *rpc.RemoteError
	if errors.As(err, &re) && (re.Code == CodeTypeMismatch || re.Code == CodeBadInput || re.Code == CodeExpired) {
		code = re.Code
	}
	return rpc.Errorf(code, "write of %q: stored %d of %d points; the rest did not reach write quorum %d: %v", key, stored, total, w, err)
}

// unstoredOf returns the points of series i whose shards did not reach quorum.
func unstoredOf(spans []shardSpan, owner []int, acks []int, w, i int) series.Points {
	var parts []series.Points
	for s := range spans {
		if owner[s] == i && acks[s] < w {
			parts = append(parts, spans[s].pts)
		}
	}
	return series.Concat(parts...)
}

// prepareMany checks every series, fixes its type in the registry and keeps its catalog
// entry, as PutReport does before writing points; a series that fails gets its error in
// res. What the caches answer is done here; a series that needs a round trip gets a
// goroutine, a bounded number at once. It returns the write quorum, or false when the
// options themselves are wrong (every result then carries the error).
func (c *Coordinator) prepareMany(ctx context.Context, deadline time.Time, puts []SeriesPut, opt PutOptions, res []SeriesResult) (int, bool) {
	w := c.cfg.WriteQuorum
	if opt.WriteQuorum != 0 {
		w = opt.WriteQuorum
	}
	if w < 1 || w > c.cfg.RF {
		err := rpc.Errorf(CodeBadInput, "write quorum %d: must be 1..rf (%d)", w, c.cfg.RF)
		for i := range res {
			res[i].Err = err
		}
		return 0, false
	}
	prepare := func(i int) {
		p := &puts[i]
		if _, err := c.checkPut(p.Key, p.Points, opt); err != nil {
			res[i].Err = err
			return
		}
		if err := c.untilPlaced(ctx, deadline, func() error { return c.types.ensure(ctx, p.Key, p.Points.Type, w) }); err != nil {
			res[i].Err = err
			return
		}
		last := p.Points.Len() - 1
		if err := c.untilPlaced(ctx, deadline, func() error {
			return c.noteWrite(ctx, p.Key, catalog.Entry{Key: p.Key, Type: p.Points.Type}, p.Points.T[0], p.Points.T[last], w)
		}); err != nil {
			res[i].Err = err
			return
		}
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, maxPrepareParallel)
	for i := range puts {
		p := &puts[i]
		if p.Points.Len() == 0 {
			continue
		}
		p.Points.Normalize()
		if c.cached(p.Key, &p.Points) {
			prepare(i)
			continue
		}
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			prepare(i)
		}()
	}
	wg.Wait()
	return w, true
}

// maxPrepareParallel bounds the series of one PutMany whose type and catalog entry are
// being fixed by round trips at once.
const maxPrepareParallel = 64

// cached reports whether the type and catalog entry of a series are cached so that
// writing pts (normalized) needs no round trip before the points go (a Newest report
// goes beside them: putmany_newest.go).
func (c *Coordinator) cached(key string, pts *series.Points) bool {
	if t, ok := c.types.cached(key); !ok || t != pts.Type {
		return false
	}
	cur, ok := c.cat.cached(key)
	if !ok {
		return false
	}
	minT, maxT := pts.T[0], pts.T[pts.Len()-1]
	return cur.Live() && cur.Type == pts.Type && cur.HasBounds && cur.First <= minT && maxT <= cur.Last &&
		maxT <= time.Now().UnixNano()+int64(aheadSlack)
}

// manyTally counts, per shard of a PutMany, the replicas that stored it and the first
// error of those that did not.
type manyTally struct {
	spans     []shardSpan
	w         int
	acks      []int
	fails     []int
	errs      []error
	undecided int
}

func (t *manyTally) decided(s int) bool {
	return t.acks[s] >= t.w || t.fails[s] > len(t.spans[s].replicas)-t.w
}

func (t *manyTally) add(items []int, peer dht.Peer, err error) {
	for _, s := range items {
		if t.decided(s) {
			continue
		}
		if err == nil {
			t.acks[s]++
		} else {
			t.fails[s]++
			if t.errs[s] == nil {
				t.errs[s] = fmt.Errorf("replica %s: %w", peer.RPCAddr, err)
			}
		}
		if t.decided(s) {
			t.undecided--
		}
	}
}

// writeMany sends every shard to all its replicas at once, one request per replica (cut
// by size), and returns when each shard has reached quorum or can no longer reach it, as
// writeSpans does for one series. The batch to this node is cut into up to
// localParts parts written at once.
func (c *Coordinator) writeMany(ctx context.Context, puts []SeriesPut, spans []shardSpan, owner []int, w int) *manyTally {
	t := &manyTally{spans: spans, w: w, acks: make([]int, len(spans)), fails: make([]int, len(spans)),
		errs: make([]error, len(spans)), undecided: len(spans)}
	for s := range spans {
		if len(spans[s].replicas) < w {
			t.fails[s] = w
			t.undecided--
			t.errs[s] = rpc.Errorf(CodeUnavailable, "only %d live nodes for write quorum %d", len(spans[s].replicas), w)
		}
	}
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
	req := func(b *cluster.PeerBatch[int]) *wire.WriteReq {
		r := &wire.WriteReq{Shards: make([]wire.ShardWrite, len(b.Items))}
		for j, s := range b.Items {
			sp := &spans[s]
			r.Shards[j] = wire.ShardWrite{ID: sp.ref.ID[:], Start: sp.ref.Start, Key: puts[owner[s]].Key, Points: sp.pts}
		}
		return r
	}
	var hintMu sync.Mutex
	hinted := make([]bool, len(spans))
	hint := func(b *cluster.PeerBatch[int], err error) {
		if !cluster.Unanswered(err) {
			return
		}
		hintMu.Lock()
		defer hintMu.Unlock()
		for _, s := range b.Items {
			if !hinted[s] && !cluster.IsReplica(spans[s].replicas, self) {
				hinted[s] = true
				c.hints.Record(spans[s].ref, puts[owner[s]].Key, spans[s].pts)
			}
		}
	}
	bg := context.WithoutCancel(ctx)
	results := cluster.WriteFanOut(bg, c.replicas, self, c.commits, remote, c.cfg.CallTimeout, req, hint)
	locals := make(chan cluster.FanResult[int, *wire.WriteResp], len(local))
	if len(local) > 0 {
		// One deadline for all the parts: they start together.
		lctx, cancel := context.WithTimeout(bg, c.cfg.CallTimeout)
		var left sync.WaitGroup
		left.Add(len(local))
		go func() { left.Wait(); cancel() }()
		r := c.replicas.For(local[0].Peer)
		for _, b := range local {
			cluster.StoreWorkers.Run(func() {
				resp, err := r.Write(lctx, req(b))
				locals <- cluster.FanResult[int, *wire.WriteResp]{Batch: b, Resp: resp, Err: err}
				left.Done()
			})
		}
	}
	// A replica refuses a request of several shards whole when it refuses one of them (a
	// type conflict, a point past the retention): each of its shards then goes again
	// alone, so that only the series at fault fails. alone holds every such answer.
	total := 0
	for _, b := range batches {
		total += len(b.Items)
	}
	alone := make(chan cluster.FanResult[int, *wire.WriteResp], total)
	pending := len(remote) + len(local)
	for received := 0; t.undecided > 0 && received < pending; received++ {
		var r cluster.FanResult[int, *wire.WriteResp]
		select {
		case r = <-results:
		case r = <-locals:
		case r = <-alone:
		case <-ctx.Done():
			for s := range spans {
				if !t.decided(s) && t.errs[s] == nil {
					t.errs[s] = rpc.Errorf(CodeUnavailable, "%v", ctx.Err())
				}
			}
			return t
		}
		var re *rpc.RemoteError
		if len(r.Batch.Items) > 1 && errors.As(r.Err, &re) {
			pending += len(r.Batch.Items)
			rep := c.replicas.For(r.Batch.Peer)
			for _, s := range r.Batch.Items {
				one := &cluster.PeerBatch[int]{Peer: r.Batch.Peer, Items: []int{s}}
				cluster.StoreWorkers.Run(func() {
					cctx, cancel := context.WithTimeout(bg, c.cfg.CallTimeout)
					resp, err := rep.Write(cctx, req(one))
					cancel()
					alone <- cluster.FanResult[int, *wire.WriteResp]{Batch: one, Resp: resp, Err: err}
				})
			}
			continue
		}
		t.add(r.Batch.Items, r.Batch.Peer, r.Err)
	}
	return t
}
