package coord

import (
	"slices"
	"sync"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// pageBufs holds the working slices of one page of a long read, so that the next page
// (of the same read, or of the next long read) reuses them instead of making them
// again: the plan of a page's shards, the answers of their replicas, the requests
// sent and this node's own answers. A long read of the documented maximum range runs
// 4,096 pages; made afresh, these were about 1 KiB per quantum read, and most of what
// a node under a flood of long reads allocated — garbage whose collection every
// request beside them pays for (BenchmarkLongReadQuantum, TestLongReadAllocs).
//
// A long read's page carries its pageBufs in its context (longTurn.page); a short
// read has none, and the same functions then use a pageBufs of their own, fresh.
// Nothing a read returns refers to them: they hold the page's structure (spans,
// answers, requests), never its points' storage, and are cleared before each reuse so
// that they keep no points alive.
type pageBufs struct {
	long    bool // a long read's (from pageBufPool), not a short read's fresh ones
	nap     bool // this page was held back by the pacer: it naps at its yields (longread.go)
	spans   []shardSpan
	owners  []dht.Peer // the spans' replica sets, when placed by a scan (replicaScanner)
	starts  []int64
	answers [][]replicaAnswer
	flat    []replicaAnswer // answers' backing array
	asked   [][]bool
	askedF  []bool // asked's backing array
	width   []int
	more    []int
	plan    []fetch
	reads   []wire.ShardRead   // the requests' shards, every batch's in one array
	results []wire.ShardResult // this node's answers, every batch's in one array

	// an aggregate's page (aggRound)
	aggAnswers [][]aggAnswer
	aggFlat    []aggAnswer // aggAnswers' backing array
	aggReads   []wire.ShardAgg
	aggResults []wire.ShardAggResult
	refs       []store.ShardRef

	// groupFetches
	peerAt  map[string]int // a peer's index in peers, by ID
	peers   []dht.Peer
	peerOf  []int // the index in peers of each fetch's peer
	counts  []int
	offs    []int
	items   []fetch
	batches []cluster.PeerBatch[fetch]
	ptrs    []*cluster.PeerBatch[fetch]
}

var pageBufPool = sync.Pool{New: func() any { return &pageBufs{long: true} }}

// replicaScanner is a Placement that can find a replica set into the caller's slice
// without its cache (dht.Node.ReplicaSetInto): a long read's page places its shards
// so, each once, instead of filling the cache that writes and short reads use with
// sets nobody asks for again. ok is false where it cannot (then Locate).
type replicaScanner interface {
	ReplicaSetInto(dst []dht.Peer, id quanta.ID, rf int) (ps []dht.Peer, ok bool)
}

// orFresh returns b, or, for a read that has none (a short read), fresh empty buffers.
func orFresh(b *pageBufs) *pageBufs {
	if b == nil {
		return new(pageBufs)
	}
	return b
}

// paced reports whether b are a long read's page's buffers: its fetches then go one at
// a time (fetchLimit), and this node's store yields the core as it reads for it (yield).
func (b *pageBufs) paced() bool { return b != nil && b.long }

// reuse returns (*buf)[:n], cleared, growing *buf when it is too short.
func reuse[T any](buf *[]T, n int) []T {
	if cap(*buf) < n {
		*buf = make([]T, n)
	}
	s := (*buf)[:n:n]
	clear(s)
	return s
}

// answersFor returns answers of spans, one per replica of each, all in one array.
func (b *pageBufs) answersFor(spans []shardSpan) [][]replicaAnswer {
	n := 0
	for i := range spans {
		n += len(spans[i].replicas)
	}
	answers, flat := reuse(&b.answers, len(spans)), reuse(&b.flat, n)
	for i := range spans {
		k := len(spans[i].replicas)
		answers[i], flat = flat[:k:k], flat[k:]
	}
	return answers
}

// askedFor returns a flag per replica of each of spans, all false, in one array.
func (b *pageBufs) askedFor(spans []shardSpan) [][]bool {
	n := 0
	for i := range spans {
		n += len(spans[i].replicas)
	}
	asked, flat := reuse(&b.asked, len(spans)), reuse(&b.askedF, n)
	for i := range spans {
		k := len(spans[i].replicas)
		asked[i], flat = flat[:k:k], flat[k:]
	}
	return asked
}

// aggAnswersFor is answersFor for an aggregate's page.
func (b *pageBufs) aggAnswersFor(spans []shardSpan) [][]aggAnswer {
	n := 0
	for i := range spans {
		n += len(spans[i].replicas)
	}
	answers, flat := reuse(&b.aggAnswers, len(spans)), reuse(&b.aggFlat, n)
	for i := range spans {
		k := len(spans[i].replicas)
		answers[i], flat = flat[:k:k], flat[k:]
	}
	return answers
}

// groupFetches is groupByPeer for a page's fetches, made in b: the fetches of plan
// grouped by the replica they ask (spans[f.shard].replicas[f.replica]), peers in the
// order they first appear, each peer's fetches in the order its store keeps the pairs
// (store.ComparePairs) and cut into batches of
// at most maxBatch. The batches hold until b's next groupFetches.
func (b *pageBufs) groupFetches(spans []shardSpan, plan []fetch, maxBatch int) []*cluster.PeerBatch[fetch] {
	if b.peerAt == nil {
		b.peerAt = make(map[string]int)
	}
	clear(b.peerAt)
	clear(b.peers) // no peer kept alive from an earlier page
	peers, counts := b.peers[:0], b.counts[:0]
	peerOf := reuse(&b.peerOf, len(plan))
	for i, f := range plan {
		p := &spans[f.shard].replicas[f.replica]
		k, ok := b.peerAt[p.ID]
		if !ok {
			k = len(peers)
			b.peerAt[p.ID] = k
			peers, counts = append(peers, *p), append(counts, 0)
		}
		peerOf[i] = k
		counts[k]++
	}
	b.peers, b.counts = peers, counts
	offs := reuse(&b.offs, len(peers)) // where each peer's fetches start in items
	nb, at := 0, 0
	for k, n := range counts {
		offs[k], at = at, at+n
		nb += (n + maxBatch - 1) / maxBatch
	}
	items := reuse(&b.items, len(plan))
	for i, f := range plan {
		k := peerOf[i]
		items[offs[k]] = f
		offs[k]++
	}
	// Each peer's fetches in the order its store keeps the pairs: a request then asks
	// for neighbours in its store, whose pass over them steps through the same blocks
	// instead of looking each pair up afresh.
	cmpFetch := func(a, b fetch) int {
		sa, sb := &spans[a.shard], &spans[b.shard]
		return store.ComparePairs(sa.ref, sa.key, sb.ref, sb.key)
	}
	for k, n := range counts {
		slices.SortFunc(items[offs[k]-n:offs[k]], cmpFetch)
	}
	batches, ptrs := reuse(&b.batches, nb), reuse(&b.ptrs, nb)
	j, at := 0, 0
	for k, n := range counts {
		for lo := at; lo < at+n; lo += maxBatch {
			hi := min(lo+maxBatch, at+n)
			batches[j] = cluster.PeerBatch[fetch]{Peer: peers[k], Items: items[lo:hi:hi]}
			ptrs[j] = &batches[j]
			j++
		}
		at += n
	}
	return ptrs
}
