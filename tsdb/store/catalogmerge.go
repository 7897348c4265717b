package store

import "github.com/tsdht/tsdht/tsdb/catalog"

// CatalogMerger is a Catalog that merges posting-list members and entries together at
// the cost of one merge: one commit and one disk sync for all, all stored or none. A
// write's new series, when their registry replicas keep their posting lists too (a
// cluster of rf nodes or fewer), are posted and get their entries in one request to
// each replica: a replica that holds such a series' entry holds its postings.
type CatalogMerger interface {
	// MergeCatalog merges each list's members as MergePostingsMany would and each entry
	// as MergeEntries would, and returns the merged entries in order.
	MergeCatalog(lists []catalog.TagMembers, es []catalog.Entry) ([]catalog.Entry, error)
}
