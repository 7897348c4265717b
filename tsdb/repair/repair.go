package repair

import (
	"context"
	"errors"
	"log/slog"
	"math/rand"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/internal/netyield"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Walker is what a store offers the repairer: the pairs it holds, and dropping one.
// Stores that do not implement it leave a node without self-healing.
type Walker interface {
	// Pairs calls fn for every (shard, series) held until fn returns false. fn may call
	// back into the store.
	Pairs(fn func(ref store.ShardRef, key string) bool) error
	// Delete drops one series' points in one shard.
	Delete(ref store.ShardRef, key string) error
}

// maxPending bounds the pairs a pass leaves for the next to compare again (about 100
// bytes each); past it the next pass compares everything.
const maxPending = 1 << 14

// bytesPerPairCompared is what the rate limiter charges a pair a pass compares: its
// digest request and answer.
const bytesPerPairCompared = 64

// repairBatchSize is how many pairs one step of a pass compares at once.
const repairBatchSize = 64

// Repairer keeps every shard this node holds at rf confirmed copies. It compares each
// pair's set hash (kept by the store's statistics: no point is read to compare) with its
// owners' and pushes its points to any owner whose hash differs; a pair held by a node
// that is no longer an owner — after a join, or as a hint for an unreachable replica — is
// deleted here once every owner confirmed holding it. Pushing is a union, so replicas
// converge however their copies diverged.
//
// A full pass compares every pair held. The passes between full ones compare only the
// pairs the store says changed since the last pass (store.ChangeTracker) and those the
// last pass left unconfirmed: a pair every owner confirmed and nothing touched since is
// skipped until the next full pass, which comes with a failed pass, a lost count of
// changes, and every RepairFullEvery. After a membership change a pass compares, besides
// those, the pairs whose owners the change moved, found by computing each pair's owners
// under the membership the last pass began with and under the current one (a placement
// that can do that: viewer); without one, a membership change brings a full pass. A
// store that does not track changes gets full passes only.
type Repairer struct {
	cfg       RepairConfig
	place     cluster.Placement
	replicas  cluster.Replicas
	store     store.Store
	walker    Walker
	types     Types
	hints     *Hints
	log       *slog.Logger
	kick      chan struct{}
	limit     *rateLimiter
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	refetched atomic.Int64 // damaged pairs replaced by an owner's copy

	passMu sync.Mutex // one pass at a time

	// What the passes between full ones go by; guarded by passMu.
	fullVersion uint64   // placement version when the last completed full or membership pass began
	view        dht.View // the placement then (viewOK: there is one)
	viewOK      bool
	fullAt      time.Time // when it began; zero: none since start, or a later pass failed
	scrubAt     time.Time // when the last completed scrub began; zero: none since start
	pending     []pairRef // pairs the last pass left short of rf confirmed copies, or held for others
	pendingOver bool      // the last pass left more than maxPending: the next one is full
	fullPasses  atomic.Int64
	movedPasses atomic.Int64 // membership passes that compared only the pairs whose owners moved
	compared    atomic.Int64 // pairs whose hash passes compared with their owners

	passes, lastPass, under, pushedPairs, pushedPoints, pushedBytes, dropped atomic.Int64

	conflicts conflicts // owners that kept values of their own against a push (conflicts.go)
}

func NewRepairer(cfg RepairConfig, place cluster.Placement, replicas cluster.Replicas, st store.Store, w Walker, types Types, logger *slog.Logger) *Repairer {
	r := &Repairer{
		cfg: cfg, place: place, replicas: replicas, store: st, walker: w, types: types, log: logger,
		kick:  make(chan struct{}, 1),
		limit: newRateLimiter(cfg.Rate, cfg.Unthrottled),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	r.hints = NewHints(st, cfg.MaxHintPoints, r.Kick, logger)
	return r
}

// Hints returns the hints this repairer delivers: a coordinator records in them the
// points a replica did not acknowledge.
func (r *Repairer) Hints() *Hints { return r.hints }

// Counters are a repairer's running counts.
type Counters struct {
	Passes      int64 // passes run
	Compared    int64 // pairs whose hash the passes compared with their owners
	MovedPasses int64 // membership passes that compared only the pairs whose owners moved
	FullPasses  int64 // passes that compared every pair held
}

// Counters returns the counts as they stand between two passes: it waits for a
// pass under way to end.
func (r *Repairer) Counters() Counters {
	r.passMu.Lock()
	defer r.passMu.Unlock()
	return Counters{Passes: r.passes.Load(), Compared: r.compared.Load(), MovedPasses: r.movedPasses.Load(), FullPasses: r.fullPasses.Load()}
}

// DueFull makes the next periodic pass compare every pair held, as if FullEvery had
// passed since the last full one; DueScrub makes it also read and verify every point.
// An operator who restored a store by hand wants both.
func (r *Repairer) DueFull() {
	r.passMu.Lock()
	r.fullAt = time.Time{}
	r.passMu.Unlock()
}

// DueScrub: see DueFull.
func (r *Repairer) DueScrub() {
	r.passMu.Lock()
	r.scrubAt = time.Time{}
	r.passMu.Unlock()
}

// PlacementMoved makes the next periodic pass one of a membership change: it compares
// the pairs whose owners moved since the last full pass when the placement can say
// which (known), and every pair otherwise, as under a placement that cannot.
func (r *Repairer) PlacementMoved(known bool) {
	r.passMu.Lock()
	r.fullVersion--
	if !known {
		r.view, r.viewOK = dht.View{}, false
	}
	r.passMu.Unlock()
}

// RepairConfig configures a Repairer.
type RepairConfig struct {
	// RF is the cluster's replication factor: a pair has RF owners.
	RF int
	// CallTimeout bounds each call to a replica.
	CallTimeout time.Duration
	// Interval is how often, give or take a quarter, a pass runs; a membership change
	// starts one at once.
	Interval time.Duration
	// FullEvery is how often a periodic pass compares every pair held and scrubs it;
	// the passes between compare what changed.
	FullEvery time.Duration
	// Settle is how long a pass waits after a membership change for further ones.
	Settle time.Duration
	// Rate bounds the bytes per second a pass compares and pushes, unless Unthrottled.
	Rate        int64
	Unthrottled bool
	// MaxHintPoints bounds the points kept for replicas that could not be reached.
	MaxHintPoints int64
}

// Types redeclares a series' type at its registry replicas, for a repairer that
// found points of a series whose type its registry lost.
type Types interface {
	Redeclare(ctx context.Context, key string, d store.Decl)
}

// pairSpan bounds the time a pair's points may lie in, from its quantum's start: a
// series' quantum is its own (up to quanta.MaxQuantum), which a pair does not record,
// and a pair holds only points of its quantum, so reading that far reads all of them.
const pairSpan = quanta.MaxQuantum

// Kick asks for a pass soon, coalescing requests.
func (r *Repairer) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *Repairer) Stats() wire.RepairStats {
	return wire.RepairStats{
		Passes: r.passes.Load(), LastPass: r.lastPass.Load(), UnderReplicated: r.under.Load(),
		PushedPairs: r.pushedPairs.Load(), PushedPoints: r.pushedPoints.Load(), PushedBytes: r.pushedBytes.Load(),
		DroppedPairs: r.dropped.Load(), HintedPoints: r.hints.Points(), Refetched: r.refetched.Load(),
	}
}

// Run passes on every membership change and periodically with jitter, so that nodes
// that joined together do not all scan at once.
func (r *Repairer) Run(changes <-chan struct{}) {
	defer close(r.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-r.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		interval := r.cfg.Interval
		jitter := time.Duration(rand.Int63n(int64(interval)/2+1)) - interval/4
		timer := time.NewTimer(interval + jitter)
		select {
		case <-r.stop:
			timer.Stop()
			return
		case <-changes:
			// Let a burst of membership events settle into one pass.
			timer.Stop()
			select {
			case <-r.stop:
				return
			case <-time.After(r.cfg.Settle):
			}
		case <-r.kick:
			timer.Stop()
		case <-timer.C:
		}
		if err := r.Pass(ctx, PassAuto); err != nil && ctx.Err() == nil {
			r.log.Warn("repair pass failed; retried at the next", "err", err)
		}
	}
}

// Close stops the loop and waits for it; later calls return at once.
func (r *Repairer) Close() {
	r.closeOnce.Do(func() { close(r.stop) })
	<-r.done
}

type pairRef struct {
	ref store.ShardRef
	key string
}

// PassKind says what a pass compares.
type PassKind int

const (
	PassAuto    PassKind = iota // full when due (see repairer), else what changed
	PassFull                    // every pair held
	PassLeaving                 // every pair, owners computed as if this node were gone: a graceful leave hands everything off
	PassCompare                 // every pair held, by set hashes only (no scrub): a peer that lost pairs asks for it (tsdb.refill)
)

// full reports whether a pass of kind k compares every pair. passMu is held.
func (r *Repairer) full(k PassKind) bool {
	if k != PassAuto {
		return true
	}
	_, tracked := r.store.(store.ChangeTracker)
	return !tracked || r.fullAt.IsZero() || r.pendingOver || time.Since(r.fullAt) >= r.cfg.FullEvery
}

// viewer is a Placement whose owners follow from the membership alone (dht.Node in
// RoutingFull mode), so that a pass can tell which pairs a membership change moved.
type viewer interface {
	View() (dht.View, bool)
}

// currentView returns the placement's current view, if it has one.
func (r *Repairer) currentView() (dht.View, bool) {
	if v, ok := r.place.(viewer); ok {
		return v.View()
	}
	return dht.View{}, false
}

// ownersMoved reports whether id's rf owners under old and cur differ as sets; a and b
// are scratch for the two sets.
func ownersMoved(old, cur dht.View, id quanta.ID, rf int, a, b *[]dht.Peer) bool {
	*a = old.ReplicaSetInto(*a, id, rf)
	*b = cur.ReplicaSetInto(*b, id, rf)
	return !cluster.SamePeers(*a, *b)
}

// scrub reports whether a full pass of kind k also reads every pair's points, verifying
// their checksums: RepairNow's, the first after start, and one every RepairFullEvery.
// The full passes a membership change or a failure brings compare the pairs' set hashes
// only (reading a pair to push it), so that a node joining or restarting does not make
// every node read everything it holds. passMu is held.
func (r *Repairer) scrub(k PassKind) bool {
	return k == PassFull || k == PassAuto && (r.scrubAt.IsZero() || time.Since(r.scrubAt) >= r.cfg.FullEvery)
}

// Pass compares the pairs this node holds with their owners: all of them, or (passAuto
// between full passes) those changed since their seal and those left unconfirmed.
func (r *Repairer) Pass(ctx context.Context, kind PassKind) error {
	r.passMu.Lock()
	defer r.passMu.Unlock()
	leaving := kind == PassLeaving
	full := r.full(kind)
	// The version before the view: dht installs a membership's placement before it
	// counts the version, so a change between the two reads leaves the view recorded
	// at least as new as the version, and the next pass, seeing a newer version,
	// compares against it. The other order could record an older view under the newer
	// version and never compare what that change moved.
	version := r.place.Version()
	view, viewOK := r.currentView()
	// A membership change since the last pass: compare what it moved, besides what
	// changed and what was left unconfirmed — or everything, without both views.
	moved := !full && version != r.fullVersion
	if moved && !(viewOK && r.viewOK) {
		full, moved = true, false
	}
	var changed []store.PairRef
	if ct, ok := r.store.(store.ChangeTracker); ok {
		// Taken before the pass, full or not: what changes during it is the next one's.
		var complete bool
		if changed, complete = ct.TakeChanged(); !complete {
			full = true
		}
	}
	began, before := time.Now(), r.Stats()
	acc := passTotals{registered: map[string]bool{}, verify: full && r.scrub(kind)}
	var batch []pairRef
	var stepErr error
	visit := func(ref store.ShardRef, key string) bool {
		batch = append(batch, pairRef{ref, key})
		if len(batch) == repairBatchSize {
			stepErr = r.step(ctx, batch, leaving, &acc)
			batch = batch[:0]
			netyield.Yield() // a node's writers' requests go first (internal/netyield)
		}
		return stepErr == nil && ctx.Err() == nil
	}
	var err error
	if full {
		err = r.walker.Pairs(visit)
	} else {
		seen := make(map[pairRef]bool, len(r.pending)+len(changed))
		for _, pr := range r.pending {
			seen[pr] = true
			if !visit(pr.ref, pr.key) {
				break
			}
		}
		for _, c := range changed {
			if stepErr != nil || ctx.Err() != nil {
				break
			}
			if pr := (pairRef{c.Ref, c.Key}); !seen[pr] {
				seen[pr] = true
				visit(c.Ref, c.Key)
			}
		}
		if moved && stepErr == nil && ctx.Err() == nil {
			old, rf := r.view, r.cfg.RF
			var a, b []dht.Peer
			err = r.walker.Pairs(func(ref store.ShardRef, key string) bool {
				if seen[pairRef{ref, key}] || !ownersMoved(old, view, ref.ID, rf, &a, &b) {
					return ctx.Err() == nil
				}
				return visit(ref, key)
			})
		}
	}
	if err == nil && stepErr == nil && len(batch) > 0 {
		stepErr = r.step(ctx, batch, leaving, &acc)
	}
	if err == nil {
		err = stepErr
	}
	if err == nil && !leaving {
		// The catalog's repair does not decide the pass: shards are what it counts.
		if cerr := r.repairCatalog(ctx); cerr != nil && ctx.Err() == nil {
			r.log.Warn("repair: catalog pass failed; retried at the next", "err", cerr)
		}
	}
	if err == nil {
		err = ctx.Err()
	}
	if err == nil {
		r.under.Store(acc.under)
		r.hints.recount(acc.hinted)
		r.passes.Add(1)
		r.lastPass.Store(time.Now().UnixMilli())
		r.pending, r.pendingOver = acc.pending, acc.pendingOver
		if (full || moved) && !leaving {
			r.fullVersion, r.view, r.viewOK = version, view, viewOK
		}
		if full && !leaving {
			r.fullAt = began
			r.fullPasses.Add(1)
		}
		if moved {
			r.movedPasses.Add(1)
		}
		if acc.verify {
			r.scrubAt = began
		}
	} else {
		r.fullAt = time.Time{} // what it left unconfirmed is not known: compare everything next
	}
	if after := r.Stats(); after.PushedPairs > before.PushedPairs || after.DroppedPairs > before.DroppedPairs {
		r.log.Info("repair pass", "pushed_pairs", after.PushedPairs-before.PushedPairs,
			"pushed_points", after.PushedPoints-before.PushedPoints, "handed_off", after.DroppedPairs-before.DroppedPairs,
			"under_replicated", acc.under, "hinted_points", acc.hinted, "leaving", leaving,
			"took", time.Since(began).Round(time.Millisecond), "err", err)
	}
	return err
}

type passTotals struct {
	under, hinted int64
	registered    map[string]bool // series whose registry entry this pass re-declared
	pending       []pairRef       // pairs left short of rf confirmed copies, or held for others
	pendingOver   bool            // more than maxPending of them
	verify        bool            // read every pair's points: damage no read asked for is found
}

// leave records a pair the next pass must compare again.
func (acc *passTotals) leave(pr pairRef) {
	if len(acc.pending) < maxPending {
		acc.pending = append(acc.pending, pr)
	} else {
		acc.pendingOver = true
	}
}

// maxRegisteredPerPass bounds the series one pass re-declares, and the memory that takes.
const maxRegisteredPerPass = 1 << 14

// pairState is what a step learns about one pair.
type pairState struct {
	pr        pairRef
	local     series.Points // read only to push (loadPoints): empty until then
	load      sync.Once     // owners' pushes run concurrently
	count     int
	hash      uint64 // set hash of the pair's points (agg.Partial.Hash)
	owners    []dht.Peer
	selfOwner bool
	confirmed int          // owners other than this node known to hold at least this node's points
	deleted   []wire.Range // the pair's tombstones when local was read
}

// step brings one batch of pairs to their owners.
func (r *Repairer) step(ctx context.Context, batch []pairRef, leaving bool, acc *passTotals) error {
	states, err := r.load(ctx, batch, leaving, acc)
	if err != nil {
		return err
	}
	r.redeclare(ctx, states, acc)
	r.compare(ctx, states)
	return r.settle(states, acc)
}

// load reads each pair's statistics — and, in a full pass, its points — and finds its
// owners.
func (r *Repairer) load(ctx context.Context, batch []pairRef, leaving bool, acc *passTotals) ([]*pairState, error) {
	self := r.place.Self()
	q := pairSpan
	states := make([]*pairState, 0, len(batch))
	for _, pr := range batch {
		// The pair's tombstones before its points: a push claims that its points inside
		// them were written after those deletes (ShardWrite.Deleted), which must hold
		// for the points read — not for tombstones learnt since.
		var deleted []wire.Range
		if d, ok := r.store.(store.Deleter); ok {
			rs, err := d.Tombstones(pr.ref, pr.key)
			if err != nil {
				return nil, err
			}
			deleted = cluster.ToWireRanges(rs)
		}
		stats, held, err := cluster.PairSetHash(r.store, pr.ref, pr.key)
		var pts series.Points
		if err == nil && held && acc.verify {
			// A full pass scrubs: it reads the points (checksums verified), charged like
			// the traffic, so that a damaged block is replaced before a read needs it.
			pts, held, err = r.store.Read(pr.ref, pr.key, q.BeginNanos(pr.ref.Start), q.EndNanos(pr.ref.Start))
			if err == nil {
				err = r.limit.wait(ctx, int64(pts.Len())*bytesPerPointOnWire)
			}
		}
		if errors.Is(err, store.ErrCorrupt) {
			// One damaged pair must not stop the pass: fetch an owner's copy instead.
			if !r.refetchDamaged(ctx, pr) {
				acc.leave(pr)
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		if !held {
			continue // deleted since the walk saw it
		}
		if err := r.limit.wait(ctx, bytesPerPairCompared); err != nil {
			return nil, err
		}
		r.compared.Add(1)
		st := &pairState{pr: pr, deleted: deleted, count: int(stats.Count), hash: stats.Hash}
		if acc.verify {
			st.load.Do(func() { st.local = pts })
		}
		if leaving {
			// Owners as if this node were already gone: a graceful leave hands off.
			peers, err := r.place.Locate(ctx, pr.ref.ID, r.cfg.RF+1)
			if err != nil {
				return nil, err
			}
			for _, p := range peers {
				if p.ID != self.ID && len(st.owners) < r.cfg.RF {
					st.owners = append(st.owners, p)
				}
			}
		} else if st.owners, err = r.place.Locate(ctx, pr.ref.ID, r.cfg.RF); err != nil {
			return nil, err
		}
		st.selfOwner = cluster.IsReplica(st.owners, self.ID)
		states = append(states, st)
	}
	return states, nil
}

// redeclare re-declares each series' type on its registry replicas: series metadata
// lives on its own replica set, which moves like a shard's, and a registry whose owners
// all changed relearns it so.
func (r *Repairer) redeclare(ctx context.Context, states []*pairState, acc *passTotals) {
	for _, st := range states {
		key := st.pr.key
		if acc.registered[key] || len(acc.registered) >= maxRegisteredPerPass {
			continue
		}
		acc.registered[key] = true
		if d, ok := r.store.SeriesDecl(key); ok {
			r.types.Redeclare(ctx, key, d)
		}
	}
}

// compare asks every other owner for its strong digest of the pairs it owns, one request
// per owner, and pushes the pairs whose digest differs. It counts in each pair the owners
// confirmed to hold at least this node's points.
func (r *Repairer) compare(ctx context.Context, states []*pairState) {
	self := r.place.Self().ID
	batches := cluster.GroupByPeer(func(yield func(dht.Peer, *pairState) bool) {
		for _, st := range states {
			for _, p := range st.owners {
				if p.ID != self && !yield(p, st) {
					return
				}
			}
		}
	}, 0, nil)
	q := pairSpan
	// No deadline for the whole exchange: pushes wait for the rate limiter. Each call
	// has its own.
	results := cluster.FanOut(ctx, batches, 0, 0, func(ctx context.Context, b *cluster.PeerBatch[*pairState]) ([]*pairState, error) {
		req := &wire.ReadReq{Shards: make([]wire.ShardRead, len(b.Items))}
		for i, st := range b.Items {
			// Strong as well: an owner that predates SetHash answers with its digest of the
			// points, compared below with this node's.
			req.Shards[i] = wire.ShardRead{ID: st.pr.ref.ID[:], Start: st.pr.ref.Start, Key: st.pr.key,
				From: q.BeginNanos(st.pr.ref.Start), To: q.EndNanos(st.pr.ref.Start), Digest: true, Strong: true, SetHash: true}
		}
		cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
		resp, err := r.replicas.For(b.Peer).Read(cctx, req)
		cancel()
		if err != nil {
			return nil, err // not confirmed: retried next pass
		}
		var confirmed, fill, replace []*pairState
		now := time.Now()
		for i, st := range b.Items {
			res := resp.Shards[i]
			hash := st.hash
			if !res.SetHash {
				r.loadPoints(st) // an owner that predates set hashes: compare digests of the points
				hash = cluster.Digest(&st.local)
			}
			switch {
			case res.Held && res.Count == st.count && res.Hash == hash:
				confirmed = append(confirmed, st)
				r.conflicts.forget(st.pr, b.Peer.ID)
			case st.count == 0:
			case !st.selfOwner || r.conflicts.settled(st.pr, b.Peer.ID, st.hash, now, r.cfg.CallTimeout):
				// A hint carries a write the owner missed; a settled conflict is no
				// write on its way (conflicts.go).
				replace = append(replace, st)
			default:
				fill = append(fill, st)
			}
		}
		confirmed = append(confirmed, r.push(ctx, b.Peer, replace, false)...)
		return append(confirmed, r.push(ctx, b.Peer, fill, true)...), nil
	})
	for range batches {
		for _, st := range (<-results).Resp {
			st.confirmed++
		}
	}
}

// loadPoints reads the pair's points into st.local, once (a pair that cannot be read
// is pushed as empty: nothing).
func (r *Repairer) loadPoints(st *pairState) {
	st.load.Do(func() {
		q := pairSpan
		pts, _, err := r.store.Read(st.pr.ref, st.pr.key, q.BeginNanos(st.pr.ref.Start), q.EndNanos(st.pr.ref.Start))
		if err != nil {
			r.log.Warn("repair: a pair to push could not be read; left for the next pass", "series", st.pr.key, "quantum", st.pr.ref.Start, "err", err)
		}
		st.local = pts
	})
}

// settle counts the pairs still under-replicated or held for others, hands off the
// pairs this node does not own once every owner confirmed them, and leaves the others
// for the next pass.
func (r *Repairer) settle(states []*pairState, acc *passTotals) error {
	live := len(r.place.Live())
	for _, st := range states {
		remote := len(st.owners)
		if st.selfOwner {
			remote--
		}
		copies := st.confirmed
		if st.selfOwner {
			copies++
		}
		short := copies < min(r.cfg.RF, live)
		if short {
			acc.under++
		}
		if short || st.confirmed < remote || !st.selfOwner {
			acc.leave(st.pr)
		}
		if st.selfOwner || remote == 0 || st.confirmed < remote {
			if !st.selfOwner {
				acc.hinted += int64(st.count)
			}
			continue
		}
		// Every owner holds this node's points: hand the pair off, unless it changed
		// since it was read (a late hint) — the next pass takes it then.
		now, held, err := cluster.PairSetHash(r.store, st.pr.ref, st.pr.key)
		if err != nil || !held || now.Count != int64(st.count) || now.Hash != st.hash {
			continue
		}
		if err := r.walker.Delete(st.pr.ref, st.pr.key); err != nil {
			return err
		}
		r.dropped.Add(1)
	}
	return nil
}

// push writes pairs' points to one owner and returns those it stored.
func (r *Repairer) push(ctx context.Context, p dht.Peer, pairs []*pairState, keep bool) []*pairState {
	// Requests are cut by count and by bytes; a pair larger than a request goes in
	// parts, and counts as stored once its last part is.
	type part struct {
		st   *pairState
		pts  series.Points
		last bool
	}
	var parts []part
	for _, st := range pairs {
		r.loadPoints(st)
		bs := st.local.Batches(0, cluster.MaxRequestBytes-cluster.ShardWriteOverhead-len(st.pr.key))
		for i, b := range bs {
			parts = append(parts, part{st, b, i == len(bs)-1})
		}
	}
	batches := cluster.GroupByPeer(func(yield func(dht.Peer, part) bool) {
		for _, pt := range parts {
			if !yield(p, pt) {
				return
			}
		}
	}, cluster.MaxShardsPerRequest, func(pt part) int { return cluster.ShardWriteOverhead + len(pt.st.pr.key) + pt.pts.WireSize() })
	var stored []*pairState
	conflicted := map[*pairState]bool{}
	for _, b := range batches {
		req := &wire.WriteReq{Shards: make([]wire.ShardWrite, len(b.Items)), Repair: true, Keep: keep}
		sts := make([]*pairState, len(b.Items))
		points, done, size := 0, 0, 0
		for i, pt := range b.Items {
			req.Shards[i] = wire.ShardWrite{ID: pt.st.pr.ref.ID[:], Start: pt.st.pr.ref.Start, Key: pt.st.pr.key, Points: pt.pts,
				Deleted: pt.st.deleted}
			sts[i] = pt.st
			points += pt.pts.Len()
			size += pt.pts.WireSize()
			if pt.last {
				done++
			}
		}
		if err := r.limit.wait(ctx, int64(points)*bytesPerPointOnWire); err != nil {
			return stored
		}
		cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
		resp, err := r.replicas.For(p).Write(cctx, req)
		cancel()
		if err != nil {
			r.log.Warn("repair: push failed", "pairs", len(b.Items), "peer", cluster.NodeID(p), "rpc", p.RPCAddr, "err", err)
			return stored
		}
		r.learnTombstones(sts, resp.Deleted)
		r.pushedPairs.Add(int64(done))
		r.pushedPoints.Add(int64(points))
		r.pushedBytes.Add(int64(size))
		for _, i := range resp.Conflicts {
			if i >= 0 && i < len(sts) {
				conflicted[sts[i]] = true
				r.conflicts.seen(sts[i].pr, p.ID, sts[i].hash, time.Now())
			}
		}
		for _, pt := range b.Items {
			if pt.last && !conflicted[pt.st] { // a conflict: compared again next pass
				stored = append(stored, pt.st)
			}
		}
	}
	return stored
}

// learnTombstones applies here the tombstones an owner answered a push with: this node
// missed a delete (it was down, or held a hint), and must not keep, serve or push the
// deleted points again.
func (r *Repairer) learnTombstones(part []*pairState, deleted []wire.ShardRanges) {
	d, ok := r.store.(store.Deleter)
	if !ok {
		return
	}
	for _, sr := range deleted {
		if sr.Index < 0 || sr.Index >= len(part) {
			continue
		}
		st := part[sr.Index]
		for _, rg := range sr.Ranges {
			if rg.From >= rg.To {
				continue
			}
			if _, err := d.DeleteRange(st.pr.ref, st.pr.key, rg.From, rg.To); err != nil {
				r.log.Warn("repair: applying a tombstone failed", "series", st.pr.key, "quantum", st.pr.ref.Start, "err", err)
			}
		}
	}
}

// bytesPerPointOnWire is what the rate limiter charges a pushed point: 8 bytes of value
// and a few of delta-coded timestamp.
const bytesPerPointOnWire = 12

// rateLimiter is a token bucket in bytes per second that keeps repair traffic from
// starving ingest on a 100 Mbit link and a single core.
type rateLimiter struct {
	rate int64 // bytes per second; 0 = unlimited
	mu   sync.Mutex
	next time.Time // when the bucket is next empty
}

func newRateLimiter(rate int64, unlimited bool) *rateLimiter {
	if unlimited {
		rate = 0
	}
	return &rateLimiter{rate: rate}
}

// wait blocks until n bytes may be sent.
func (l *rateLimiter) wait(ctx context.Context, n int64) error {
	if l.rate <= 0 {
		return nil
	}
	l.mu.Lock()
	now := time.Now()
	if l.next.Before(now) {
		l.next = now
	}
	l.next = l.next.Add(time.Duration(float64(n) / float64(l.rate) * float64(time.Second)))
	delay := l.next.Sub(now) - time.Second // a second of burst
	l.mu.Unlock()
	if delay <= 0 {
		return nil
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RefetchDamaged replaces the pair (ref, key) if this node cannot read it; see
// refetchDamaged.
func (r *Repairer) RefetchDamaged(ctx context.Context, ref store.ShardRef, key string) bool {
	return r.refetchDamaged(ctx, pairRef{ref: ref, key: key})
}

// refetchDamaged replaces a pair this node cannot read (a block failing its checksum)
// with another owner's copy: the damaged keys are deleted and the copy appended. Without
// a copy the pair is left as it is, and reads fail over to the other replicas.
func (r *Repairer) refetchDamaged(ctx context.Context, pr pairRef) bool {
	q := pairSpan
	self := r.place.Self().ID
	owners, err := r.place.Locate(ctx, pr.ref.ID, r.cfg.RF+1)
	if err != nil {
		owners = nil
	}
	for _, p := range owners {
		if p.ID == self {
			continue
		}
		// In the newest packed form this build decodes: an owner that predates it
		// answers in the form it knows (version 1), which DecodePacked reads too.
		req := &wire.ReadReq{Shards: []wire.ShardRead{{ID: pr.ref.ID[:], Start: pr.ref.Start, Key: pr.key,
			From: q.BeginNanos(pr.ref.Start), To: q.EndNanos(pr.ref.Start), Packed: true, PackedVersion: series.PackedVersion}}}
		cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
		resp, err := r.replicas.For(p).Read(cctx, req)
		cancel()
		if err != nil || !resp.Shards[0].Held {
			continue
		}
		if err := r.walker.Delete(pr.ref, pr.key); err != nil {
			r.log.Warn("repair: could not delete a damaged pair", "series", pr.key, "quantum", pr.ref.Start, "err", err)
			return false
		}
		if pts := resp.Shards[0].Points; pts.Len() > 0 {
			if err := r.store.Append(pr.ref, pr.key, pts); err != nil {
				r.log.Warn("repair: could not store an owner's copy of a damaged pair", "series", pr.key, "quantum", pr.ref.Start, "err", err)
				return false
			}
		}
		r.refetched.Add(1)
		r.log.Info("repair: replaced a damaged pair with an owner's copy", "series", pr.key, "quantum", pr.ref.Start,
			"points", resp.Shards[0].Points.Len(), "from", cluster.NodeID(p))
		return true
	}
	r.log.Warn("repair: a damaged pair has no readable copy on another owner; kept as it is", "series", pr.key, "quantum", pr.ref.Start)
	return false
}
