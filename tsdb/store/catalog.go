package store

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tsdht/tsdht/tsdb/catalog"
)

// Catalog keeps this node's copies of series catalog entries and tag posting lists
// (package catalog): entries on the series' registry replicas, posting lists on their
// tag's replicas. Both only ever merge, so replicas converge whatever order updates
// and repairs arrive in.
type Catalog interface {
	// MergeEntry merges e into the stored entry of e.Key (catalog.Merge) and returns
	// the result. e must be valid (catalog.Entry.Validate).
	MergeEntry(e catalog.Entry) (catalog.Entry, error)
	// Entry returns the stored entry of key, or false if there is none.
	Entry(key string) (catalog.Entry, bool, error)
	// Entries calls fn on the stored entries with keys after after, in key order,
	// until fn returns false. fn runs with nothing of the store held.
	Entries(after string, fn func(catalog.Entry) bool) error
	// MergePostings merges members into tag's posting list (catalog.MergeMember).
	MergePostings(tag catalog.Tag, members []catalog.Member) error
	// Postings returns up to limit members of tag's posting list with keys after
	// after, in key order, removed ones included (a reader skips them; a repairer
	// copies them, so that a removal reaches every replica).
	Postings(tag catalog.Tag, after string, limit int) ([]catalog.Member, error)
	// PostingTags calls fn on every tag that has a posting list here, in no set order,
	// until fn returns false (the repairer walks them).
	PostingTags(fn func(catalog.Tag) bool) error
}

// EntriesMerger is a Catalog that merges many entries at the cost of about one: one
// commit and one disk sync for all of them. A coordinator's write of many series
// reports their newest quanta through it (tsdb/putmany.go).
type EntriesMerger interface {
	// MergeEntries merges each entry as MergeEntry would, in order (a key named twice
	// merges into what the first made), and returns the results in order; all are
	// stored or, on an error, none. Every entry must be valid.
	MergeEntries(es []catalog.Entry) ([]catalog.Entry, error)
}

// PostingsMerger is a Catalog that merges members into many posting lists at the cost
// of about one: one commit and one disk sync for all. A write's new series post to a
// list per tag value they carry; one replica request carries them all.
type PostingsMerger interface {
	// MergePostingsMany merges each list's members as MergePostings would; all are
	// stored or, on an error, none.
	MergePostingsMany(lists []catalog.TagMembers) error
}

// EntriesGetter is a Catalog that reads many entries at the cost of about a few: a
// coordinator readying many new series asks for their entries at once.
type EntriesGetter interface {
	// EntriesOf returns the stored entries of keys in the order of keys, as Entry of
	// each would: a key with no entry is left out.
	EntriesOf(keys []string) ([]catalog.Entry, error)
}

// EntriesVersioner is a Catalog that counts the changes to its entries, so that what a
// caller derived from them (a measurement's shape, tsdb/replica) is kept until one
// changes.
type EntriesVersioner interface {
	// EntriesVersion returns a number that grows once a change to an entry is visible
	// to Entries; it stays the same while no entry changes.
	EntriesVersion() uint64
}

// MaxPostingsPage bounds Postings' limit.
const MaxPostingsPage = 10_000

func checkPostingsArgs(tag catalog.Tag, limit int) error {
	if err := catalog.ValidateIndexTag(tag); err != nil {
		return err
	}
	if limit < 1 || limit > MaxPostingsPage {
		return fmt.Errorf("postings page of %d: want 1..%d", limit, MaxPostingsPage)
	}
	return nil
}

func checkMembers(tag catalog.Tag, members []catalog.Member) error {
	if err := catalog.ValidateIndexTag(tag); err != nil {
		return err
	}
	for _, m := range members {
		if err := catalog.ValidateMember(m); err != nil {
			return err
		}
	}
	return nil
}

// memCatalog is the memory store's catalog; Mem's lock guards it.
type memCatalog struct {
	entries  map[string]catalog.Entry
	postings map[catalog.Tag]map[string]catalog.Member
	version  uint64 // entry merges (EntriesVersioner)
}

func (c *memCatalog) init() {
	if c.entries == nil {
		c.entries = make(map[string]catalog.Entry)
		c.postings = make(map[catalog.Tag]map[string]catalog.Member)
	}
}

// MergeEntry implements Catalog.
func (m *Mem) MergeEntry(e catalog.Entry) (catalog.Entry, error) {
	if err := e.Validate(); err != nil {
		return catalog.Entry{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return catalog.Entry{}, ErrClosed
	}
	m.cat.init()
	if old, ok := m.cat.entries[e.Key]; ok {
		e = catalog.Merge(old, e)
	}
	m.cat.entries[e.Key] = e
	m.cat.version++
	return e, nil
}

// EntriesVersion implements EntriesVersioner.
func (m *Mem) EntriesVersion() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.cat.version
}

// Entry implements Catalog.
func (m *Mem) Entry(key string) (catalog.Entry, bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return catalog.Entry{}, false, ErrClosed
	}
	e, ok := m.cat.entries[key]
	return e, ok, nil
}

// Entries implements Catalog.
func (m *Mem) Entries(after string, fn func(catalog.Entry) bool) error {
	m.mu.RLock()
	if m.closed {
		m.mu.RUnlock()
		return ErrClosed
	}
	var es []catalog.Entry
	for k, e := range m.cat.entries {
		if k > after {
			es = append(es, e)
		}
	}
	m.mu.RUnlock()
	sort.Slice(es, func(i, j int) bool { return es[i].Key < es[j].Key })
	for _, e := range es {
		if !fn(e) {
			break
		}
	}
	return nil
}

// MergePostings implements Catalog.
func (m *Mem) MergePostings(tag catalog.Tag, members []catalog.Member) error {
	if err := checkMembers(tag, members); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	m.cat.init()
	list := m.cat.postings[tag]
	if list == nil {
		list = make(map[string]catalog.Member)
		m.cat.postings[tag] = list
	}
	for _, mb := range members {
		if old, ok := list[mb.Key]; ok {
			mb = catalog.MergeMember(old, mb)
		}
		list[mb.Key] = mb
	}
	return nil
}

// Postings implements Catalog.
func (m *Mem) Postings(tag catalog.Tag, after string, limit int) ([]catalog.Member, error) {
	if err := checkPostingsArgs(tag, limit); err != nil {
		return nil, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return nil, ErrClosed
	}
	var out []catalog.Member
	for k, mb := range m.cat.postings[tag] {
		if k > after {
			out = append(out, mb)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// PostingTags implements Catalog.
func (m *Mem) PostingTags(fn func(catalog.Tag) bool) error {
	m.mu.RLock()
	if m.closed {
		m.mu.RUnlock()
		return ErrClosed
	}
	tags := make([]catalog.Tag, 0, len(m.cat.postings))
	for t := range m.cat.postings {
		tags = append(tags, t)
	}
	m.mu.RUnlock()
	sort.Slice(tags, func(i, j int) bool {
		return tags[i].K < tags[j].K || tags[i].K == tags[j].K && strings.Compare(tags[i].V, tags[j].V) < 0
	})
	for _, t := range tags {
		if !fn(t) {
			break
		}
	}
	return nil
}
