package tsdb

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
)

// maxTypeCache bounds the coordinator's memory of series types; past it the cache starts
// over (types never change, so forgetting costs only a round trip).
const maxTypeCache = 1 << 16

// Coordinator writes and reads series on behalf of clients: it maps points to shards,
// shards to replica sets, and fans requests out to the replicas in parallel.
type Coordinator struct {
	n *Node

	mu    sync.Mutex
	types map[string]series.Type

	repairSlots chan struct{} // bounds background read repairs
	readRepairs atomic.Int64  // shards repaired by reads
}

// maxReadRepairs bounds the read repairs in flight on one node.
const maxReadRepairs = 4

func newCoordinator(n *Node) *Coordinator {
	return &Coordinator{n: n, types: make(map[string]series.Type), repairSlots: make(chan struct{}, maxReadRepairs)}
}

// PutOptions tune one write.
type PutOptions struct {
	// WriteQuorum overrides the node's write quorum for this write (1..rf; 0 = default).
	WriteQuorum int
}

// GetOptions tune one read.
type GetOptions struct {
	// ReadQuorum overrides how many replicas must agree that a shard is empty (0 = default).
	ReadQuorum int
	// AllowPartial returns what could be read, marked partial, instead of failing when a
	// shard has no reachable replica.
	AllowPartial bool
}

// Result is the answer to a read.
type Result struct {
	Points series.Points
	// Partial is set when Missing shards could not be read from any replica; it can be
	// set only with GetOptions.AllowPartial.
	Partial bool
	Missing int
}

// shardSpan is one shard of a request with the part of the request's range inside it.
type shardSpan struct {
	ref      refID
	from, to int64
	replicas []dht.Peer
	pts      series.Points // for writes
}

type refID struct {
	id    quanta.ID
	start int64
}

// Put writes points of one series. It returns how many points reached their write
// quorum; on error, the points counted are stored and the rest may not be.
func (c *Coordinator) Put(ctx context.Context, key string, pts series.Points, opt PutOptions) (int, error) {
	if err := series.ValidateKey(key); err != nil {
		return 0, rpc.Errorf(CodeBadInput, "%v", err)
	}
	if err := pts.Valid(); err != nil {
		return 0, rpc.Errorf(CodeBadInput, "%v", err)
	}
	if pts.Len() == 0 {
		return 0, nil
	}
	w := c.n.cfg.WriteQuorum
	if opt.WriteQuorum != 0 {
		w = opt.WriteQuorum
	}
	if w < 1 || w > c.n.cfg.RF {
		return 0, rpc.Errorf(CodeBadInput, "write quorum %d: must be 1..rf (%d)", w, c.n.cfg.RF)
	}
	limit := time.Now().Add(c.n.cfg.MaxFuture).UnixNano()
	for _, t := range pts.T {
		if t > limit {
			return 0, rpc.Errorf(CodeBadInput, "timestamp %s is more than %v in the future (check the writer's clock)",
				time.Unix(0, t).UTC().Format(time.RFC3339Nano), c.n.cfg.MaxFuture)
		}
	}
	if err := c.ensureType(ctx, key, pts.Type, w); err != nil {
		return 0, err
	}
	pts.Normalize()
	spans := c.splitByQuantum(key, pts)
	return c.writeSpans(ctx, key, spans, w)
}

// splitByQuantum cuts sorted points at quantum boundaries.
func (c *Coordinator) splitByQuantum(key string, pts series.Points) []shardSpan {
	q := c.n.cfg.DHT.Quantum
	var spans []shardSpan
	for lo := 0; lo < pts.Len(); {
		start := q.Start(pts.T[lo])
		end := q.EndNanos(start)
		hi := lo + 1
		for hi < pts.Len() && pts.T[hi] < end {
			hi++
		}
		ref := c.n.ref(key, start)
		spans = append(spans, shardSpan{
			ref:      refID{ref.ID, start},
			replicas: c.n.dht.ReplicaSet(ref.ID, c.n.cfg.RF),
			pts:      pts.Slice(lo, hi),
		})
		lo = hi
	}
	return spans
}

type nodeResult struct {
	peer   dht.Peer
	shards []int
	err    error
}

// writeSpans sends every shard to all its replicas at once and returns when each shard
// has reached quorum or can no longer reach it. Replica writes still in flight then
// finish in the background, so the last copies land without the client waiting.
func (c *Coordinator) writeSpans(ctx context.Context, key string, spans []shardSpan, w int) (int, error) {
	byNode := map[string]*nodeResult{}
	var order []*nodeResult
	for i := range spans {
		for _, p := range spans[i].replicas {
			nr := byNode[p.ID]
			if nr == nil {
				nr = &nodeResult{peer: p}
				byNode[p.ID] = nr
				order = append(order, nr)
			}
			nr.shards = append(nr.shards, i)
		}
	}
	done := make(chan *nodeResult, len(order))
	bg := context.WithoutCancel(ctx)
	for _, nr := range order {
		go func(nr *nodeResult) {
			req := &writeReq{Shards: make([]shardWrite, len(nr.shards))}
			for j, i := range nr.shards {
				s := &spans[i]
				req.Shards[j] = shardWrite{ID: s.ref.id[:], Start: s.ref.start, Key: key, Points: s.pts}
			}
			nr.err = c.call(bg, nr.peer, methodWrite, req, &writeResp{})
			done <- nr
		}(nr)
	}
	self := c.n.dht.Self().ID
	hinted := make([]bool, len(spans))
	acks := make([]int, len(spans))
	fails := make([]int, len(spans))
	var firstErr error
	undecided := len(spans)
	for i := range spans {
		if len(spans[i].replicas) < w {
			fails[i] = w // too few live nodes: decided as failed up front
			undecided--
			firstErr = fmt.Errorf("only %d live nodes for write quorum %d", len(spans[i].replicas), w)
		}
	}
	received := 0
	for ; undecided > 0 && received < len(order); received++ {
		var nr *nodeResult
		select {
		case nr = <-done:
		case <-ctx.Done():
			return c.countStored(spans, acks, w), rpc.Errorf(CodeUnavailable, "write of %q: %v", key, ctx.Err())
		}
		if nr.err != nil && firstErr == nil {
			firstErr = fmt.Errorf("replica %s: %w", nr.peer.RPCAddr, nr.err)
		}
		if nr.err != nil && errors.Is(nr.err, rpc.ErrUnreachable) {
			for _, i := range nr.shards {
				if !hinted[i] && !isReplica(spans[i].replicas, self) {
					hinted[i] = true
					c.n.hint(spans[i].ref, key, spans[i].pts)
				}
			}
		}
		for _, i := range nr.shards {
			if acks[i] >= w || fails[i] > len(spans[i].replicas)-w {
				continue // already decided
			}
			if nr.err == nil {
				acks[i]++
				if acks[i] == w {
					undecided--
				}
			} else {
				fails[i]++
				if fails[i] > len(spans[i].replicas)-w {
					undecided--
				}
			}
		}
	}
	// Replica writes still in flight finish in the background; those that find their
	// replica unreachable leave a hint, as the ones above did.
	go func(pending int) {
		for ; pending > 0; pending-- {
			nr := <-done
			if nr.err == nil || !errors.Is(nr.err, rpc.ErrUnreachable) {
				continue
			}
			for _, i := range nr.shards {
				if !hinted[i] && !isReplica(spans[i].replicas, self) {
					hinted[i] = true
					c.n.hint(spans[i].ref, key, spans[i].pts)
				}
			}
		}
	}(len(order) - received)
	stored := c.countStored(spans, acks, w)
	total := 0
	for i := range spans {
		total += spans[i].pts.Len()
	}
	if stored < total {
		code := CodeUnavailable
		var re *rpc.RemoteError
		if errors.As(firstErr, &re) && re.Code == CodeTypeMismatch {
			code = CodeTypeMismatch
		}
		return stored, rpc.Errorf(code, "write of %q: stored %d of %d points; the rest did not reach write quorum %d: %v",
			key, stored, total, w, firstErr)
	}
	return stored, nil
}

func isReplica(replicas []dht.Peer, id string) bool {
	for _, p := range replicas {
		if p.ID == id {
			return true
		}
	}
	return false
}

func (c *Coordinator) countStored(spans []shardSpan, acks []int, w int) int {
	n := 0
	for i := range spans {
		if acks[i] >= w {
			n += spans[i].pts.Len()
		}
	}
	return n
}

// call runs one replica-level request, locally when the replica is this node.
func (c *Coordinator) call(ctx context.Context, p dht.Peer, method string, req, resp any) error {
	if p.ID == c.n.dht.Self().ID {
		switch method {
		case methodWrite:
			r, err := c.n.serveWrite(req.(*writeReq))
			if err == nil {
				*resp.(*writeResp) = *r
			}
			return err
		case methodRead:
			r, err := c.n.serveRead(req.(*readReq))
			if err == nil {
				*resp.(*readResp) = *r
			}
			return err
		}
	}
	ctx, cancel := c.n.callCtx(ctx)
	defer cancel()
	return rpc.Invoke(ctx, c.n.cli, p.RPCAddr, method, req, resp)
}

// registryReplicas is where a series' metadata lives: the replica set of SHA-1(key).
func (c *Coordinator) registryReplicas(key string) []dht.Peer {
	return c.n.dht.ReplicaSet(quanta.KeyID(key), c.n.cfg.RF)
}

func (c *Coordinator) cachedType(key string) (series.Type, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.types[key]
	return t, ok
}

func (c *Coordinator) rememberType(key string, t series.Type) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.types) >= maxTypeCache {
		c.types = make(map[string]series.Type)
	}
	c.types[key] = t
}

func mismatch(key string, have, want series.Type) error {
	return rpc.Errorf(CodeTypeMismatch, "series %q holds %s values; refusing %s values", key, have, want)
}

// ensureType fixes the series' type at its registry replicas on the first write, and
// refuses a write of another type than the one fixed first.
func (c *Coordinator) ensureType(ctx context.Context, key string, t series.Type, w int) error {
	if have, ok := c.cachedType(key); ok {
		if have != t {
			return mismatch(key, have, t)
		}
		return nil
	}
	replicas := c.registryReplicas(key)
	type answer struct {
		resp typeResp
		err  error
	}
	answers := make(chan answer, len(replicas))
	for _, p := range replicas {
		go func(p dht.Peer) {
			var a answer
			if p.ID == c.n.dht.Self().ID {
				a.resp.Type, a.err = c.n.store.DeclareType(key, t)
				a.resp.Known = a.err == nil
				if a.err != nil {
					a.err = storeError(a.err)
				}
			} else {
				a.err = c.call(ctx, p, methodDeclare, &typeReq{Key: key, Type: t}, &a.resp)
			}
			answers <- a
		}(p)
	}
	ok := 0
	var lastErr error
	for range replicas {
		a := <-answers
		var re *rpc.RemoteError
		switch {
		case a.err == nil:
			ok++
		case errors.As(a.err, &re) && re.Code == CodeTypeMismatch:
			return rpc.Errorf(CodeTypeMismatch, "%s", re.Msg)
		default:
			lastErr = a.err
		}
	}
	if ok < w {
		return rpc.Errorf(CodeUnavailable, "series %q: could not record its type at %d of %d registry replicas: %v", key, w, len(replicas), lastErr)
	}
	c.rememberType(key, t)
	return nil
}

// seriesType asks the registry replicas for a series' type. One replica's "unknown" is
// not the truth (it may have just become an owner), so every replica is asked.
func (c *Coordinator) seriesType(ctx context.Context, key string) (series.Type, error) {
	if t, ok := c.cachedType(key); ok {
		return t, nil
	}
	replicas := c.registryReplicas(key)
	answers := make(chan typeResp, len(replicas))
	errs := make(chan error, len(replicas))
	for _, p := range replicas {
		go func(p dht.Peer) {
			var r typeResp
			var err error
			if p.ID == c.n.dht.Self().ID {
				r.Type, r.Known = c.n.store.SeriesType(key)
			} else {
				err = c.call(ctx, p, methodType, &typeReq{Key: key}, &r)
			}
			if err != nil {
				errs <- err
				return
			}
			answers <- r
		}(p)
	}
	responded := 0
	var lastErr error
	for range replicas {
		select {
		case r := <-answers:
			responded++
			if r.Known {
				c.rememberType(key, r.Type)
				return r.Type, nil
			}
		case err := <-errs:
			lastErr = err
		}
	}
	if need := min(c.n.cfg.ReadQuorum, len(replicas)); responded < need {
		return series.Unknown, rpc.Errorf(CodeUnavailable, "series %q: %d of %d registry replicas answered, %d needed: %v",
			key, responded, len(replicas), need, lastErr)
	}
	return series.Unknown, rpc.Errorf(CodeUnknownSeries, "unknown series %q", key)
}

// redeclare tells every registry replica of a series its type, for the repairer: an
// owner that already knows it answers at no cost, a new owner learns it.
func (c *Coordinator) redeclare(ctx context.Context, key string, t series.Type) {
	for _, p := range c.registryReplicas(key) {
		if p.ID == c.n.dht.Self().ID {
			c.n.store.DeclareType(key, t)
			continue
		}
		var r typeResp
		if err := c.call(ctx, p, methodDeclare, &typeReq{Key: key, Type: t}, &r); err != nil {
			c.n.log.Printf("repair: registry of %q on %s: %v", key, p.RPCAddr, err)
		}
	}
}
