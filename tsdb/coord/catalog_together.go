package coord

import (
	"context"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/cluster"
)

// A new series' postings and entry in one commit per replica.
//
// A new series is posted in the index at quorum before its entry is merged (the
// order a crash needs: catalog_many.go), which cost a write of new series two rounds
// and two disk syncs at each replica, one after the other. When a series' registry
// replicas are the replicas of every posting list it joins — always in a cluster of
// rf nodes or fewer, the one-node and three-node deployments — its members go in the
// same request as its entry, to each of those replicas (wire.MethodCatalogMerge), and a
// replica stores both in one commit (store.CatalogMerger): a replica that holds its
// entry holds its postings, so the order holds replica by replica, and the series is
// acknowledged only once both are stored at quorum. A series whose lists live
// elsewhere is posted first, as before.

// postsWithEntry reports whether x can go with its series' entry: its series'
// registry replicas are the replicas of each of its lists, and they would accept it.
func (c *Coordinator) postsWithEntry(ctx context.Context, x posting) bool {
	if catalog.ValidateMember(x.m) != nil {
		return false
	}
	reg, err := c.place.Locate(ctx, quanta.KeyID(x.m.Key), c.cfg.RF)
	if err != nil || len(reg) == 0 {
		return false
	}
	for _, t := range x.tags {
		if catalog.ValidateIndexTag(t) != nil {
			return false
		}
		peers, err := c.place.Locate(ctx, t.ID(), c.cfg.RF)
		if err != nil || !cluster.SamePeers(reg, peers) {
			return false
		}
	}
	return true
}

// tagLists gathers members by tag: one list per tag, in the order tags first appear.
func tagLists(ins []tagMember) []catalog.TagMembers {
	var lists []catalog.TagMembers
	at := map[catalog.Tag]int{}
	for _, in := range ins {
		i, ok := at[in.tag]
		if !ok {
			i = len(lists)
			at[in.tag] = i
			lists = append(lists, catalog.TagMembers{Tag: in.tag})
		}
		lists[i].Members = append(lists[i].Members, in.m)
	}
	return lists
}

// mergeWithPostings is the request of one batch of mergeEntries to peer when some of
// its entries carry their series' postings (with[i], for es[i]): the members and the
// entries in one request, cut as cluster.EntryBatch and cluster.MaxRequestBytes cut.
func (c *Coordinator) mergeWithPostings(ctx context.Context, peer dht.Peer, es []catalog.Entry, idx []int, with map[int]posting) ([]catalog.Entry, error) {
	var ins []tagMember
	for _, i := range idx {
		if x, ok := with[i]; ok {
			for _, t := range x.tags {
				ins = append(ins, tagMember{t, x.m})
			}
		}
	}
	entries := make([]catalog.Entry, len(idx))
	for k, i := range idx {
		entries[k] = es[i]
	}
	return c.replicas.For(peer).MergeCatalog(ctx, tagLists(ins), entries)
}

// withSize is what entry i and its postings add to a request, about.
func withSize(es []catalog.Entry, with map[int]posting) func(i int) int {
	return func(i int) int {
		n := catalog.EntryBytes(es[i])
		if x, ok := with[i]; ok {
			for _, t := range x.tags {
				n += tagMemberSize(tagMember{t, x.m})
			}
		}
		return n
	}
}
