package coord

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// What every write shares, Put's (PutMany of one series) and PutMany's: the hooks that
// run beside storing its points, the tally of the replicas' answers, the hints for
// those that did not answer, and the words of a failure.

// writeHooks are what every write runs beside storing its points, registered once
// (newCoordinator): what readies a series before its points go (its type fixed at the
// registry, its catalog entry and bounds kept), what travels beside the points and must
// be stored before the write is acknowledged (the newest quantum a series reaches), and
// what is told what was stored (rollup marks of late points).
type writeHooks struct {
	// prepareAll readies, all at once, the series of puts that were checked (ready:
	// their indexes, each with points: its type fixed at the registry, then its catalog
	// entry and bounds kept), setting res[i].Err of a series it
	// fails for; it retries until deadline while too few replicas are placed. What it
	// leaves to go beside the points it has started when it returns; the wait it
	// returns completes it, as a beside hook's does.
	prepareAll []func(ctx context.Context, deadline time.Time, puts []SeriesPut, ready []int, opt wire.PutOptions, res []SeriesResult, w int) (wait func(res []SeriesResult))
	// beside starts, for the series of puts that are ready (res[i].Err == nil), what
	// goes beside their points; the wait it returns completes it, setting res[i].Err
	// of a series it failed for (unless set already).
	beside []func(ctx context.Context, deadline time.Time, puts []SeriesPut, res []SeriesResult, w int) (wait func(res []SeriesResult))
	// stored is told what each series stored; it may set res[i].Err of a series that
	// has none.
	stored []func(ctx context.Context, puts []SeriesPut, res []SeriesResult)
}

// nothingToWait is the wait of a beside hook that sent nothing.
func nothingToWait([]SeriesResult) {}

// registerWriteHooks registers the coordinator's own write hooks, in the order they
// run.
func (c *Coordinator) registerWriteHooks() {
	c.hooks.prepareAll = append(c.hooks.prepareAll, c.catalogReady)
	c.hooks.beside = append(c.hooks.beside,
		func(ctx context.Context, deadline time.Time, puts []SeriesPut, res []SeriesResult, w int) func([]SeriesResult) {
			if nm := c.startNewestMany(ctx, deadline, puts, res, w); nm != nil {
				return nm.wait
			}
			return nothingToWait
		})
	if c.rollup != nil {
		c.hooks.stored = append(c.hooks.stored, c.markManyLate)
	}
}

// catalogReady readies the ready series of a write, all at once: their types (and
// quanta) fixed at their registry replicas (Registry.ensureMany) while their catalog
// entries are read and the new ones posted in the index (noteWrites), and each entry
// merged only once its series' type is fixed; series that failed for want of placed
// replicas are retried until deadline.
//
// A series' type must be fixed before its points are written, and before its entry
// makes it live in the catalog (an entry of a type its registry refuses would list a
// series no write can fill); its postings need not wait for it: a posting whose series
// then fails is stale, and every listing checks its candidates against their entries
// (docs/catalog.md). So the declarations' round and commit run beside the entry read
// and the postings' round, not before them: a write of new series waits for the
// longer of the two, then the entries' round. A series that exists and only needs its
// bounds widened or its newest recorded has its entry merged beside its points
// (widenBeside): the wait returned.
func (c *Coordinator) catalogReady(ctx context.Context, deadline time.Time, puts []SeriesPut, ready []int, opt wire.PutOptions, res []SeriesResult, w int) func([]SeriesResult) {
	later := &laterMerges{}
	c.untilPlacedEach(ctx, deadline, ready, res, func(pending []int) []error {
		ds := make([]decl, len(pending))
		reqs := make([]noteReq, len(pending))
		for j, i := range pending {
			pts := &puts[i].Points
			ds[j] = decl{puts[i].Key, pts.Type, c.proposeQuantum(&puts[i], opt)}
			reqs[j] = noteReq{key: puts[i].Key, e: catalog.Entry{Key: puts[i].Key, Type: pts.Type}, minT: pts.T[0], maxT: pts.T[pts.Len()-1],
				tags: createTags(puts[i].Tags)}
		}
		typed := c.declareBeside(ctx, ds, w)
		later.of = pending
		errs, tagged := c.noteWrites(ctx, reqs, w, typed, later)
		for j, err := range typed() {
			if err != nil {
				errs[j] = err // the type's refusal says more than what followed it
			}
		}
		for j, i := range pending {
			res[i].Tagged = tagged[j] && reqs[j].tags != nil && errs[j] == nil
		}
		return errs
	})
	return c.widenBeside(ctx, deadline, later, res, w)
}

// declareBeside starts fixing the types of ds at their registry replicas
// (Registry.ensureMany) and returns what waits for their answers, one error per decl
// (it may be called more than once). When the registry cache knows every one of them,
// nothing is sent and nothing waits.
func (c *Coordinator) declareBeside(ctx context.Context, ds []decl, w int) func() []error {
	cached := true
	for _, d := range ds {
		if have, ok := c.types.cached(d.key); !ok || have.Type != d.t {
			cached = false
			break
		}
	}
	if cached {
		errs := make([]error, len(ds))
		return func() []error { return errs }
	}
	done := make(chan []error, 1)
	go func() {
		_, errs := c.types.ensureMany(ctx, ds, w)
		done <- errs
	}()
	return sync.OnceValue(func() []error { return <-done })
}

// untilPlacedEach runs step on the series of pending, then again on those it failed
// for want of placed replicas (untilPlaced), until deadline; each series' error is left
// in res.
func (c *Coordinator) untilPlacedEach(ctx context.Context, deadline time.Time, pending []int, res []SeriesResult, step func(pending []int) []error) {
	// untilPlaced's answer is the last round's: each series' own is in res.
	_ = c.untilPlaced(ctx, deadline, func() error {
		var again []int
		var retry error
		for j, err := range step(pending) {
			i := pending[j]
			res[i].Err = err
			if err != nil && unavailable(err) {
				again, retry = append(again, i), err
			}
		}
		pending = again
		return retry
	})
}

// createTags are the tags a new series is created with: tags, normalized, or none when
// they are not valid (the caller then records them apart, and learns why they fail).
func createTags(tags map[string]string) []catalog.Tag {
	if len(tags) == 0 {
		return nil
	}
	out := make([]catalog.Tag, 0, len(tags))
	for k, v := range tags {
		out = append(out, catalog.Tag{K: k, V: v})
	}
	out, err := catalog.NormalizeTags(out)
	if err != nil {
		return nil
	}
	return out
}

// proposeQuantum is the quantum a write proposes for its series, should the series be
// new (opt.Quantum, opt.FitQuanta).
func (c *Coordinator) proposeQuantum(p *SeriesPut, opt wire.PutOptions) quanta.Quantum {
	n := p.Points.Len()
	if !opt.FitQuanta || n < 2 {
		return opt.Quantum.Or(c.cfg.Quantum)
	}
	return quanta.Fit(time.Duration((p.Points.T[n-1]-p.Points.T[0])/int64(n-1)), c.cfg.Quantum)
}

// shardTally counts, per shard of a write, the replicas that stored it, those that
// failed, and the first error of those.
type shardTally struct {
	spans     []shardSpan
	w         int
	acks      []int
	fails     []int
	errs      []error // made at the first error
	undecided int
}

// err returns shard s's first error, or nil.
func (t *shardTally) err(s int) error {
	if t.errs == nil {
		return nil
	}
	return t.errs[s]
}

// setErr sets shard s's error.
func (t *shardTally) setErr(s int, err error) {
	if t.errs == nil {
		t.errs = make([]error, len(t.spans))
	}
	t.errs[s] = err
}

// newShardTally returns the tally of spans at write quorum w: a shard with fewer live
// replicas than w is decided as failed from the start.
func newShardTally(spans []shardSpan, w int) *shardTally {
	counts := make([]int, 2*len(spans))
	t := &shardTally{spans: spans, w: w, acks: counts[:len(spans)], fails: counts[len(spans):], undecided: len(spans)}
	for s := range spans {
		if len(spans[s].replicas) < w {
			t.fails[s] = w
			t.undecided--
			t.setErr(s, rpc.Errorf(wire.CodeUnavailable, "only %d live nodes for write quorum %d", len(spans[s].replicas), w))
		}
	}
	return t
}

// decided reports whether shard s has reached its quorum or can no longer reach it.
func (t *shardTally) decided(s int) bool {
	return t.acks[s] >= t.w || t.fails[s] > len(t.spans[s].replicas)-t.w
}

// add counts one replica's answer (err) for the shards items.
func (t *shardTally) add(items []int, peer dht.Peer, err error) {
	for _, s := range items {
		if t.decided(s) {
			continue
		}
		if err == nil {
			t.acks[s]++
		} else {
			t.fails[s]++
			if t.err(s) == nil {
				t.setErr(s, fmt.Errorf("replica %s: %w", peer.RPCAddr, err))
			}
		}
		if t.decided(s) {
			t.undecided--
		}
	}
}

// The shards of one series are one run of spans, [lo, hi): a write of many series asks
// about each series' own run, which costs its length, not every span's.

// stored returns the points of the shards spans[lo:hi] that reached quorum.
func (t *shardTally) stored(lo, hi int) int {
	n := 0
	for s := lo; s < hi; s++ {
		if t.acks[s] >= t.w {
			n += t.spans[s].pts.Len()
		}
	}
	return n
}

// unstored returns the points of the shards spans[lo:hi] that did not reach quorum, in
// order.
func (t *shardTally) unstored(lo, hi int) series.Points {
	var parts []series.Points
	for s := lo; s < hi; s++ {
		if t.acks[s] < t.w {
			parts = append(parts, t.spans[s].pts)
		}
	}
	return series.Concat(parts...)
}

// firstErr returns the first error of the shards spans[lo:hi] that did not reach
// quorum.
func (t *shardTally) firstErr(lo, hi int) error {
	for s := lo; s < hi; s++ {
		if t.acks[s] < t.w {
			if err := t.err(s); err != nil {
				return err
			}
			return rpc.Errorf(wire.CodeUnavailable, "no answer in time")
		}
	}
	return nil
}

// shardHints records a hint, once per shard, for the shards of a batch whose replica
// did not answer (hint: a fan-out's failure callback). A shard this node is a replica
// of needs none: its own copy is delivered by repair.
type shardHints struct {
	c      *Coordinator
	spans  []shardSpan
	puts   []SeriesPut
	owner  []int // the index in puts of each span's series
	mu     sync.Mutex
	hinted []bool // made at the first hint
}

func (h *shardHints) hint(b *cluster.PeerBatch[int], err error) {
	if !cluster.Unanswered(err) {
		return
	}
	self := h.c.place.Self().ID
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hinted == nil {
		h.hinted = make([]bool, len(h.spans))
	}
	for _, s := range b.Items {
		if !h.hinted[s] && !cluster.IsReplica(h.spans[s].replicas, self) {
			h.hinted[s] = true
			h.c.hints.Record(h.spans[s].ref, h.puts[h.owner[s]].Key, h.spans[s].pts)
		}
	}
}

// writeError words the failure of a write of one series that stored stored of total
// points at write quorum w, err the first replica's reason. Points not counted are not
// acknowledged, which is not to say no replica holds them: a replica whose disk filled
// may have committed them before its sync failed, so the words claim no more. A refusal of the points
// themselves keeps its code (sending them again will not help); anything else is
// wire.CodeUnavailable (retrying is safe: writes are idempotent).
func writeError(key string, stored, total, w int, err error) error {
	code := wire.CodeUnavailable
	var re *rpc.RemoteError
	if errors.As(err, &re) && (re.Code == wire.CodeTypeMismatch || re.Code == wire.CodeBadInput || re.Code == wire.CodeExpired || re.Code == wire.CodeDiskFull) {
		code = re.Code
	}
	return rpc.Errorf(code, "write of %q: %d of %d points acknowledged at write quorum %d; the rest are not acknowledged, but replicas may hold them (a replica that failed after committing them, as on a full disk), and writing them again is harmless: %v",
		key, stored, total, w, err)
}
