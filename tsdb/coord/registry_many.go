package coord

import (
	"context"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// lookupMany is lookup of many series at once: what this node has not cached is asked
// of the registry replicas of all of them together, one request per replica
// (wire.MethodTypes, at most wire.MaxTypesPerRequest keys each, Config.ReadConcurrency
// requests at a time), not a request per series per replica. Every registry replica of
// each series is asked, and its answers are counted and decided as lookup decides
// them (declTally, settle). It returns a description or an error per key, in order.
func (g *Registry) lookupMany(ctx context.Context, keys []string) ([]Desc, []error) {
	descs := make([]Desc, len(keys))
	errs := make([]error, len(keys))
	type pending struct {
		key    string
		peers  []dht.Peer
		at     []int // where key is in keys
		answer declTally
	}
	byKey := make(map[string]*pending)
	var work []*pending
	for i, k := range keys {
		if d, ok := g.cached(k); ok {
			descs[i] = d
			continue
		}
		if p := byKey[k]; p != nil {
			p.at = append(p.at, i)
			continue
		}
		peers, err := g.locate(ctx, k)
		if err != nil {
			errs[i] = err
			continue
		}
		p := &pending{key: k, peers: peers, at: []int{i}}
		byKey[k] = p
		work = append(work, p)
	}
	if len(work) == 0 {
		return descs, errs
	}
	batches := cluster.GroupByPeer(func(yield func(dht.Peer, *pending) bool) {
		for _, p := range work {
			for _, peer := range p.peers {
				if !yield(peer, p) {
					return
				}
			}
		}
	}, wire.MaxTypesPerRequest, func(p *pending) int { return len(p.key) + 8 })
	answers := cluster.FanOut(ctx, batches, g.concurrent, g.timeout, func(ctx context.Context, b *cluster.PeerBatch[*pending]) ([]cluster.KnownDecl, error) {
		ks := make([]string, len(b.Items))
		for j, p := range b.Items {
			ks[j] = p.key
		}
		return g.replicas.For(b.Peer).SeriesDecls(ctx, ks)
	})
	for range batches {
		a := <-answers
		for j, p := range a.Batch.Items {
			var d cluster.KnownDecl
			if a.Err == nil {
				d = a.Resp[j]
			}
			p.answer.add(d, a.Err, g.quantum)
		}
	}
	for _, p := range work {
		d, err := g.settle(p.key, &p.answer, len(p.peers))
		for _, i := range p.at {
			descs[i], errs[i] = d, err
		}
	}
	return descs, errs
}
