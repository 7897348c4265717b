package repair

import (
	"context"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/store"
)

// repairCatalog brings the catalog entries this node holds to their registry owners,
// merging each owner's answer back here, and — on the closest live owner of each entry
// only, so that the work is done once — re-posts the series in the tag index: under its
// tags at the metadata's version, under its key's pseudo-tags at its creation's, and,
// for a deleted series, removes it from its pseudo-tags. Entries and postings only ever
// merge, so a replica that missed updates (down, partitioned, a new owner) converges.
func (r *Repairer) repairCatalog(ctx context.Context) error {
	cs, ok := r.store.(store.Catalog)
	if !ok {
		return nil
	}
	var batch []catalog.Entry
	var stepErr error
	err := cs.Entries("", func(e catalog.Entry) bool {
		batch = append(batch, e)
		if len(batch) == cluster.EntryBatch {
			stepErr = r.catalogStep(ctx, cs, batch)
			batch = batch[:0]
		}
		return stepErr == nil && ctx.Err() == nil
	})
	if err == nil && stepErr == nil && len(batch) > 0 {
		stepErr = r.catalogStep(ctx, cs, batch)
	}
	if err != nil {
		return err
	}
	return stepErr
}

func (r *Repairer) catalogStep(ctx context.Context, cs store.Catalog, entries []catalog.Entry) error {
	self := r.place.Self().ID
	type owned struct {
		peers []dht.Peer
		e     catalog.Entry
	}
	var work []owned
	postings := map[catalog.Tag][]catalog.Member{}
	for _, e := range entries {
		peers, err := r.place.Locate(ctx, quanta.KeyID(e.Key), r.cfg.RF)
		if err != nil {
			return err
		}
		work = append(work, owned{peers, e})
		r.redeclareQuantum(ctx, e.Key, peers)
		if len(peers) == 0 || peers[0].ID != self {
			continue
		}
		switch {
		case e.Live():
			for _, t := range catalog.IndexTags(e.Key, nil) {
				postings[t] = append(postings[t], catalog.Member{Key: e.Key, Version: e.Created})
			}
			for _, t := range e.Tags {
				postings[t] = append(postings[t], catalog.Member{Key: e.Key, Version: e.MetaVersion})
			}
		case e.Deleted > 0:
			for _, t := range catalog.IndexTags(e.Key, nil) {
				postings[t] = append(postings[t], catalog.Member{Key: e.Key, Version: e.Deleted, Removed: true})
			}
		}
	}
	batches := cluster.GroupByPeer(func(yield func(dht.Peer, catalog.Entry) bool) {
		for _, o := range work {
			for _, p := range o.peers {
				if p.ID != self && !yield(p, o.e) {
					return
				}
			}
		}
	}, cluster.EntryBatch, cluster.EntrySize)
	answers := cluster.FanOut(ctx, batches, 0, r.cfg.CallTimeout, func(ctx context.Context, b *cluster.PeerBatch[catalog.Entry]) ([]catalog.Entry, error) {
		return r.replicas.For(b.Peer).MergeEntries(ctx, b.Items)
	})
	for range batches {
		a := <-answers
		if a.Err != nil {
			r.log.Warn("repair: pushing catalog entries failed", "peer", cluster.NodeID(a.Batch.Peer), "rpc", a.Batch.Peer.RPCAddr, "err", a.Err)
			continue
		}
		for _, e := range a.Resp {
			// What the owner knew and this node did not (a delete, newer metadata).
			if _, err := cs.MergeEntry(e); err != nil {
				return err
			}
			if d, ok := r.store.(store.Deleter); ok && e.Deleted > 0 && !e.Live() {
				if _, known := r.store.SeriesType(e.Key); known {
					if err := d.ForgetType(e.Key); err != nil {
						return err
					}
				}
			}
		}
	}
	for tag, ms := range postings {
		owners, err := r.place.Locate(ctx, tag.ID(), r.cfg.RF)
		if err != nil {
			return err
		}
		tb := make([]*cluster.PeerBatch[struct{}], len(owners))
		for i, p := range owners {
			tb[i] = &cluster.PeerBatch[struct{}]{Peer: p, Items: []struct{}{{}}}
		}
		res := cluster.FanOut(ctx, tb, 0, r.cfg.CallTimeout, func(ctx context.Context, b *cluster.PeerBatch[struct{}]) (struct{}, error) {
			return struct{}{}, r.replicas.For(b.Peer).MergePostings(ctx, tag, ms)
		})
		for range tb {
			if a := <-res; a.Err != nil {
				r.log.Warn("repair: pushing postings failed", "tag", tag.K, "value", tag.V, "peer", cluster.NodeID(a.Batch.Peer), "rpc", a.Batch.Peer.RPCAddr, "err", a.Err)
			}
		}
	}
	return nil
}

// redeclareQuantum tells a series' registry owners its quantum, when this node holds it
// as one of them did and the series has quanta of its own: from the closest owner (once
// per pass, as the postings), or from a former owner that holds it no more. Its data
// replicas learn the series from appends alone, which carry no quantum, so when every
// registry owner changed, only a former owner can hand the quantum on.
func (r *Repairer) redeclareQuantum(ctx context.Context, key string, owners []dht.Peer) {
	self := r.place.Self().ID
	owner := false
	for _, p := range owners {
		owner = owner || p.ID == self
	}
	if owner && owners[0].ID != self {
		return // the closest owner does it
	}
	if d, ok := r.store.SeriesDecl(key); ok && !d.NoQuantum && d.Quantum != 0 {
		r.types.Redeclare(ctx, key, d)
	}
}
