package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// registerReplica serves a Replica over RPC: the methods a node answers as a replica of
// shards and of series metadata.
func Register(srv *rpc.Server, l *Local) {
	r := cluster.Replica(l)
	// Writes are decoded and encoded by hand (wire.DecodeWriteReq): the hot path. A
	// write is a store append that never waits on the network, so a small one runs on
	// the connection's reader (rpc.Server.HandleInline) with no hand-off to a worker;
	// a large one (a repair's push) goes to a worker.
	srv.HandleInline(wire.MethodWrite, (*wire.WriteReq)(nil), func(ctx context.Context, b []byte) ([]byte, error) {
		var req wire.WriteReq
		if err := wire.DecodeWriteReq(b, &req); err != nil {
			return nil, rpc.Errorf(wire.CodeBadInput, "%s: %v", wire.MethodWrite, err)
		}
		resp, err := r.Write(ctx, &req)
		if err != nil {
			return nil, err
		}
		return wire.EncodeWriteResp(resp)
	})
	// Reads too (wire.DecodeReadReq): a long read asks dozens of shards of each replica.
	srv.HandleDecoded(wire.MethodRead, (*wire.ReadReq)(nil), func(ctx context.Context, b []byte) ([]byte, error) {
		l.readRequests.Add(1)
		var req wire.ReadReq
		if err := wire.DecodeReadReq(b, &req); err != nil {
			return nil, rpc.Errorf(wire.CodeBadInput, "%s: %v", wire.MethodRead, err)
		}
		resp, err := r.Read(ctx, &req)
		if err != nil {
			return nil, err
		}
		for i := range resp.Shards {
			if res := &resp.Shards[i]; req.Shards[i].Packed && !req.Shards[i].Digest {
				res.Packed = series.AppendPackedFor(nil, &res.Points, req.Shards[i].PackedVersion)
				res.Points = series.Points{}
			}
		}
		return wire.EncodeReadResp(resp)
	})
	cluster.Handle(srv, wire.MethodDeclare, func(ctx context.Context, req *wire.TypeReq) (*wire.TypeResp, error) {
		d, err := r.DeclareSeries(ctx, req.Key, store.Decl{Type: req.Type, Quantum: quanta.Quantum(req.Quantum), NoQuantum: req.NoQuantum})
		if err != nil {
			return nil, err
		}
		return cluster.TypeResp(d, true), nil
	})
	cluster.Handle(srv, wire.MethodDeclareMany, func(ctx context.Context, req *wire.DeclareManyReq) (*wire.DeclareManyResp, error) {
		if err := req.Check(); err != nil {
			return nil, rpc.Errorf(wire.CodeBadInput, "%v", err)
		}
		keys, ds := make([]string, len(req.Items)), make([]store.Decl, len(req.Items))
		for i, it := range req.Items {
			keys[i], ds[i] = it.Key, store.Decl{Type: it.Type, Quantum: quanta.Quantum(it.Quantum), NoQuantum: it.NoQuantum}
		}
		out, errs, err := r.DeclareMany(ctx, keys, ds)
		if err != nil {
			return nil, err
		}
		resp := &wire.DeclareManyResp{Items: make([]wire.TypeResp, len(out)), Codes: make([]string, len(out)), Msgs: make([]string, len(out))}
		for i := range out {
			resp.Items[i] = *cluster.TypeResp(out[i], true)
			if errs[i] != nil {
				// As the server codes a handler's error: its own code, else internal.
				resp.Codes[i], resp.Msgs[i] = rpc.CodeInternal, errs[i].Error()
				var coded interface{ ErrorCode() string }
				if errors.As(errs[i], &coded) && coded.ErrorCode() != "" {
					resp.Codes[i] = coded.ErrorCode()
				}
			}
		}
		return resp, nil
	})
	cluster.Handle(srv, wire.MethodType, func(ctx context.Context, req *wire.TypeReq) (*wire.TypeResp, error) {
		d, ok, err := r.SeriesDecl(ctx, req.Key)
		if err != nil {
			return nil, err
		}
		return cluster.TypeResp(d, ok), nil
	})
	registerCatalog(srv, r, &l.catalogReads)
	registerDecls(srv, r)
	cluster.Handle(srv, wire.MethodStats, func(ctx context.Context, _ *struct{}) (*wire.NodeStats, error) {
		s, err := r.Stats(ctx)
		if err != nil {
			return nil, err
		}
		return &s, nil
	})
	cluster.Handle(srv, wire.MethodAgg, func(ctx context.Context, req *wire.AggReq) (*wire.AggResp, error) {
		l.readRequests.Add(1)
		resp, err := l.Agg(ctx, req)
		if err != nil {
			return nil, err
		}
		for i := range resp.Shards {
			resp.Shards[i].Pack()
		}
		return resp, nil
	})
	cluster.Handle(srv, wire.MethodAggSeries, func(ctx context.Context, req *wire.AggSeriesReq) (*wire.AggSeriesResp, error) {
		l.readRequests.Add(1)
		resp, err := l.AggSeries(ctx, req)
		if err != nil {
			return nil, err
		}
		return &wire.AggSeriesResp{Shards: wire.AppendAggResults(nil, resp.Shards)}, nil
	})
	cluster.Handle(srv, wire.MethodLatestPart, l.latestPart)
}

// Local is this node as a replica: it serves shards and series metadata from the
// local store. It is the Replica a node reaches itself through, and what it serves to
// the others over RPC.
type Local struct {
	store     store.Store
	quantum   quanta.Quantum
	format    quanta.Format
	stats     func() wire.NodeStats
	maxFuture time.Duration

	// readRequests counts the read and aggregate requests (wire.MethodRead, MethodAgg,
	// MethodAggSeries) this replica answered for other nodes' coordinators.
	readRequests atomic.Int64
	// catalogReads counts the catalog reads (wire.MethodEntryGet, MethodPostings,
	// MethodListing) this replica answered for other nodes' coordinators.
	catalogReads atomic.Int64

	shapes shapeCache // shape.go
}

// ReadRequests returns how many read and aggregate requests this replica answered for
// other nodes' coordinators (wire.NodeStats.ReadRequests): a query over many series
// costs each node one per page (coord.GetMany).
func (l *Local) ReadRequests() int64 { return l.readRequests.Load() }

// CatalogReads returns how many catalog reads this replica answered for other nodes'
// coordinators (wire.NodeStats.CatalogReads): a listing costs each catalog replica one
// (wire.MethodListing) when its answer is all the coordinator needs.
func (l *Local) CatalogReads() int64 { return l.catalogReads.Load() }

// Config configures a Local replica.
type Config struct {
	// Store holds the replica's shards, series types and catalog. Required.
	Store store.Store
	// Quantum is the cluster's quantum: a shard's start must be the start of one.
	Quantum quanta.Quantum
	// Format is the cluster's shard ID layout: a shard's ID must be its series' at its
	// start.
	Format quanta.Format
	// MaxFuture refuses points stamped further ahead than this (plus
	// replicaClockSlack), as coordinators do: a replica checks what it is sent,
	// whoever sends it. 0 refuses none.
	MaxFuture time.Duration
	// Stats returns the node's counters, which Stats answers; nil answers zero.
	Stats func() wire.NodeStats
}

// New returns the replica of cfg.Store.
func New(cfg Config) *Local {
	stats := cfg.Stats
	if stats == nil {
		stats = func() wire.NodeStats { return wire.NodeStats{} }
	}
	return &Local{store: cfg.Store, quantum: cfg.Quantum, format: cfg.Format, stats: stats, maxFuture: cfg.MaxFuture}
}

// replicaClockSlack is what a replica adds to MaxFuture for the skew between its clock
// and the coordinator's.
const replicaClockSlack = time.Minute

// Write stores a write request's shards. A request of several shards (a coordinator's
// group commit, a batch of a series over quanta) goes to a store.BatchAppender as one
// batch: every shard checked first, then one engine commit, all or nothing.
func (l *Local) Write(_ context.Context, req *wire.WriteReq) (*wire.WriteResp, error) {
	limit := time.Now().Add(l.maxFuture + replicaClockSlack).UnixNano()
	if ba, ok := l.store.(store.BatchAppender); ok && len(req.Shards) > 1 && !req.Repair {
		return l.writeBatch(ba, req, limit)
	}
	stored := 0
	var deleted []wire.ShardRanges
	var conflicts []int
	for i := range req.Shards {
		w := &req.Shards[i]
		ref, span, err := l.checkWrite(w, req.Repair)
		if err != nil {
			return nil, err
		}
		if err := l.checkPoints(w, span, limit); err != nil {
			return nil, err
		}
		if d, ok := l.store.(store.Deleter); ok && req.Repair {
			// Another replica's copy: what a tombstone covers stays deleted, and the
			// sender learns the tombstones.
			r, err := d.Restore(ref, w.Key, w.Points, store.RestoreOptions{SenderDeleted: cluster.FromWireRanges(w.Deleted), KeepHeld: req.Keep})
			if err != nil {
				return nil, storeError(err)
			}
			stored += r.Stored
			if r.Conflicts > 0 {
				conflicts = append(conflicts, i)
			}
			if rs, err := l.tombstones(ref, w.Key); err != nil {
				return nil, storeError(err)
			} else if len(rs) > 0 {
				deleted = append(deleted, wire.ShardRanges{Index: i, Ranges: rs})
			}
			continue
		}
		if err := l.store.Append(ref, w.Key, w.Points); err != nil {
			return nil, storeError(err)
		}
		stored += w.Points.Len()
	}
	return &wire.WriteResp{Stored: stored, Deleted: deleted, Conflicts: conflicts}, nil
}

// writeBatch is Write of several shards through one AppendBatch.
func (l *Local) writeBatch(ba store.BatchAppender, req *wire.WriteReq, limit int64) (*wire.WriteResp, error) {
	batch := make([]store.PairAppend, len(req.Shards))
	stored := 0
	for i := range req.Shards {
		w := &req.Shards[i]
		ref, span, err := l.checkWrite(w, req.Repair)
		if err != nil {
			return nil, err
		}
		if err := l.checkPoints(w, span, limit); err != nil {
			return nil, err
		}
		batch[i] = store.PairAppend{Ref: ref, Key: w.Key, Points: w.Points}
		stored += w.Points.Len()
	}
	if err := ba.AppendBatch(batch); err != nil {
		return nil, storeError(err)
	}
	return &wire.WriteResp{Stored: stored}, nil
}

// checkPoints refuses what a coordinator would have refused: invalid points (lengths,
// string sizes), points outside the shard's quantum (they would be filed under the
// wrong shard ID), points stamped too far in the future.
func (l *Local) checkPoints(w *wire.ShardWrite, q quanta.Quantum, limit int64) error {
	if err := w.Points.Valid(); err != nil {
		return rpc.Errorf(wire.CodeBadInput, "write of %q: %v", w.Key, err)
	}
	lo, hi := q.BeginNanos(w.Start), q.EndNanos(w.Start)
	for _, t := range w.Points.T {
		if t < lo || t >= hi {
			return rpc.Errorf(wire.CodeBadInput, "write of %q: point at %d is outside the shard's quantum [%d, %d)", w.Key, t, lo, hi)
		}
		if t > limit {
			return rpc.Errorf(wire.CodeBadInput, "write of %q: timestamp %s is more than %v in the future of this replica's clock (check the writer's clock)",
				w.Key, time.Unix(0, t).UTC().Format(time.RFC3339Nano), l.maxFuture+replicaClockSlack)
		}
	}
	return nil
}

func (l *Local) Read(ctx context.Context, req *wire.ReadReq) (*wire.ReadResp, error) {
	return l.ReadInto(ctx, req, nil, nil)
}

// ReadInto implements Local: Read answering in out when it has a result per shard (a
// long read's page buffer, pagebufs.go, which the caller copies the answers out of
// before it reuses it), else in a new slice, calling yield (when not nil) with the
// index of each shard once it has answered it.
func (l *Local) ReadInto(ctx context.Context, req *wire.ReadReq, out []wire.ShardResult, yield func(i int)) (*wire.ReadResp, error) {
	if len(out) == len(req.Shards) {
		clear(out)
	} else {
		out = make([]wire.ShardResult, len(req.Shards))
	}
	resp := &wire.ReadResp{Shards: out}
	// The shards that need their points are read after the others, all in one store
	// pass (store.ReadBatch), in the request's order: the coordinator asks for a
	// replica's shards in the store's key order (store.ComparePairs), where a pass
	// steps through the blocks it holds instead of looking each pair up afresh.
	rb := readBatch{req: req, resp: resp, ctx: ctx, yield: yield, readBufs: readBufPool.Get().(*readBufs)}
	defer rb.release()
	for i := range req.Shards {
		if i%ctxCheckEvery == ctxCheckEvery-1 && ctx.Err() != nil {
			// The caller gave up (cancelled, or past its deadline): stop reading for it.
			return nil, rpc.Errorf(wire.CodeUnavailable, "read stopped after %d of %d shards: %v", i+1, len(req.Shards), ctx.Err())
		}
		r := &req.Shards[i]
		ref, err := l.checkShard(r.ID, r.Start, l.quantumOf(r.Q), r.Key)
		if err != nil {
			return nil, err
		}
		if r.From > r.To {
			return nil, rpc.Errorf(wire.CodeBadInput, "read of %q: from %d is after to %d", r.Key, r.From, r.To)
		}
		res := &resp.Shards[i]
		if res.Deleted, err = l.tombstones(ref, r.Key); err != nil {
			return nil, storeError(err)
		}
		if r.Digest && r.SetHash {
			st, held, err := cluster.PairSetHash(l.store, ref, r.Key)
			if err != nil {
				return nil, storeError(err)
			}
			res.Held, res.Count, res.Hash, res.SetHash = held, int(st.Count), st.Hash, true
			rb.step(i)
			continue
		}
		whole := !r.Strong && r.From <= ref.Q.BeginNanos(r.Start) && r.To >= ref.Q.EndNanos(r.Start)
		if sum, ok := l.store.(cluster.Summarizer); ok && whole && r.Digest {
			s, held, err := sum.Summary(ref, r.Key)
			if err != nil {
				return nil, storeError(err)
			}
			res.Held, res.Count, res.Hash = held, int(s.Count), cluster.SummaryHash(s.Count, s.MinT, s.MaxT)
			rb.step(i)
			continue
		}
		rb.add(i, whole, store.PairRead{Ref: ref, Key: r.Key, From: r.From, To: r.To})
	}
	if err := rb.flush(l.store); err != nil {
		return nil, err
	}
	return resp, nil
}

// readBatch gathers the shards of a read that need their points, and reads them into
// the answer together.
type readBatch struct {
	req   *wire.ReadReq
	resp  *wire.ReadResp
	ctx   context.Context
	yield func(i int) // ReadInto's, called with each shard's index once it is answered; may be nil
	done  int         // reads answered
	*readBufs
	answer int // bytes of points answered so far
	// refusal is the answer's own error (too large), not the store's.
	refusal error
	stopped error // the caller gave up
}

// readBufs are a read's shards that need their points, kept from read to read in
// readBufPool: a request asks for up to cluster.MaxShardsPerRequest shards.
type readBufs struct {
	reads  []store.PairRead
	shards []int  // the index in req of each of reads
	whole  []bool // whether each of reads spans its whole quantum
}

var readBufPool = sync.Pool{New: func() any { return new(readBufs) }}

// release returns b's buffers to readBufPool, holding no series key.
func (b *readBatch) release() {
	clear(b.reads)
	b.reads, b.shards, b.whole = b.reads[:0], b.shards[:0], b.whole[:0]
	readBufPool.Put(b.readBufs)
	b.readBufs = nil
}

func (b *readBatch) add(i int, whole bool, r store.PairRead) {
	b.reads = append(b.reads, r)
	b.shards = append(b.shards, i)
	b.whole = append(b.whole, whole)
}

// step follows the answer of shard i: a long read's page lets small requests in
// between two shards (longread.go).
func (b *readBatch) step(i int) {
	if b.yield != nil {
		b.yield(i)
	}
}

// flush reads the gathered shards into the answer.
func (b *readBatch) flush(st store.Store) error {
	if len(b.reads) == 0 {
		return nil
	}
	err := store.ReadBatch(st, b.reads, b.answerShard)
	if b.refusal != nil {
		return b.refusal
	}
	if b.stopped != nil {
		return b.stopped
	}
	if err != nil {
		return storeError(err)
	}
	return nil
}

// answerShard puts the points of reads[j] into the answer, refusing an answer that grows
// too large.
func (b *readBatch) answerShard(j int, pts series.Points, held bool) error {
	i := b.shards[j]
	if b.done++; b.done%ctxCheckEvery == 0 && b.ctx.Err() != nil {
		// The caller gave up (cancelled, or past its deadline): stop reading for it.
		b.stopped = rpc.Errorf(wire.CodeUnavailable, "read stopped after %d of %d shards read for their points: %v", b.done, len(b.reads), b.ctx.Err())
		return b.stopped
	}
	b.step(i)
	r, res := &b.req.Shards[i], &b.resp.Shards[i]
	res.Held, res.Count, res.Hash = held, pts.Len(), cluster.ReadDigest(&pts, b.whole[j])
	if !r.Digest {
		res.Points = pts
		if b.answer += pts.WireSize(); b.answer > wire.MaxReadAnswerBytes {
			b.refusal = rpc.Errorf(wire.CodeTooLarge, "read of %q: the answer would exceed %d bytes (quantum %d holds long values); ask for a shorter range",
				r.Key, wire.MaxReadAnswerBytes, r.Start)
			return b.refusal
		}
	}
	return nil
}

func (l *Local) DeclareSeries(_ context.Context, key string, d store.Decl) (store.Decl, error) {
	have, err := l.store.DeclareSeries(key, d)
	if err != nil {
		return have, storeError(err)
	}
	return have, nil
}

// DeclareMany declares every series at once: in one commit and one disk sync when the
// store declares many at once (store.DeclaresMany), otherwise each on a goroutine of
// its own (a bounded number), so that their commits share the store's disk syncs.
func (l *Local) DeclareMany(ctx context.Context, keys []string, ds []store.Decl) ([]store.Decl, []error, error) {
	if dm, ok := l.store.(store.DeclaresMany); ok {
		out, errs := dm.DeclareSeriesMany(keys, ds)
		for i, err := range errs {
			if err != nil {
				errs[i] = storeError(err)
			}
		}
		return out, errs, nil
	}
	out, errs := make([]store.Decl, len(keys)), make([]error, len(keys))
	sem := make(chan struct{}, maxDeclaresAtOnce)
	var wg sync.WaitGroup
	for i, k := range keys {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			out[i], errs[i] = l.DeclareSeries(ctx, k, ds[i])
		})
	}
	wg.Wait()
	return out, errs, nil
}

// maxDeclaresAtOnce bounds the declarations of one DeclareMany under way at once.
const maxDeclaresAtOnce = 64

func (l *Local) SeriesDecl(_ context.Context, key string) (store.Decl, bool, error) {
	d, ok := l.store.SeriesDecl(key)
	return d, ok, nil
}

func (l *Local) Stats(context.Context) (wire.NodeStats, error) { return l.stats(), nil }

// checkShard refuses a shard whose ID does not belong to its key and quantum under this
// cluster's layout: a confused or hostile peer must not file points under a wrong ID.
func (l *Local) checkShard(id []byte, start int64, q quanta.Quantum, key string) (store.ShardRef, error) {
	if err := series.ValidateKey(key); err != nil {
		return store.ShardRef{}, rpc.Errorf(wire.CodeBadInput, "%v", err)
	}
	if err := checkQuantum(q, start); err != nil {
		return store.ShardRef{}, rpc.Errorf(wire.CodeBadInput, "shard of series %q: %v", key, err)
	}
	ref := cluster.ShardRef(l.format, key, start)
	ref.Q = q
	if len(id) != quanta.IDLen || quanta.ID(id) != ref.ID {
		return store.ShardRef{}, rpc.Errorf(wire.CodeBadInput, "shard %x is not series %q at quantum %d", id, key, start)
	}
	return ref, nil
}

// checkQuantum refuses a quantum length out of range, or a start that is not one of
// its quanta's.
func checkQuantum(q quanta.Quantum, start int64) error {
	if q < 1 || q > quanta.MaxQuantum {
		return fmt.Errorf("quantum length %ds: must be 1s..%v", q, quanta.MaxQuantum.Duration())
	}
	if start%int64(q) != 0 {
		return fmt.Errorf("%d is not the start of a quantum of %v", start, q.Duration())
	}
	return nil
}

// quantumOf is the quantum length a request names: its own (wire Q), or the cluster's.
func (l *Local) quantumOf(q int64) quanta.Quantum {
	if q == 0 {
		return l.quantum
	}
	return quanta.Quantum(q)
}

// checkWrite checks a write's shard and returns its reference and the quantum its
// points must fall in. A repair write names no quantum when the replica that sends it
// stored the points without learning the series' (a data replica knows only the
// shard): its shard ID is checked as ever, its points are taken within the longest
// quantum a series may have, and the store seals the pair as one of the cluster's
// quantum (early for a longer one, which costs a re-seal, not a point).
func (l *Local) checkWrite(w *wire.ShardWrite, repair bool) (store.ShardRef, quanta.Quantum, error) {
	if repair && w.Q == 0 {
		ref, err := l.checkShard(w.ID, w.Start, 1, w.Key)
		ref.Q = 0
		return ref, quanta.MaxQuantum, err
	}
	ref, err := l.checkShard(w.ID, w.Start, l.quantumOf(w.Q), w.Key)
	return ref, ref.Q, err
}

// storeError maps a store failure to an error code a client can act on.
func storeError(err error) error {
	switch {
	case errors.Is(err, series.ErrTypeMismatch):
		return rpc.Errorf(wire.CodeTypeMismatch, "%v", err)
	case errors.Is(err, store.ErrExpired):
		return rpc.Errorf(wire.CodeExpired, "%v", err)
	case errors.Is(err, store.ErrDiskFull):
		return rpc.Errorf(wire.CodeDiskFull, "%v", err)
	}
	return rpc.Errorf(wire.CodeUnavailable, "%v", err)
}
