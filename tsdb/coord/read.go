package coord

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// replicaAnswer is what one replica said about one shard.
type replicaAnswer struct {
	asked    bool // the replica was asked (readFew)
	ok       bool // the replica answered
	res      wire.ShardResult
	isData   bool // res.Points holds the points, not only their digest
	tooLarge bool // the replica answered that its points would not fit a frame
}

// Get reads the points of a series with from <= t < to, in time order.
//
// Each shard's closest replica sends its points and the others only a digest of theirs,
// in one round of requests grouped by node; with Config.ReadQuorumOnly only a read
// quorum of its replicas is asked, chosen so that as few distinct nodes as possible are
// asked (this node first: it costs no round trip). Where a replica's digest differs from
// the points in hand — it holds points the others lack, or the replica asked for points
// failed or is a new owner that holds nothing yet — a further round fetches its points
// and the answers are merged; replicas not asked yet stand in for those that failed. A
// shard is complete when some replica held it, or when a read quorum of replicas agree
// it is empty; otherwise the read fails, or with AllowPartial is marked partial. It is
// never silently short (with ReadQuorumOnly: of what reached its write quorum, when
// ReadQuorum + WriteQuorum > RF). Replicas found holding other points than the merged
// answer are repaired in the background; anti-entropy repairs the others.
func (c *Coordinator) Get(ctx context.Context, key string, from, to int64, opt wire.GetOptions) (wire.Result, error) {
	res, _, err := c.GetParts(ctx, key, from, to, opt, 0)
	return res, err
}

// get reads as Get does. With parts > 0 it returns the points as packed runs in time
// order, in forms up to version parts, instead of in wire.Result.Points (GetReq.Parts):
// each shard's answer as its replica packed it where there was nothing to merge
// (forwardable), else the merged points packed here.
func (c *Coordinator) GetParts(ctx context.Context, key string, from, to int64, opt wire.GetOptions, parts int) (wire.Result, [][]byte, error) {
	r, err := c.checkGet(key, from, to, opt)
	if err != nil {
		return wire.Result{}, nil, err
	}
	desc, err := c.types.lookup(ctx, key)
	if err != nil {
		return wire.Result{}, nil, err
	}
	typ, q := desc.Type, desc.Q
	var turn *longTurn // nil: a short read
	if from < to && (q.Start(to-1)-q.Start(from))/int64(q) >= ReadPageQuanta {
		// A long read waits for its turn before it allocates anything for its range,
		// and its pages are paced (longread.go).
		if turn, err = c.longRead(ctx, key); err != nil {
			return wire.Result{}, nil, err
		}
		defer turn.release()
	}
	cover, err := coverQuanta(q, from, to)
	if err != nil {
		return wire.Result{}, nil, rpc.Errorf(wire.CodeBadInput, "%v", err)
	}
	// Page through the quanta, so that what a read holds besides its answer is bounded
	// whatever its range: the documented maximum range costs time, not memory.
	res := wire.Result{Points: series.Points{Type: typ}}
	var runs []series.Points
	var packed [][]byte
	size := 0
	tooLarge := func() error {
		return rpc.Errorf(wire.CodeTooLarge, "read of %q: the answer would exceed %d bytes; ask for a shorter range", key, opt.MaxBytes)
	}
	for lo := 0; lo < cover.n; lo += ReadPageQuanta {
		if err := ctx.Err(); err != nil {
			return wire.Result{}, nil, rpc.Errorf(wire.CodeUnavailable, "read of %q: %v", key, err)
		}
		var page wire.Result
		var pageParts [][]byte
		had := len(runs)
		err := turn.page(ctx, func(ctx context.Context, b *pageBufs) error {
			b.starts = cover.pageInto(b.starts, lo, ReadPageQuanta)
			spans, err := c.planRead(ctx, b, key, q, b.starts, from, to)
			if err != nil {
				return err
			}
			answers := c.readFew(ctx, b, key, spans, r)
			page, runs, pageParts, err = c.assembleRuns(key, typ, spans, answers, r, opt.AllowPartial, parts, runs)
			return err
		})
		if err != nil && callerGone(ctx) {
			// Shards unread because the caller stopped waiting, not because replicas failed.
			return wire.Result{}, nil, rpc.Errorf(wire.CodeUnavailable, "read of %q: the caller's deadline passed (or it cancelled) after %d of %d quanta: ask for a shorter range, or allow the read more time",
				key, lo, cover.n)
		}
		if err != nil {
			return wire.Result{}, nil, err
		}
		res.Missing += page.Missing
		res.Partial = res.Partial || page.Partial
		for _, p := range pageParts {
			packed = append(packed, p)
			if size += len(p); opt.MaxBytes > 0 && size > opt.MaxBytes {
				return wire.Result{}, nil, tooLarge()
			}
		}
		for i := had; i < len(runs); i++ {
			if size += runs[i].WireSize(); opt.MaxBytes > 0 && size > opt.MaxBytes {
				return wire.Result{}, nil, tooLarge()
			}
		}
	}
	if len(runs) > 0 {
		// The shards' points, copied once whatever the pages: a replica's answer may
		// share arrays with its store's caches, which the caller must not get.
		res.Points = series.Concat(runs...)
	}
	return res, packed, nil
}

// callerGone reports whether ctx was cancelled or its deadline has passed (the replica
// calls under it may fail a moment before ctx itself says so).
func callerGone(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ctx.Err() != nil || ok && !time.Now().Before(d)
}

// readPageQuanta is how many quanta a read plans and asks for at once.
const ReadPageQuanta = 256

// checkGet validates a read and returns its read quorum.
func (c *Coordinator) checkGet(key string, from, to int64, opt wire.GetOptions) (int, error) {
	if err := series.ValidateKey(key); err != nil {
		return 0, rpc.Errorf(wire.CodeBadInput, "%v", err)
	}
	if from > to {
		return 0, rpc.Errorf(wire.CodeBadInput, "range: from %d is after to %d", from, to)
	}
	r := c.readQuorum(opt) // endsmany.go
	if r < 1 || r > c.cfg.RF {
		return 0, rpc.Errorf(wire.CodeBadInput, "read quorum %d: must be 1..rf (%d)", r, c.cfg.RF)
	}
	return r, nil
}

// planRead makes the shards of the quanta of length q starting at starts, within
// [from, to), and finds each one's replicas.
func (c *Coordinator) planRead(ctx context.Context, b *pageBufs, key string, q quanta.Quantum, starts []int64, from, to int64) ([]shardSpan, error) {
	b = orFresh(b)
	spans := reuse(&b.spans, len(starts))
	return spans, c.planInto(ctx, b, spans, key, q, starts, from, to)
}

// planInto is planRead into spans, one per start, b a long read's buffers or a short
// read's.
func (c *Coordinator) planInto(ctx context.Context, b *pageBufs, spans []shardSpan, key string, q quanta.Quantum, starts []int64, from, to int64) error {
	// A long read's page places its shards by a scan, into its own buffer, not
	// through the placement cache (replicaScanner).
	scan, _ := c.place.(replicaScanner)
	var owners []dht.Peer
	if !b.long {
		scan = nil
	} else if scan != nil {
		owners = reuse(&b.owners, len(starts)*c.cfg.RF)
	}
	ids := quanta.NewSeriesIDs(c.cfg.Format, key)
	for i, s := range starts {
		ref := store.ShardRef{ID: ids.At(s), Start: s, Q: q}
		var replicas []dht.Peer
		ok := false
		if scan != nil {
			at := i * c.cfg.RF
			replicas, ok = scan.ReplicaSetInto(owners[at:at:at+c.cfg.RF], ref.ID, c.cfg.RF)
		}
		if !ok || len(replicas) == 0 {
			var err error
			if replicas, err = c.Locate(ctx, ref.ID); err != nil {
				return err
			}
		}
		spans[i] = shardSpan{key: key, ref: ref, from: max(from, q.BeginNanos(s)), to: min(to, q.EndNanos(s)), replicas: replicas}
	}
	return nil
}

// readRounds asks the replicas of every shard, and returns what each said.
func (c *Coordinator) readRounds(ctx context.Context, b *pageBufs, key string, spans []shardSpan) [][]replicaAnswer {
	answers := make([][]replicaAnswer, len(spans))
	for i := range spans {
		answers[i] = make([]replicaAnswer, len(spans[i].replicas))
	}
	// Round one: points from one replica (dataReplica), digests from the rest.
	self := c.place.Self().ID
	var plan []fetch
	for i := range spans {
		d := dataReplica(spans[i].replicas, self)
		for j := range spans[i].replicas {
			plan = append(plan, fetch{shard: i, replica: j, data: j == d})
		}
	}
	c.runFetches(ctx, b, key, spans, plan, answers)

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
		c.runFetches(ctx, b, key, spans, plan, answers)
	}
	return answers
}

// readFew asks, in a first round, readWidth replicas of every shard — one for its
// points, the others for digests — chosen to ask few distinct nodes; further rounds fetch
// the points of replicas whose digest matches none in hand, and ask replicas not asked
// yet where some failed. It returns what each said.
func (c *Coordinator) readFew(ctx context.Context, b *pageBufs, key string, spans []shardSpan, r int) [][]replicaAnswer {
	b = orFresh(b)
	answers := b.answersFor(spans)
	width := reuse(&b.width, len(spans))
	for i := range spans {
		width[i] = c.readWidth(len(spans[i].replicas), r)
	}
	self := c.place.Self().ID
	asked := b.askedFor(spans)
	// Round one: points from one replica, digests from width-1 others: with every
	// replica asked, the points of this node's or the closest (dataReplica); with a read quorum, of replicas chosen
	// to ask few nodes.
	plan := b.plan[:0]
	defer func() { b.plan = plan[:0] }()
	if c.cfg.ReadQuorumOnly {
		ones := make([]int, len(spans))
		for i := range ones {
			ones[i] = 1
		}
		plan = chooseReplicas(spans, asked, ones, self, true)
		for i := range width {
			width[i]--
		}
		plan = append(plan, chooseReplicas(spans, asked, width, self, false)...)
	} else {
		for i := range spans {
			d := dataReplica(spans[i].replicas, self)
			for j := range spans[i].replicas {
				plan = append(plan, fetch{shard: i, replica: j, data: j == d})
			}
		}
	}
	c.runFetches(ctx, b, key, spans, plan, answers)

	// Further rounds: points from any replica whose answer is not yet in hand (more than
	// one round may be needed: a replica can change between rounds, as repair or a hint
	// adds points to it, and then a digest sent earlier matches none of the points
	// fetched); and replicas not asked yet in place of those that failed. Every round
	// asks something new, or the same replicas again for at most maxExtraReadRounds.
	for round := 0; round < maxExtraReadRounds+c.cfg.RF && ctx.Err() == nil; round++ {
		plan = plan[:0]
		more := reuse(&b.more, len(spans))
		for i := range spans {
			missing := missingData(i, answers[i])
			plan = append(plan, missing...)
			if len(missing) == 0 {
				more[i] = c.stillNeeded(answers[i], r)
			}
			for j := range asked[i] {
				asked[i][j] = answers[i][j].asked
			}
		}
		if round >= maxExtraReadRounds {
			plan = plan[:0] // replicas that keep changing: give up on them
		}
		plan = append(plan, chooseReplicas(spans, asked, more, self, true)...)
		if len(plan) == 0 {
			break
		}
		c.runFetches(ctx, b, key, spans, plan, answers)
	}
	return answers
}

// readWidth is how many of a shard's n replicas a read asks: all of them, so that a
// point any replica holds is read; with Config.ReadQuorumOnly a read quorum.
func (c *Coordinator) readWidth(n, r int) int {
	if c.cfg.ReadQuorumOnly {
		return min(r, n)
	}
	return n
}

// stillNeeded returns how many more replicas of a shard to ask, for their points: none
// once a replica answered that its points are too large; otherwise as many as failed
// of the read's width (with Config.ReadQuorumOnly, replicas not asked yet stand in for
// them), and at least one while no answer holds the shard and fewer than a read
// quorum answered.
func (c *Coordinator) stillNeeded(ans []replicaAnswer, r int) int {
	answered, held := 0, false
	for _, a := range ans {
		if a.tooLarge {
			return 0
		}
		if a.ok {
			answered++
			held = held || a.res.Held
		}
	}
	need := c.readWidth(len(ans), r) - answered
	if !held && answered < min(r, len(ans)) {
		need = max(need, 1)
	}
	return max(0, need)
}

// chooseReplicas picks, for every shard i, need[i] replicas not yet asked, choosing
// them so that few distinct nodes are asked: this node's own replicas first, then,
// greedily, the node that serves the most shards still to cover (ties: the node that
// is closer, by rank, to those shards). It marks the replicas it picks in asked; data
// says whether they are asked for points or only for a digest.
func chooseReplicas(spans []shardSpan, asked [][]bool, need []int, self string, data bool) []fetch {
	left := slices.Clone(need)
	var plan []fetch
	take := func(i, j int) {
		plan = append(plan, fetch{shard: i, replica: j, data: data})
		asked[i][j] = true
		left[i]--
	}
	for i := range spans {
		for j, p := range spans[i].replicas {
			if left[i] > 0 && !asked[i][j] && p.ID == self {
				take(i, j)
			}
		}
	}
	type cover struct{ shards, rank int }
	for {
		covers := map[string]*cover{}
		for i := range spans {
			if left[i] <= 0 {
				continue
			}
			for j, p := range spans[i].replicas {
				if asked[i][j] {
					continue
				}
				cv := covers[p.ID]
				if cv == nil {
					cv = &cover{}
					covers[p.ID] = cv
				}
				cv.shards++
				cv.rank += j
			}
		}
		best, bestCv := "", (*cover)(nil)
		for id, cv := range covers {
			if bestCv == nil || cv.shards > bestCv.shards || cv.shards == bestCv.shards &&
				(cv.rank*bestCv.shards < bestCv.rank*cv.shards || cv.rank*bestCv.shards == bestCv.rank*cv.shards && id < best) {
				best, bestCv = id, cv
			}
		}
		if bestCv == nil {
			return plan // every shard covered, or out of replicas to ask
		}
		for i := range spans {
			if left[i] <= 0 {
				continue
			}
			for j, p := range spans[i].replicas {
				if !asked[i][j] && p.ID == best {
					take(i, j)
					break
				}
			}
		}
	}
}

// assemble merges the answers shard by shard into the read's result, repairing stale
// replicas on the way. With parts > 0 it returns the shards' points as packed runs
// instead (Coordinator.get), forwarding a replica's packed answer as it came where
// there is nothing to merge.
func (c *Coordinator) assemble(key string, typ series.Type, spans []shardSpan, answers [][]replicaAnswer, r int, allowPartial bool, parts int) (wire.Result, [][]byte, error) {
	res, runs, packed, err := c.assembleRuns(key, typ, spans, answers, r, allowPartial, parts, nil)
	if all := series.Concat(runs...); err == nil && all.Len() > 0 {
		res.Points = all
	}
	return res, packed, err
}

// assembleRuns is assemble leaving the shards' points as runs, in time order, appended
// to runs: a read of many pages concatenates them once (GetParts).
func (c *Coordinator) assembleRuns(key string, typ series.Type, spans []shardSpan, answers [][]replicaAnswer, r int, allowPartial bool, parts int,
	runs []series.Points) (wire.Result, []series.Points, [][]byte, error) {
	res := wire.Result{Points: series.Points{Type: typ}}
	var packed [][]byte
	for i := range spans {
		if parts > 0 {
			if p, n, ok := forwardable(answers[i], parts); ok {
				if n > 0 {
					packed = append(packed, p)
				}
				continue
			}
		}
		pts, complete := mergeAnswers(answers[i], r)
		if !complete {
			if slices.ContainsFunc(answers[i], func(a replicaAnswer) bool { return a.tooLarge }) {
				return wire.Result{}, nil, nil, rpc.Errorf(wire.CodeTooLarge, "read of %q: the points of quantum %d in [%d, %d) do not fit in one answer; ask for a shorter range",
					key, spans[i].ref.Start, spans[i].from, spans[i].to)
			}
			res.Missing++
			continue
		}
		c.readRepair(key, &spans[i], answers[i], pts)
		switch {
		case pts.Len() == 0:
		case parts > 0:
			packed = append(packed, series.AppendPackedFor(nil, &pts, parts))
		default:
			runs = append(runs, pts)
		}
	}
	if res.Missing > 0 {
		if !allowPartial {
			return wire.Result{}, nil, nil, rpc.Errorf(wire.CodePartial, "read of %q: %d of %d shards could not be read from any replica", key, res.Missing, len(spans))
		}
		res.Partial = true
	}
	return res, runs, packed, nil
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
	held, answered := false, 0
	for _, a := range ans {
		if !a.ok {
			continue
		}
		answered++
		held = held || a.res.Held
	}
	// What a replica deleted stays deleted, whatever a replica that missed the delete
	// still holds.
	pts := mergeFiltered(ans)
	if held {
		return pts, true
	}
	return pts, answered >= min(r, len(ans))
}

// mergeFiltered unites the answers' points, each answer's without what the others'
// tombstones cover and its own do not.
func mergeFiltered(ans []replicaAnswer) series.Points {
	var all []store.Range
	for _, a := range ans {
		if a.ok {
			all = append(all, cluster.FromWireRanges(a.res.Deleted)...)
		}
	}
	var pts series.Points
	for _, a := range ans {
		if !a.ok || !a.res.Held || !a.isData {
			continue
		}
		p := a.res.Points
		if len(all) > 0 {
			p = dropRanges(p, store.Exempt(all, cluster.FromWireRanges(a.res.Deleted)))
		}
		pts = series.Merge(pts, p)
	}
	return pts
}

// dropRanges returns p without the points any range covers.
func dropRanges(pts series.Points, rs []store.Range) series.Points {
	if len(rs) == 0 || pts.Len() == 0 {
		return pts
	}
	covered := func(t int64) bool {
		for _, r := range rs {
			if r.Contains(t) {
				return true
			}
		}
		return false
	}
	var runs []series.Points
	dropped := false
	for lo := 0; lo < pts.Len(); {
		if covered(pts.T[lo]) {
			dropped = true
			lo++
			continue
		}
		hi := lo + 1
		for hi < pts.Len() && !covered(pts.T[hi]) {
			hi++
		}
		runs = append(runs, pts.Slice(lo, hi))
		lo = hi
	}
	if !dropped {
		return pts
	}
	out := series.Concat(runs...)
	out.Type = pts.Type
	return out
}

// runFetches groups fetches by node, sends them with bounded concurrency, and files
// each answer under its shard and replica.
func (c *Coordinator) runFetches(ctx context.Context, bufs *pageBufs, key string, spans []shardSpan, plan []fetch, answers [][]replicaAnswer) {
	for _, f := range plan {
		answers[f.shard][f.replica].asked = true
	}
	bufs = orFresh(bufs)
	batches := bufs.groupFetches(spans, plan, cluster.MaxShardsPerRequest)
	// Every batch's request shards, and this node's answers, in one array each (of the
	// page's buffers): a batch has its own part of them.
	reads := reuse(&bufs.reads, len(plan))
	var mine []wire.ShardResult // a short read's local answer makes its own
	if bufs.long {
		mine = reuse(&bufs.results, len(plan))
	}
	self := c.place.Self().ID
	results := cluster.FanOut(ctx, batches, c.requestLimit(bufs, len(batches)), c.cfg.CallTimeout,
		func(ctx context.Context, b *cluster.PeerBatch[fetch]) (*wire.ReadResp, error) {
			off := 0
			for _, o := range batches {
				if o == b {
					break
				}
				off += len(o.Items)
			}
			n := len(b.Items)
			req := &wire.ReadReq{Shards: reads[off : off+n : off+n]}

			for k, f := range b.Items {
				s := &spans[f.shard]
				req.Shards[k] = wire.ShardRead{ID: s.ref.ID[:], Start: s.ref.Start, Q: c.wireQ(s.ref.Q), Key: s.key, From: s.from, To: s.to, Digest: !f.data, Packed: f.data}
				if f.data {
					req.Shards[k].PackedVersion = series.PackedVersion
				}
			}
			if l := c.replicas.Local(); l != nil && b.Peer.ID == self {
				var out []wire.ShardResult
				if mine != nil {
					out = mine[off : off+n : off+n]
				}
				return l.ReadInto(ctx, req, out, bufs.yield)
			}
			return c.replicas.For(b.Peer).Read(ctx, req)
		})
	for range batches {
		r := <-results
		if r.Err != nil {
			var re *rpc.RemoteError
			if errors.As(r.Err, &re) && re.Code == wire.CodeTooLarge {
				for _, f := range r.Batch.Items {
					answers[f.shard][f.replica].tooLarge = true
				}
				continue
			}
			c.log.Warn("read from a replica failed", "series", key, "peer", cluster.NodeID(r.Batch.Peer), "rpc", r.Batch.Peer.RPCAddr, "err", r.Err)
			continue // those answers stay !ok: the replica did not answer
		}
		for k, f := range r.Batch.Items {
			answers[f.shard][f.replica] = replicaAnswer{asked: true, ok: true, res: r.Resp.Shards[k], isData: f.data}
		}
	}
}

// maxReadFanOut is how many requests a read's page sends at once whatever
// Config.ReadConcurrency says: one to each node the page asks, for a page that asks up
// to this many (a page asks a node for up to maxShardsPerRequest shards at once). A
// read of 150 s of history at rf 3 asks some 17 nodes; any limit below that made a
// second wave of requests wait for the first, a round trip more.
const maxReadFanOut = 64

// requestLimit is how many of a page's n requests go at once: all of them, up to
// maxReadFanOut, and up to Config.ReadConcurrency beyond that; one at a time for a paced
// page of a long read (fetchLimit).
func (c *Coordinator) requestLimit(b *pageBufs, n int) int {
	if b.paced() {
		return c.fetchLimit(b)
	}
	return max(c.fetchLimit(b), min(n, maxReadFanOut))
}

// readRepair pushes, in the background, the merged points of a shard to every replica
// that answered with something else: a stale replica, or a new owner that holds nothing
// yet. A busy node skips it; anti-entropy gets there on its next pass.
func (c *Coordinator) readRepair(key string, s *shardSpan, ans []replicaAnswer, merged series.Points) {
	if merged.Len() == 0 {
		return
	}
	q := s.ref.Q
	whole := s.from == q.BeginNanos(s.ref.Start) && s.to == q.EndNanos(s.ref.Start)
	count, hash := merged.Len(), cluster.ReadDigest(&merged, whole)
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
	// The merged points inside any answer's tombstone came from replicas holding it:
	// written after the delete, so the receiver keeps them (ShardWrite.Deleted).
	var deleted []wire.Range
	for _, a := range ans {
		if a.ok {
			deleted = append(deleted, a.res.Deleted...)
		}
	}
	// The repair outlives the read's page, whose spans a long read reuses
	// (pagebufs.go): it keeps copies of what it needs of s.
	id, start, wq := s.ref.ID, s.ref.Start, c.wireQ(s.ref.Q)
	// Keep: a replica whose answer was older than the merge only because a write was
	// still on its way to the others keeps the value it holds; read repair fills what
	// replicas lack, and anti-entropy settles conflicting values (repair/conflicts.go).
	req := &wire.WriteReq{Repair: true, Keep: true}
	for _, part := range merged.Batches(0, cluster.MaxRequestBytes-cluster.ShardWriteOverhead-len(key)) {
		req.Shards = append(req.Shards, wire.ShardWrite{ID: id[:], Start: start, Q: wq, Key: key, Points: part, Deleted: deleted})
	}
	if len(req.Shards) > 1 {
		<-c.repairSlots // the slot taken above
		return          // larger than a request: left to anti-entropy, which sends it in parts
	}
	go func() {
		defer func() { <-c.repairSlots }()
		for _, p := range stale {
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.CallTimeout)
			_, err := c.replicas.For(p).Write(ctx, req)
			cancel()
			if err != nil {
				c.log.Warn("read repair failed", "series", key, "quantum", start, "peer", cluster.NodeID(p), "rpc", p.RPCAddr, "err", err)
			} else {
				c.readRepairs.Add(1)
			}
		}
	}()
}
