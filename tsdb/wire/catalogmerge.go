package wire

import (
	"fmt"

	"github.com/tsdht/tsdht/tsdb/catalog"
)

// MethodCatalogMerge merges posting-list members and catalog entries at one replica in
// one store commit (one disk sync): CatalogMergeReq → EntriesMsg, the merged entries in
// order. A write's new series whose registry replicas keep their posting lists too are
// posted and get their entries in one request to each replica instead of one for the
// postings and then one for the entries. A replica that does not know it answers
// rpc.CodeUnknownMethod, and the caller sends the postings, then the entries
// (MethodPostingsMergeMany, MethodEntryMerge).
const MethodCatalogMerge = "tsdb.catalog.merge"

// CatalogMergeReq is the postings and entries of MethodCatalogMerge: at most
// MaxEntriesPerRequest members in all and MaxEntriesPerRequest entries.
type CatalogMergeReq struct {
	Postings PostingsMergeManyReq `msgpack:"p"`
	Entries  EntriesMsg           `msgpack:"e"`
}

// EncodeCatalogMerge returns lists and es as a request.
func EncodeCatalogMerge(lists []catalog.TagMembers, es []catalog.Entry) *CatalogMergeReq {
	return &CatalogMergeReq{Postings: *EncodePostingsMergeMany(lists), Entries: *EncodeEntries(es)}
}

// Decode returns the request's lists and entries, refusing more than its limits (what
// the caller should do: send fewer series at a time).
func (r *CatalogMergeReq) Decode() ([]catalog.TagMembers, []catalog.Entry, error) {
	lists, err := r.Postings.Decode()
	if err != nil {
		return nil, nil, err
	}
	es, err := r.Entries.Decode()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: send fewer series at a time", err)
	}
	return lists, es, nil
}
