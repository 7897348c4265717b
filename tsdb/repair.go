package tsdb

import (
	"context"
	"math/rand"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
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

// repairBatchSize is how many pairs one step of a pass compares at once.
const repairBatchSize = 64

// RepairStats is the repairer's progress, reported by status.
type RepairStats struct {
	Passes          int64 `msgpack:"passes"`
	LastPass        int64 `msgpack:"last"`  // UNIX ms when the last pass ended
	UnderReplicated int64 `msgpack:"under"` // pairs held here with fewer than rf confirmed copies, at the last pass
	PushedPairs     int64 `msgpack:"pushed"`
	PushedPoints    int64 `msgpack:"pushed_pts"`
	DroppedPairs    int64 `msgpack:"dropped"` // pairs handed off to their owners and deleted here
	HintedPoints    int64 `msgpack:"hinted"`  // points held for unreachable replicas, at the last pass
	ReadRepairs     int64 `msgpack:"read_repairs"`
}

// repairer keeps every shard this node holds at rf confirmed copies. It compares each
// pair's digest with its owners' and pushes its points to any owner whose digest differs;
// a pair held by a node that is no longer an owner — after a join, or as a hint for an
// unreachable replica — is deleted here once every owner confirmed holding it. Pushing
// is a union, so replicas converge however their copies diverged.
type repairer struct {
	n      *Node
	walker Walker
	kick   chan struct{}
	limit  *rateLimiter
	stop   chan struct{}
	done   chan struct{}

	passMu sync.Mutex // one pass at a time

	passes, lastPass, under, pushedPairs, pushedPoints, dropped, hinted atomic.Int64
}

func newRepairer(n *Node, w Walker) *repairer {
	return &repairer{
		n: n, walker: w,
		kick:  make(chan struct{}, 1),
		limit: newRateLimiter(n.cfg.RepairRate),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
}

// Kick asks for a pass soon, coalescing requests.
func (r *repairer) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *repairer) stats() RepairStats {
	return RepairStats{
		Passes: r.passes.Load(), LastPass: r.lastPass.Load(), UnderReplicated: r.under.Load(),
		PushedPairs: r.pushedPairs.Load(), PushedPoints: r.pushedPoints.Load(),
		DroppedPairs: r.dropped.Load(), HintedPoints: r.hinted.Load(),
	}
}

// run passes on every membership change and periodically with jitter, so that nodes
// that joined together do not all scan at once.
func (r *repairer) run(changes <-chan struct{}) {
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
		interval := r.n.cfg.RepairInterval
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
			case <-time.After(r.n.cfg.RepairSettle):
			}
		case <-r.kick:
			timer.Stop()
		case <-timer.C:
		}
		if err := r.pass(ctx, false); err != nil && ctx.Err() == nil {
			r.n.log.Printf("repair pass: %v", err)
		}
	}
}

func (r *repairer) close() {
	close(r.stop)
	<-r.done
}

type pairRef struct {
	ref store.ShardRef
	key string
}

// pass compares every pair this node holds with its owners. leaving computes owners as
// if this node were already gone: a graceful leave hands everything off.
func (r *repairer) pass(ctx context.Context, leaving bool) error {
	r.passMu.Lock()
	defer r.passMu.Unlock()
	acc := passTotals{registered: map[string]bool{}}
	var batch []pairRef
	var stepErr error
	err := r.walker.Pairs(func(ref store.ShardRef, key string) bool {
		batch = append(batch, pairRef{ref, key})
		if len(batch) == repairBatchSize {
			stepErr = r.step(ctx, batch, leaving, &acc)
			batch = batch[:0]
		}
		return stepErr == nil && ctx.Err() == nil
	})
	if err == nil && stepErr == nil && len(batch) > 0 {
		stepErr = r.step(ctx, batch, leaving, &acc)
	}
	if err == nil {
		err = stepErr
	}
	if err == nil {
		err = ctx.Err()
	}
	if err == nil {
		r.under.Store(acc.under)
		r.hinted.Store(acc.hinted)
		r.passes.Add(1)
		r.lastPass.Store(time.Now().UnixMilli())
	}
	return err
}

type passTotals struct {
	under, hinted int64
	registered    map[string]bool // series whose registry entry this pass re-declared
}

// maxRegisteredPerPass bounds the series one pass re-declares, and the memory that takes.
const maxRegisteredPerPass = 1 << 14

// pairState is what a step learns about one pair.
type pairState struct {
	pr        pairRef
	local     series.Points
	count     int
	hash      uint64
	owners    []dht.Peer
	selfOwner bool
	confirmed int // owners other than this node known to hold at least this node's points
}

// step brings one batch of pairs to their owners.
func (r *repairer) step(ctx context.Context, batch []pairRef, leaving bool, acc *passTotals) error {
	n := r.n
	self := n.dht.Self()
	q := n.cfg.DHT.Quantum
	states := make([]*pairState, 0, len(batch))
	for _, pr := range batch {
		pts, held, err := n.store.Read(pr.ref, pr.key, q.BeginNanos(pr.ref.Start), q.EndNanos(pr.ref.Start))
		if err != nil {
			return err
		}
		if !held {
			continue // deleted since the walk saw it
		}
		// Reading and hashing is most of a pass's cost: it is charged like the traffic.
		if err := r.limit.wait(ctx, int64(pts.Len())*bytesPerPointOnWire); err != nil {
			return err
		}
		st := &pairState{pr: pr, local: pts, count: pts.Len(), hash: digest(&pts)}
		if leaving {
			for _, p := range n.dht.ReplicaSet(pr.ref.ID, n.cfg.RF+1) {
				if p.ID != self.ID && len(st.owners) < n.cfg.RF {
					st.owners = append(st.owners, p)
				}
			}
		} else {
			st.owners = n.dht.ReplicaSet(pr.ref.ID, n.cfg.RF)
		}
		for _, p := range st.owners {
			if p.ID == self.ID {
				st.selfOwner = true
			}
		}
		states = append(states, st)
	}

	// Series metadata lives on its own replica set, which moves like a shard's: re-declare
	// each series' type there, so that a registry whose owners all changed relearns it.
	for _, st := range states {
		key := st.pr.key
		if acc.registered[key] || len(acc.registered) >= maxRegisteredPerPass {
			continue
		}
		acc.registered[key] = true
		if t, ok := n.store.SeriesType(key); ok {
			n.coord.redeclare(ctx, key, t)
		}
	}

	// Compare digests with every other owner, one request per owner.
	type target struct {
		peer  dht.Peer
		pairs []*pairState
	}
	targets := map[string]*target{}
	for _, st := range states {
		for _, p := range st.owners {
			if p.ID == self.ID {
				continue
			}
			t := targets[p.ID]
			if t == nil {
				t = &target{peer: p}
				targets[p.ID] = t
			}
			t.pairs = append(t.pairs, st)
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Add(1)
		go func(t *target) {
			defer wg.Done()
			req := &readReq{Shards: make([]shardRead, len(t.pairs))}
			for i, st := range t.pairs {
				req.Shards[i] = shardRead{ID: st.pr.ref.ID[:], Start: st.pr.ref.Start, Key: st.pr.key,
					From: q.BeginNanos(st.pr.ref.Start), To: q.EndNanos(st.pr.ref.Start), Digest: true, Strong: true}
			}
			var resp readResp
			if err := n.coord.call(ctx, t.peer, methodRead, req, &resp); err != nil || len(resp.Shards) != len(req.Shards) {
				return // unreachable: not confirmed, retried next pass
			}
			var push []*pairState
			for i, st := range t.pairs {
				res := resp.Shards[i]
				if res.Held && res.Count == st.count && res.Hash == st.hash {
					mu.Lock()
					st.confirmed++
					mu.Unlock()
				} else if st.count > 0 {
					push = append(push, st)
				}
			}
			if len(push) == 0 {
				return
			}
			pushed := r.push(ctx, t.peer, push)
			mu.Lock()
			for _, st := range pushed {
				st.confirmed++
			}
			mu.Unlock()
		}(t)
	}
	wg.Wait()

	for _, st := range states {
		remote := 0
		for _, p := range st.owners {
			if p.ID != self.ID {
				remote++
			}
		}
		copies := st.confirmed
		if st.selfOwner {
			copies++
		}
		if copies < min(n.cfg.RF, len(n.dht.Live())) {
			acc.under++
		}
		if st.selfOwner || remote == 0 || st.confirmed < remote {
			if !st.selfOwner {
				acc.hinted += int64(st.count)
			}
			continue
		}
		// Every owner holds this node's points: hand the pair off, unless it changed
		// since it was read (a late hint) — the next pass takes it then.
		now, held, err := n.store.Read(st.pr.ref, st.pr.key, q.BeginNanos(st.pr.ref.Start), q.EndNanos(st.pr.ref.Start))
		if err != nil || !held || now.Len() != st.count || digest(&now) != st.hash {
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
func (r *repairer) push(ctx context.Context, p dht.Peer, pairs []*pairState) []*pairState {
	var stored []*pairState
	for lo := 0; lo < len(pairs); lo += maxShardsPerRequest {
		part := pairs[lo:min(lo+maxShardsPerRequest, len(pairs))]
		req := &writeReq{Shards: make([]shardWrite, len(part))}
		points := 0
		for i, st := range part {
			req.Shards[i] = shardWrite{ID: st.pr.ref.ID[:], Start: st.pr.ref.Start, Key: st.pr.key, Points: st.local}
			points += st.count
		}
		if err := r.limit.wait(ctx, int64(points)*bytesPerPointOnWire); err != nil {
			return stored
		}
		if err := r.n.coord.call(ctx, p, methodWrite, req, &writeResp{}); err != nil {
			r.n.log.Printf("repair: push %d pairs to %s: %v", len(part), p.RPCAddr, err)
			return stored
		}
		r.pushedPairs.Add(int64(len(part)))
		r.pushedPoints.Add(int64(points))
		stored = append(stored, part...)
	}
	return stored
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

func newRateLimiter(rate int64) *rateLimiter { return &rateLimiter{rate: rate} }

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

// hint keeps the points of a shard whose replica could not be reached in this node's
// own store, so that the repairer delivers them to the owners when they can be reached.
func (n *Node) hint(ref refID, key string, pts series.Points) {
	if n.repair == nil || n.repair.hinted.Load() >= n.cfg.MaxHintPoints {
		return
	}
	if err := n.store.Append(store.ShardRef{ID: ref.id, Start: ref.start}, key, pts); err != nil {
		n.log.Printf("hint for %q at %d: %v", key, ref.start, err)
		return
	}
	n.repair.hinted.Add(int64(pts.Len()))
	n.repair.Kick()
}
