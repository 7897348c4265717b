package tsdb

import (
	"context"
	"errors"
	"fmt"
	"github.com/tsdht/tsdht/tsdb/repair"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Coordinator writes and reads series on behalf of clients: it maps points to shards,
// shards to replica sets (Placement), and fans requests out to the replicas (Replicas)
// in parallel.
type Coordinator struct {
	cfg      *Config
	place    cluster.Placement
	replicas cluster.Replicas
	types    *registry
	hints    *repair.Hints // nil: no hints kept
	log      *slog.Logger

	cat    *catalogCoord // catalog entries and the tag index (catalog_coord.go)
	newest newestTracker // newest quanta reported to the registry by writes (bounds.go)

	commits *cluster.GroupCommit // groups concurrent writes per replica (groupcommit.go)

	repairSlots chan struct{} // bounds background read repairs
	readRepairs atomic.Int64  // shards repaired by reads
	longReads   chan struct{} // bounds reads of more than one page of quanta (longread.go)
	longPace    *pacer        // paces their pages (longread.go)

	rollup *rollups // nil: rollups off (rollup*.go)

	// localParts is how many parts PutMany cuts the batch to this node's own store
	// into (0: a part per shard); parts are written at once, on StoreWorkers. One part
	// is one replica request, which a store that appends a request's shards in one
	// commit and one disk sync (a store.BatchAppender) stores at the cost of about one
	// append: then one part, the default. A store that appends shard by shard syncs
	// once per shard in a row, and there a part per shard is faster (appends made at
	// once share their syncs): Node sets 0 for such a store.
	localParts int
}

// maxReadRepairs bounds the read repairs in flight on one node.
const maxReadRepairs = 4

func newCoordinator(cfg *Config, place cluster.Placement, replicas cluster.Replicas, types *registry, h *repair.Hints, logger *slog.Logger) *Coordinator {
	share := cfg.LongReadShare
	if share <= 0 { // a Config that did not go through withDefaults
		share = longReadShare
	}
	return &Coordinator{cfg: cfg, place: place, replicas: replicas, types: types, hints: h, log: logger, cat: &catalogCoord{},
		commits: cluster.NewGroupCommit(), repairSlots: make(chan struct{}, maxReadRepairs), longReads: make(chan struct{}, maxLongReads),
		longPace: newPacer(share, longReadBurst), localParts: 1}
}

// shardSpan is one shard of a request with the part of the request's range inside it.
type shardSpan struct {
	ref      store.ShardRef
	from, to int64
	replicas []dht.Peer
	pts      series.Points // for writes
}

// Put writes points of one series. It returns how many points reached their write
// quorum; on error, the points counted are stored and the rest may not be.
func (c *Coordinator) Put(ctx context.Context, key string, pts series.Points, opt PutOptions) (int, error) {
	r, err := c.PutReport(ctx, key, pts, opt)
	return r.Stored, err
}

// PutResult says what a write did.
type PutResult struct {
	Stored int           // points that reached their write quorum
	Waited time.Duration // how long the write retried for replicas that had failed
}

// PutReport writes points of one series like Put and also says how long it waited. A
// write some of whose shards miss their quorum because replicas failed — in the seconds
// before failure detection takes the dead nodes out of placement — retries those shards
// against their replica sets as they are then, with a growing pause, until they are
// stored or Config.WriteRetry (or ctx's deadline, if sooner) has passed. Writes are
// idempotent, so a replica that did store a retried point is not harmed.
func (c *Coordinator) PutReport(ctx context.Context, key string, pts series.Points, opt PutOptions) (res PutResult, err error) {
	w, err := c.checkPut(key, pts, opt)
	if err != nil || pts.Len() == 0 {
		return res, err
	}
	start := time.Now()
	deadline := start.Add(c.cfg.WriteRetry)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	// The series' type and catalog entry live on their own replica sets, which the
	// same failures can leave short of quorum: they wait for detection like the shards.
	if err := c.untilPlaced(ctx, deadline, func() error { return c.types.ensure(ctx, key, pts.Type, w) }); err != nil {
		return res, err
	}
	pts.Normalize()
	// Late points mark their rollup windows dirty once stored, before the client hears
	// (rollup.go); a write that stored some points and failed marks them too.
	defer c.markStored(ctx, key, pts, &res, &err)
	if err := c.untilPlaced(ctx, deadline, func() error {
		return c.noteWrite(ctx, key, catalog.Entry{Key: key, Type: pts.Type}, pts.T[0], pts.T[pts.Len()-1], w)
	}); err != nil {
		return res, err
	}
	if time.Since(start) > 50*time.Millisecond {
		res.Waited = time.Since(start)
	}
	// A write reaching a newer quantum reports it beside its points (bounds.go).
	newest := c.startNewest(ctx, key, pts.T[pts.Len()-1], w)
	pause := 100 * time.Millisecond
	for {
		spans, err := c.splitByQuantum(ctx, key, pts)
		if err != nil {
			return res, err
		}
		stored, rest, err := c.writeSpans(ctx, key, spans, w)
		res.Stored += stored
		if err == nil {
			if err := c.untilPlaced(ctx, deadline, newest.wait); err != nil {
				return res, err
			}
			if res.Waited > 0 {
				c.log.Info("write stored after waiting for failed replicas to leave placement", "series", key, "waited", res.Waited.Round(time.Millisecond).String())
			}
			return res, nil
		}
		var re *rpc.RemoteError
		if !errors.As(err, &re) || re.Code != CodeUnavailable || rest.Len() == 0 {
			return res, err
		}
		wait := min(pause, time.Until(deadline))
		if wait <= 0 {
			if res.Waited > 0 {
				err = rpc.Errorf(CodeUnavailable, "%s (after retrying for %v)", re.Msg, res.Waited.Round(time.Millisecond))
			}
			return res, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return res, err
		case <-t.C:
		}
		pause = min(2*pause, time.Second)
		res.Waited = time.Since(start)
		pts = rest
	}
}

// untilPlaced runs step until it succeeds, fails for another reason than too few
// replicas (CodeUnavailable), or deadline passes, pausing longer each time.
func (c *Coordinator) untilPlaced(ctx context.Context, deadline time.Time, step func() error) error {
	pause := 100 * time.Millisecond
	for {
		err := step()
		var re *rpc.RemoteError
		if err == nil || !errors.As(err, &re) || re.Code != CodeUnavailable {
			return err
		}
		wait := min(pause, time.Until(deadline))
		if wait <= 0 {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause = min(2*pause, time.Second)
	}
}

// checkPut validates a write and returns its write quorum.
func (c *Coordinator) checkPut(key string, pts series.Points, opt PutOptions) (int, error) {
	if err := series.ValidateKey(key); err != nil {
		return 0, rpc.Errorf(CodeBadInput, "%v", err)
	}
	if err := pts.Valid(); err != nil {
		return 0, rpc.Errorf(CodeBadInput, "%v", err)
	}
	w := c.cfg.WriteQuorum
	if opt.WriteQuorum != 0 {
		w = opt.WriteQuorum
	}
	if w < 1 || w > c.cfg.RF {
		return 0, rpc.Errorf(CodeBadInput, "write quorum %d: must be 1..rf (%d)", w, c.cfg.RF)
	}
	limit := time.Now().Add(c.cfg.MaxFuture).UnixNano()
	for _, t := range pts.T {
		if t > limit {
			return 0, rpc.Errorf(CodeBadInput, "timestamp %s is more than %v in the future (check the writer's clock)",
				time.Unix(0, t).UTC().Format(time.RFC3339Nano), c.cfg.MaxFuture)
		}
	}
	return w, nil
}

// locate returns the replica set of a shard.
func (c *Coordinator) locate(ctx context.Context, id quanta.ID) ([]dht.Peer, error) {
	peers, err := c.place.Locate(ctx, id, c.cfg.RF)
	if err != nil {
		return nil, rpc.Errorf(CodeUnavailable, "shard %s: no replica found: %v", id, err)
	}
	return peers, nil
}

// splitByQuantum cuts sorted points at quantum boundaries.
func (c *Coordinator) splitByQuantum(ctx context.Context, key string, pts series.Points) ([]shardSpan, error) {
	q := c.cfg.DHT.Quantum
	var spans []shardSpan
	for lo := 0; lo < pts.Len(); {
		start := q.Start(pts.T[lo])
		end := q.EndNanos(start)
		hi := lo + 1
		for hi < pts.Len() && pts.T[hi] < end {
			hi++
		}
		ref := cluster.ShardRef(c.cfg.DHT.Format, key, start)
		replicas, err := c.locate(ctx, ref.ID)
		if err != nil {
			return nil, err
		}
		// A quantum holding more than a request's worth (long strings) goes in parts.
		q := pts.Slice(lo, hi)
		for _, part := range q.Batches(0, cluster.MaxRequestBytes-cluster.ShardWriteOverhead) {
			spans = append(spans, shardSpan{ref: ref, replicas: replicas, pts: part})
		}
		lo = hi
	}
	return spans, nil
}

// writeSpans sends every shard to all its replicas at once and returns when each shard
// has reached quorum or can no longer reach it. Replica writes still in flight then
// finish in the background, so the last copies land without the client waiting; any
// replica that does not answer leaves a hint.
func (c *Coordinator) writeSpans(ctx context.Context, key string, spans []shardSpan, w int) (int, series.Points, error) {
	batches := cluster.GroupByPeer(func(yield func(dht.Peer, int) bool) {
		for i := range spans {
			for _, p := range spans[i].replicas {
				if !yield(p, i) {
					return
				}
			}
		}
	}, 0, func(i int) int { return cluster.ShardWriteOverhead + len(key) + spans[i].pts.WireSize() })
	hint := c.hinter(key, spans)
	var one *wire.WriteReq // the request of a single-shard write, shared by its replicas
	results := cluster.WriteFanOut(context.WithoutCancel(ctx), c.replicas, c.place.Self().ID, c.commits, batches, c.cfg.CallTimeout,
		func(b *cluster.PeerBatch[int]) *wire.WriteReq {
			if len(b.Items) == 1 && len(spans) == 1 {
				// A single-shard write: every replica gets the same request, and
				// writeFanOut encodes it once.
				if one == nil {
					s := &spans[0]
					one = &wire.WriteReq{Shards: []wire.ShardWrite{{ID: s.ref.ID[:], Start: s.ref.Start, Key: key, Points: s.pts}}}
				}
				return one
			}
			req := &wire.WriteReq{Shards: make([]wire.ShardWrite, len(b.Items))}
			for j, i := range b.Items {
				s := &spans[i]
				req.Shards[j] = wire.ShardWrite{ID: s.ref.ID[:], Start: s.ref.Start, Key: key, Points: s.pts}
			}
			return req
		},
		func(b *cluster.PeerBatch[int], err error) {
			if cluster.Unanswered(err) {
				hint(b.Items)
			}
		})
	t := newWriteTally(spans, w)
	for received := 0; t.undecided > 0 && received < len(batches); received++ {
		select {
		case r := <-results:
			t.add(r.Batch, r.Err)
		case <-ctx.Done():
			return t.stored(), series.Points{}, rpc.Errorf(CodeUnavailable, "write of %q: %v", key, ctx.Err())
		}
	}
	stored, err := t.outcome(key)
	return stored, t.unstored(), err
}

// hinter returns what records a hint for the given shards of spans, once per shard. A
// shard this node is a replica of needs none: its own copy is delivered by repair.
func (c *Coordinator) hinter(key string, spans []shardSpan) func(shards []int) {
	var mu sync.Mutex
	hinted := make([]bool, len(spans))
	self := c.place.Self().ID
	return func(shards []int) {
		mu.Lock()
		defer mu.Unlock()
		for _, i := range shards {
			if !hinted[i] && !cluster.IsReplica(spans[i].replicas, self) {
				hinted[i] = true
				c.hints.Record(spans[i].ref, key, spans[i].pts)
			}
		}
	}
}

// writeTally counts, per shard, the replicas that stored it and those that failed.
type writeTally struct {
	spans       []shardSpan
	w           int
	acks, fails []int
	undecided   int
	firstErr    error
}

func newWriteTally(spans []shardSpan, w int) *writeTally {
	t := &writeTally{spans: spans, w: w, acks: make([]int, len(spans)), fails: make([]int, len(spans)), undecided: len(spans)}
	for i := range spans {
		if len(spans[i].replicas) < w {
			t.fails[i] = w // too few live nodes: decided as failed up front
			t.undecided--
			t.firstErr = fmt.Errorf("only %d live nodes for write quorum %d", len(spans[i].replicas), w)
		}
	}
	return t
}

func (t *writeTally) decided(i int) bool {
	return t.acks[i] >= t.w || t.fails[i] > len(t.spans[i].replicas)-t.w
}

// add counts one replica's answer for the shards of its batch.
func (t *writeTally) add(b *cluster.PeerBatch[int], err error) {
	if err != nil && t.firstErr == nil {
		t.firstErr = fmt.Errorf("replica %s: %w", b.Peer.RPCAddr, err)
	}
	for _, i := range b.Items {
		if t.decided(i) {
			continue
		}
		if err == nil {
			t.acks[i]++
		} else {
			t.fails[i]++
		}
		if t.decided(i) {
			t.undecided--
		}
	}
}

// stored returns the points of the shards that reached quorum.
func (t *writeTally) stored() int {
	n := 0
	for i := range t.spans {
		if t.acks[i] >= t.w {
			n += t.spans[i].pts.Len()
		}
	}
	return n
}

// unstored returns the points of the shards that did not reach quorum, in order.
func (t *writeTally) unstored() series.Points {
	var parts []series.Points
	for i := range t.spans {
		if t.acks[i] < t.w {
			parts = append(parts, t.spans[i].pts)
		}
	}
	return series.Concat(parts...)
}

// outcome returns the points stored and, if some did not reach quorum, why.
func (t *writeTally) outcome(key string) (int, error) {
	stored, total := t.stored(), 0
	for i := range t.spans {
		total += t.spans[i].pts.Len()
	}
	if stored == total {
		return stored, nil
	}
	code := CodeUnavailable
	var re *rpc.RemoteError
	if errors.As(t.firstErr, &re) && re.Code == CodeTypeMismatch {
		code = CodeTypeMismatch
	}
	return stored, rpc.Errorf(code, "write of %q: stored %d of %d points; the rest did not reach write quorum %d: %v",
		key, stored, total, t.w, t.firstErr)
}
