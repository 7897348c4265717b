package replica

import (
	"context"
	"sync/atomic"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// The catalog's replica methods: entries on a series' registry replicas, posting lists
// on their tag's replicas, and range deletes on shard replicas (docs/catalog.md).

func RegisterCatalog(srv *rpc.Server, r cluster.Replica) { registerCatalog(srv, r, nil) }

// registerCatalog registers the catalog methods, counting in reads (when not nil) the
// catalog reads (entries, posting pages, listings) answered.
func registerCatalog(srv *rpc.Server, r cluster.Replica, reads *atomic.Int64) {
	count := func() {
		if reads != nil {
			reads.Add(1)
		}
	}
	cluster.Handle(srv, wire.MethodEntryMerge, func(ctx context.Context, req *wire.EntriesMsg) (*wire.EntriesMsg, error) {
		es, err := req.Decode()
		if err != nil {
			return nil, rpc.Errorf(wire.CodeBadInput, "%v", err)
		}
		out, err := r.MergeEntries(ctx, es)
		if err != nil {
			return nil, err
		}
		return wire.EncodeEntries(out), nil
	})
	cluster.Handle(srv, wire.MethodEntryGet, func(ctx context.Context, req *wire.KeysReq) (*wire.EntriesMsg, error) {
		count()
		if len(req.Keys) > wire.MaxEntriesPerRequest {
			return nil, rpc.Errorf(wire.CodeBadInput, "%d keys; at most %d", len(req.Keys), wire.MaxEntriesPerRequest)
		}
		out, err := r.Entries(ctx, req.Keys)
		if err != nil {
			return nil, err
		}
		return wire.EncodeEntries(out), nil
	})
	cluster.Handle(srv, wire.MethodPostingsMerge, func(ctx context.Context, req *wire.PostingsMergeReq) (*struct{}, error) {
		if len(req.Members) > wire.MaxEntriesPerRequest {
			return nil, rpc.Errorf(wire.CodeBadInput, "%d members; at most %d", len(req.Members), wire.MaxEntriesPerRequest)
		}
		return &struct{}{}, r.MergePostings(ctx, catalog.Tag{K: req.K, V: req.V}, wire.ToMembers(req.Members))
	})
	cluster.Handle(srv, wire.MethodPostingsMergeMany, func(ctx context.Context, req *wire.PostingsMergeManyReq) (*struct{}, error) {
		lists, err := req.Decode()
		if err != nil {
			return nil, rpc.Errorf(wire.CodeBadInput, "%v", err)
		}
		return &struct{}{}, r.MergePostingsMany(ctx, lists)
	})
	cluster.Handle(srv, wire.MethodCatalogMerge, func(ctx context.Context, req *wire.CatalogMergeReq) (*wire.EntriesMsg, error) {
		lists, es, err := req.Decode()
		if err != nil {
			return nil, rpc.Errorf(wire.CodeBadInput, "%v", err)
		}
		out, err := r.MergeCatalog(ctx, lists, es)
		if err != nil {
			return nil, err
		}
		return wire.EncodeEntries(out), nil
	})
	cluster.Handle(srv, wire.MethodPostings, func(ctx context.Context, req *wire.PostingsReq) (*wire.PostingsResp, error) {
		count()
		ms, err := r.Postings(ctx, catalog.Tag{K: req.K, V: req.V}, req.After, req.Limit)
		if err != nil {
			return nil, err
		}
		return &wire.PostingsResp{Members: wire.FromMembers(ms)}, nil
	})
	cluster.Handle(srv, wire.MethodShape, func(ctx context.Context, req *wire.ShapeReq) (*wire.ShapeResp, error) {
		q, err := req.Query()
		if err != nil {
			return nil, rpc.Errorf(wire.CodeBadInput, "%v", err)
		}
		s, err := r.Shape(ctx, q)
		if err != nil {
			return nil, err
		}
		return wire.EncodeShape(s), nil
	})
	cluster.Handle(srv, wire.MethodDeleteRange, r.DeleteRange)
	registerListing(srv, r, count) // listing.go
}

// catalogStore is what the catalog needs of a node's store.
type catalogStore interface {
	store.Catalog
	store.Deleter
}

func (l *Local) catalog() (catalogStore, error) {
	cs, ok := l.store.(catalogStore)
	if !ok {
		return nil, rpc.Errorf(wire.CodeUnavailable, "this node's store keeps no catalog")
	}
	return cs, nil
}

func (l *Local) MergeEntries(_ context.Context, es []catalog.Entry) ([]catalog.Entry, error) {
	cs, err := l.catalog()
	if err != nil {
		return nil, err
	}
	for _, e := range es {
		if err := e.Validate(); err != nil {
			return nil, rpc.Errorf(wire.CodeBadInput, "%v", err)
		}
	}
	out := make([]catalog.Entry, len(es))
	em, batched := cs.(store.EntriesMerger)
	if batched = batched && len(es) > 1; batched {
		// One commit and one disk sync for all (a PutMany's newest quanta).
		if out, err = em.MergeEntries(es); err != nil {
			return nil, storeError(err)
		}
	}
	for i, e := range es {
		if !batched {
			if out[i], err = cs.MergeEntry(e); err != nil {
				return nil, storeError(err)
			}
		}
	}
	return out, l.freeDeleted(cs, out)
}

// freeDeleted forgets the types of the series whose merged entries say they were
// deleted whole: the key is free, so that a new type may be declared. A type declared
// after the delete comes back with its own entry.
func (l *Local) freeDeleted(cs catalogStore, merged []catalog.Entry) error {
	for _, e := range merged {
		if e.Deleted > 0 && !e.Live() {
			if _, ok := l.store.SeriesType(e.Key); ok {
				if err := cs.ForgetType(e.Key); err != nil {
					return storeError(err)
				}
			}
		}
	}
	return nil
}

// MergeCatalog merges the lists' members and the entries in one store commit when the
// store can (store.CatalogMerger), all or none; otherwise the members first, then the
// entries, as two requests would.
func (l *Local) MergeCatalog(ctx context.Context, lists []catalog.TagMembers, es []catalog.Entry) ([]catalog.Entry, error) {
	cs, err := l.catalog()
	if err != nil {
		return nil, err
	}
	cm, ok := cs.(store.CatalogMerger)
	if !ok {
		if err := l.MergePostingsMany(ctx, lists); err != nil {
			return nil, err
		}
		return l.MergeEntries(ctx, es)
	}
	for _, e := range es {
		if err := e.Validate(); err != nil {
			return nil, rpc.Errorf(wire.CodeBadInput, "%v", err)
		}
	}
	for _, tm := range lists {
		if err := catalog.ValidateIndexTag(tm.Tag); err != nil {
			return nil, rpc.Errorf(wire.CodeBadInput, "%v", err)
		}
		for _, m := range tm.Members {
			if err := catalog.ValidateMember(m); err != nil {
				return nil, rpc.Errorf(wire.CodeBadInput, "%v", err)
			}
		}
	}
	out, err := cm.MergeCatalog(lists, es)
	if err != nil {
		return nil, storeError(err)
	}
	return out, l.freeDeleted(cs, out)
}

func (l *Local) Entries(_ context.Context, keys []string) ([]catalog.Entry, error) {
	cs, err := l.catalog()
	if err != nil {
		return nil, err
	}
	if eg, ok := cs.(store.EntriesGetter); ok && len(keys) > 1 {
		out, err := eg.EntriesOf(keys)
		if err != nil {
			return nil, storeError(err)
		}
		return out, nil
	}
	var out []catalog.Entry
	for _, k := range keys {
		e, ok, err := cs.Entry(k)
		if err != nil {
			return nil, storeError(err)
		}
		if ok {
			out = append(out, e)
		}
	}
	return out, nil
}

func (l *Local) MergePostings(_ context.Context, tag catalog.Tag, ms []catalog.Member) error {
	cs, err := l.catalog()
	if err != nil {
		return err
	}
	if err := cs.MergePostings(tag, ms); err != nil {
		return rpc.Errorf(wire.CodeBadInput, "%v", err)
	}
	return nil
}

// MergePostingsMany merges every list in one store commit when the store can
// (store.PostingsMerger), each list in its own otherwise.
func (l *Local) MergePostingsMany(_ context.Context, lists []catalog.TagMembers) error {
	cs, err := l.catalog()
	if err != nil {
		return err
	}
	pm, batched := cs.(store.PostingsMerger)
	if batched {
		err = pm.MergePostingsMany(lists)
	}
	for _, tm := range lists {
		if !batched && err == nil {
			err = cs.MergePostings(tm.Tag, tm.Members)
		}
	}
	if err != nil {
		return rpc.Errorf(wire.CodeBadInput, "%v", err)
	}
	return nil
}

func (l *Local) Postings(_ context.Context, tag catalog.Tag, after string, limit int) ([]catalog.Member, error) {
	cs, err := l.catalog()
	if err != nil {
		return nil, err
	}
	ms, err := cs.Postings(tag, after, limit)
	if err != nil {
		return nil, rpc.Errorf(wire.CodeBadInput, "%v", err)
	}
	return ms, nil
}

func (l *Local) DeleteRange(_ context.Context, req *wire.DeleteReq) (*wire.DeleteResp, error) {
	cs, err := l.catalog()
	if err != nil {
		return nil, err
	}
	if len(req.Shards) > wire.MaxDeleteShards {
		return nil, rpc.Errorf(wire.CodeBadInput, "%d shards in one delete; at most %d", len(req.Shards), wire.MaxDeleteShards)
	}
	var resp wire.DeleteResp
	for _, d := range req.Shards {
		ref, err := l.checkShard(d.ID, d.Start, l.quantumOf(d.Q), d.Key)
		if err != nil {
			return nil, err
		}
		if d.From >= d.To {
			return nil, rpc.Errorf(wire.CodeBadInput, "delete of %q: empty range [%d, %d)", d.Key, d.From, d.To)
		}
		n, err := cs.DeleteRange(ref, d.Key, d.From, d.To)
		if err != nil {
			return nil, storeError(err)
		}
		resp.Dropped += n
		if d.Whole {
			if err := cs.ForgetType(d.Key); err != nil {
				return nil, storeError(err)
			}
		}
	}
	return &resp, nil
}

// tombstones returns the pair's deleted ranges on the wire, nil if none or if the
// store keeps none.
func (l *Local) tombstones(ref store.ShardRef, key string) ([]wire.Range, error) {
	d, ok := l.store.(store.Deleter)
	if !ok {
		return nil, nil
	}
	rs, err := d.Tombstones(ref, key)
	if err != nil || len(rs) == 0 {
		return nil, err
	}
	return cluster.ToWireRanges(rs), nil
}

// --- remote ---
