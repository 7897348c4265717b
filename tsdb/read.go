package tsdb

import (
	"context"
	"sync"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
)

// maxShardsPerRequest bounds one read request so its answer stays well inside a frame.
const maxShardsPerRequest = 64

// replicaAnswer is what one replica said about one shard.
type replicaAnswer struct {
	ok     bool // the replica answered
	res    shardResult
	isData bool // res.Points holds the points, not only their digest
}

// Get reads the points of a series with from <= t < to, in time order.
//
// Each shard's closest replica sends its points and the others only a digest of theirs,
// in one round of requests grouped by node. Where a replica's digest differs from the
// data already in hand — it holds points the others lack, or the closest replica failed
// or is a new owner that holds nothing yet — a second round fetches its points and the
// answers are merged. A shard is complete when some replica held it, or when a read
// quorum of replicas agree it is empty; otherwise the read fails, or with AllowPartial
// is marked partial. It is never silently short.
func (c *Coordinator) Get(ctx context.Context, key string, from, to int64, opt GetOptions) (Result, error) {
	if err := series.ValidateKey(key); err != nil {
		return Result{}, rpc.Errorf(CodeBadInput, "%v", err)
	}
	if from > to {
		return Result{}, rpc.Errorf(CodeBadInput, "range: from %d is after to %d", from, to)
	}
	r := c.n.cfg.ReadQuorum
	if opt.ReadQuorum != 0 {
		r = opt.ReadQuorum
	}
	if r < 1 || r > c.n.cfg.RF {
		return Result{}, rpc.Errorf(CodeBadInput, "read quorum %d: must be 1..rf (%d)", r, c.n.cfg.RF)
	}
	typ, err := c.seriesType(ctx, key)
	if err != nil {
		return Result{}, err
	}
	q := c.n.cfg.DHT.Quantum
	starts, err := q.Covering(from, to)
	if err != nil {
		return Result{}, rpc.Errorf(CodeBadInput, "%v", err)
	}
	spans := make([]shardSpan, len(starts))
	for i, s := range starts {
		ref := c.n.ref(key, s)
		spans[i] = shardSpan{
			ref:      refID{ref.ID, s},
			from:     max(from, q.BeginNanos(s)),
			to:       min(to, q.EndNanos(s)),
			replicas: c.n.dht.ReplicaSet(ref.ID, c.n.cfg.RF),
		}
	}
	answers := make([][]replicaAnswer, len(spans))
	for i := range spans {
		answers[i] = make([]replicaAnswer, len(spans[i].replicas))
	}

	// Round one: points from the closest replica, digests from the rest.
	var plan []fetch
	for i := range spans {
		for j := range spans[i].replicas {
			plan = append(plan, fetch{shard: i, replica: j, data: j == 0})
		}
	}
	c.runFetches(ctx, key, spans, plan, answers)

	// Further rounds: points from any replica whose answer is not yet in hand. More
	// than one may be needed: a replica can change between rounds (repair or a hint
	// adds points to it), and then the digest another replica sent in round one
	// matches none of the points fetched; asking again settles it.
	for range maxExtraReadRounds {
		plan = plan[:0]
		for i := range spans {
			plan = append(plan, missingData(i, answers[i])...)
		}
		if len(plan) == 0 || ctx.Err() != nil {
			break
		}
		c.runFetches(ctx, key, spans, plan, answers)
	}

	res := Result{Points: series.Points{Type: typ}}
	parts := make([]series.Points, 0, len(spans))
	for i := range spans {
		pts, complete := mergeAnswers(answers[i], r)
		if !complete {
			res.Missing++
			continue
		}
		c.readRepair(key, &spans[i], answers[i], pts)
		parts = append(parts, pts)
	}
	if res.Missing > 0 {
		if !opt.AllowPartial {
			return Result{}, rpc.Errorf(CodePartial, "read of %q: %d of %d shards could not be read from any replica", key, res.Missing, len(spans))
		}
		res.Partial = true
	}
	if all := series.Concat(parts...); all.Len() > 0 {
		res.Points = all
	}
	return res, nil
}

// maxExtraReadRounds bounds the rounds after the first: one is enough unless replicas
// change under the read.
const maxExtraReadRounds = 3

// fetch asks one replica for one shard.
type fetch struct {
	shard, replica int
	data           bool
}

type digestKey struct {
	count int
	hash  uint64
}

// unfetched returns, for one shard, the replicas that hold points whose digest matches
// no points in hand: one replica per distinct digest.
func unfetched(ans []replicaAnswer) []int {
	have := map[digestKey]bool{}
	for _, a := range ans {
		if a.ok && a.isData && a.res.Held {
			have[digestKey{a.res.Count, a.res.Hash}] = true
		}
	}
	var out []int
	for j, a := range ans {
		if !a.ok || a.isData || !a.res.Held || a.res.Count == 0 {
			continue // an empty answer adds nothing to fetch
		}
		if d := (digestKey{a.res.Count, a.res.Hash}); !have[d] {
			have[d] = true
			out = append(out, j)
		}
	}
	return out
}

// missingData plans the second round for shard i.
func missingData(i int, ans []replicaAnswer) []fetch {
	var out []fetch
	for _, j := range unfetched(ans) {
		out = append(out, fetch{shard: i, replica: j, data: true})
	}
	return out
}

// mergeAnswers unites the points the replicas sent for one shard. complete is false when
// nothing proves the shard's contents: a replica holds points that could not be fetched,
// or no replica held the shard and fewer than r answered.
func mergeAnswers(ans []replicaAnswer, r int) (series.Points, bool) {
	if len(unfetched(ans)) > 0 {
		return series.Points{}, false
	}
	var pts series.Points
	held, answered := false, 0
	for _, a := range ans {
		if !a.ok {
			continue
		}
		answered++
		if a.res.Held {
			held = true
			if a.isData {
				pts = series.Merge(pts, a.res.Points)
			}
		}
	}
	if held {
		return pts, true
	}
	return pts, answered >= min(r, len(ans))
}

// runFetches groups fetches by node, sends them with bounded concurrency, and files
// each answer under its shard and replica.
func (c *Coordinator) runFetches(ctx context.Context, key string, spans []shardSpan, plan []fetch, answers [][]replicaAnswer) {
	type batch struct {
		peer    dht.Peer
		fetches []fetch
	}
	byNode := map[string][]*batch{}
	var batches []*batch
	for _, f := range plan {
		p := spans[f.shard].replicas[f.replica]
		bs := byNode[p.ID]
		if len(bs) == 0 || len(bs[len(bs)-1].fetches) == maxShardsPerRequest {
			b := &batch{peer: p}
			bs = append(bs, b)
			byNode[p.ID] = bs
			batches = append(batches, b)
		}
		last := bs[len(bs)-1]
		last.fetches = append(last.fetches, f)
	}
	sem := make(chan struct{}, max(1, c.n.cfg.ReadConcurrency))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, b := range batches {
		wg.Add(1)
		sem <- struct{}{}
		go func(b *batch) {
			defer wg.Done()
			defer func() { <-sem }()
			req := &readReq{Shards: make([]shardRead, len(b.fetches))}
			for k, f := range b.fetches {
				s := &spans[f.shard]
				req.Shards[k] = shardRead{ID: s.ref.id[:], Start: s.ref.start, Key: key, From: s.from, To: s.to, Digest: !f.data, Packed: f.data}
			}
			var resp readResp
			err := c.call(ctx, b.peer, methodRead, req, &resp)
			if err == nil && len(resp.Shards) != len(req.Shards) {
				err = rpc.Errorf(CodeUnavailable, "replica %s answered %d of %d shards", b.peer.RPCAddr, len(resp.Shards), len(req.Shards))
			}
			for k := 0; err == nil && k < len(resp.Shards); k++ {
				err = resp.Shards[k].unpack()
			}
			if err != nil {
				c.n.log.Printf("read %q from %s: %v", key, b.peer.RPCAddr, err)
				return // those answers stay !ok: the replica did not answer
			}
			mu.Lock()
			defer mu.Unlock()
			for k, f := range b.fetches {
				answers[f.shard][f.replica] = replicaAnswer{ok: true, res: resp.Shards[k], isData: f.data}
			}
		}(b)
	}
	wg.Wait()
}

// readRepair pushes, in the background, the merged points of a shard to every replica
// that answered with something else: a stale replica, or a new owner that holds nothing
// yet. A busy node skips it; anti-entropy gets there on its next pass.
func (c *Coordinator) readRepair(key string, s *shardSpan, ans []replicaAnswer, merged series.Points) {
	if merged.Len() == 0 {
		return
	}
	whole := s.from == c.n.cfg.DHT.Quantum.BeginNanos(s.ref.start) && s.to == c.n.cfg.DHT.Quantum.EndNanos(s.ref.start)
	count, hash := merged.Len(), readDigest(&merged, whole)
	var stale []dht.Peer
	for j, a := range ans {
		if a.ok && (a.res.Count != count || a.res.Hash != hash) {
			stale = append(stale, s.replicas[j])
		}
	}
	if len(stale) == 0 {
		return
	}
	select {
	case c.repairSlots <- struct{}{}:
	default:
		return
	}
	req := &writeReq{Shards: []shardWrite{{ID: s.ref.id[:], Start: s.ref.start, Key: key, Points: merged}}}
	go func() {
		defer func() { <-c.repairSlots }()
		for _, p := range stale {
			if err := c.call(context.Background(), p, methodWrite, req, &writeResp{}); err != nil {
				c.n.log.Printf("read repair of %q at %d on %s: %v", key, s.ref.start, p.RPCAddr, err)
			} else {
				c.readRepairs.Add(1)
			}
		}
	}()
}
