package cluster

import (
	"context"
	"errors"
	"iter"
	"time"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// PeerBatch is the work one request carries to one peer.
type PeerBatch[T any] struct {
	Peer  dht.Peer
	Items []T
	bytes int // the items' sizes, when grouped by size
}

// maxRequestBytes bounds the bytes of one replica request (its points' WireSize), well
// inside an RPC frame (4 MiB): batches are cut by bytes as well as by count, so that any
// valid write within the documented limits fits, whatever its points are.
const MaxRequestBytes = 1 << 20

// GroupByPeer groups work items by the peer they go to, in the order peers first appear,
// cutting a peer's items into batches of at most maxBatch (0: no limit) and, when size is
// not nil, of at most maxRequestBytes by size (an item larger than that goes alone).
func GroupByPeer[T any](work iter.Seq2[dht.Peer, T], maxBatch int, size func(T) int) []*PeerBatch[T] {
	open := map[string]*PeerBatch[T]{} // the batch of each peer still taking items
	var out []*PeerBatch[T]
	for p, item := range work {
		n := 0
		if size != nil {
			n = size(item)
		}
		b := open[p.ID]
		if b == nil || maxBatch > 0 && len(b.Items) == maxBatch || len(b.Items) > 0 && b.bytes+n > MaxRequestBytes {
			b = &PeerBatch[T]{Peer: p}
			open[p.ID] = b
			out = append(out, b)
		}
		b.Items = append(b.Items, item)
		b.bytes += n
	}
	return out
}

// FanResult is the outcome of one batch.
type FanResult[T, R any] struct {
	Batch *PeerBatch[T]
	Resp  R
	Err   error
}

// FanOut calls call once per batch, at most limit calls at once (0: all at once), each
// under its own deadline of timeout (0: only ctx's), and delivers every batch's outcome
// on the returned channel as it finishes. The channel holds every outcome, so a receiver
// may stop reading early (a write that reached its quorum) and the remaining calls still
// finish in the background. The calls run on StoreWorkers: a call to this node's own
// replica goes as deep as the store's engine, and a fresh goroutine per call grew its
// stack to that depth every time (a load of new series reads and merges their catalog
// entries and posting lists through FanOut).
func FanOut[T, R any](ctx context.Context, batches []*PeerBatch[T], limit int, timeout time.Duration,
	call func(ctx context.Context, b *PeerBatch[T]) (R, error)) <-chan FanResult[T, R] {
	out := make(chan FanResult[T, R], len(batches))
	var sem chan struct{}
	if limit > 0 && limit < len(batches) {
		sem = make(chan struct{}, limit)
	}
	for _, b := range batches {
		StoreWorkers.Run(func() {
			if sem != nil {
				sem <- struct{}{}
				defer func() { <-sem }()
			}
			cctx, cancel := ctx, context.CancelFunc(func() {})
			if timeout > 0 {
				cctx, cancel = context.WithTimeout(ctx, timeout)
			}
			resp, err := call(cctx, b)
			cancel()
			out <- FanResult[T, R]{Batch: b, Resp: resp, Err: err}
		})
	}
	return out
}

// WriteFanOut sends each batch's write request (made by req, on the caller's goroutine;
// batches with the same items may get the same request, encoded once) to its peer at once and
// delivers every outcome on the returned channel, which holds them all, as fanOut does;
// failed runs for each failed batch before its outcome is delivered (it may block: it
// runs on a goroutine of its own). Remote replicas are written through asyncWriter, with
// no goroutine and no context per call; the batch to self (this node's store) is
// written last, on the caller's goroutine, while the remote writes are under way; any
// other replica gets a goroutine. Each call is bounded by timeout, and by ctx for a
// synchronous one. A group commit, if g is not nil, sends the asynchronous ones
// (groupcommit.go).
func WriteFanOut(ctx context.Context, replicas Replicas, self string, g *GroupCommit, batches []*PeerBatch[int], timeout time.Duration,
	req func(b *PeerBatch[int]) *wire.WriteReq, failed func(b *PeerBatch[int], err error)) <-chan FanResult[int, *wire.WriteResp] {
	out := make(chan FanResult[int, *wire.WriteResp], len(batches))
	deliver := func(b *PeerBatch[int], resp *wire.WriteResp, err error) {
		if err != nil && failed != nil {
			go func() {
				failed(b, err)
				out <- FanResult[int, *wire.WriteResp]{Batch: b, Err: err}
			}()
			return
		}
		out <- FanResult[int, *wire.WriteResp]{Batch: b, Resp: resp, Err: err}
	}
	write := func(b *PeerBatch[int], r Replica, rq *wire.WriteReq) {
		cctx, cancel := ctx, context.CancelFunc(func() {})
		if timeout > 0 {
			cctx, cancel = context.WithTimeout(ctx, timeout)
		}
		resp, err := r.Write(cctx, rq)
		cancel()
		deliver(b, resp, err)
	}
	// Batches holding the same request (every replica of a single-shard write) share
	// its encoding: req returns the same one for them.
	var lastReq *wire.WriteReq
	var lastBody []byte
	encoded := func(rq *wire.WriteReq) []byte {
		if rq != lastReq {
			lastReq, lastBody = rq, nil
			if b, err := wire.EncodeWriteReq(rq); err == nil {
				lastBody = b
			} // else WriteAsync encodes it again and reports the error
		}
		return lastBody
	}
	var local []*PeerBatch[int]
	for _, b := range batches {
		switch r := replicas.For(b.Peer); {
		case b.Peer.ID == self:
			local = append(local, b)
		case IsAsync(r):
			done := func(resp *wire.WriteResp, err error) { deliver(b, resp, err) }
			rq := req(b)
			if g != nil {
				g.Write(b.Peer.ID, r.(AsyncWriter), rq, encoded(rq), b.bytes, done)
			} else {
				r.(AsyncWriter).WriteAsync(rq, encoded(rq), done)
			}
		default:
			go write(b, r, req(b))
		}
	}
	for _, b := range local {
		write(b, replicas.For(b.Peer), req(b))
	}
	return out
}

func IsAsync(r Replica) bool {
	_, ok := r.(AsyncWriter)
	return ok
}

// Unanswered reports whether a replica call failed without an answer from the replica —
// it could not be reached or did not answer in time — rather than with an error it
// returned. Only such a replica may be missing what was written to it.
func Unanswered(err error) bool {
	if err == nil {
		return false
	}
	var re *rpc.RemoteError
	if errors.As(err, &re) {
		return false
	}
	return errors.Is(err, rpc.ErrUnreachable) || errors.Is(err, context.DeadlineExceeded)
}

// ShardWriteOverhead bounds what a wire.ShardWrite adds to its key and points.
const ShardWriteOverhead = 64

// MaxShardsPerRequest bounds one read request so its answer stays well inside a frame.
const MaxShardsPerRequest = 64

// EntryBatch is how many catalog entries one request carries (a step of the catalog's repair, a batch of newest-quantum records).
const EntryBatch = 256

// EntrySize bounds an entry's encoded size, for cutting requests by bytes.
func EntrySize(e catalog.Entry) int {
	n := 64 + len(e.Key) + len(e.Unit) + len(e.Description)
	for _, t := range e.Tags {
		n += 4 + len(t.K) + len(t.V)
	}
	return n
}
