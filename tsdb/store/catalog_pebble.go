package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble"

	"github.com/tsdht/tsdht/tsdb/catalog"
)

// Catalog families of the pebble store (keys.go has the others):
//
//	'c' ‖ series key                          → catalog entry (catalog.Entry.Encode)
//	'x' ‖ u16 len(k) ‖ k ‖ u16 len(v) ‖ v ‖ series key → member state (catalog.EncodeMemberState)
//
// A posting list is one contiguous key range, sorted by series key: a page is one
// seek and a scan, and the intersection of two lists is a merge of sorted pages.
const (
	famEntry   = 'c'
	famPosting = 'x'
)

func entryKey(key string) []byte { return append([]byte{famEntry}, key...) }

// postingPrefix returns 'x' ‖ the tag's encoding: the prefix of its members' keys.
func postingPrefix(t catalog.Tag) []byte {
	b := make([]byte, 0, 1+2+len(t.K)+2+len(t.V))
	b = append(b, famPosting)
	b = binary.BigEndian.AppendUint16(b, uint16(len(t.K)))
	b = append(b, t.K...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(t.V)))
	return append(b, t.V...)
}

// parsePostingKey splits a posting key into its tag and member key.
func parsePostingKey(k []byte) (catalog.Tag, string, error) {
	bad := fmt.Errorf("%w: posting key %x", ErrCorrupt, k)
	if len(k) < 3 || k[0] != famPosting {
		return catalog.Tag{}, "", bad
	}
	r := k[1:]
	n := int(binary.BigEndian.Uint16(r))
	if len(r) < 2+n+2 {
		return catalog.Tag{}, "", bad
	}
	tk := string(r[2 : 2+n])
	r = r[2+n:]
	m := int(binary.BigEndian.Uint16(r))
	if len(r) < 2+m {
		return catalog.Tag{}, "", bad
	}
	return catalog.Tag{K: tk, V: string(r[2 : 2+m])}, string(r[2+m:]), nil
}

// prefixEnd returns the smallest key above every key starting with prefix.
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// MergeEntry implements Catalog.
func (p *Pebble) MergeEntry(e catalog.Entry) (_ catalog.Entry, err error) {
	changed := false
	if err := e.Validate(); err != nil {
		return catalog.Entry{}, err
	}
	if !p.enter() {
		return catalog.Entry{}, ErrClosed
	}
	defer p.state.RUnlock()
	defer func() { // after catMu is released (commitLater), also when nothing changed
		if err == nil {
			err = p.durable()
		}
	}()
	p.catMu.Lock()
	defer p.catMu.Unlock()
	defer func() { // when the change is visible: a shape summarised before it is stale
		if err == nil && changed {
			p.entriesVersion.Add(1)
		}
	}()
	old, ok, err := p.loadEntry(e.Key)
	if err != nil {
		return catalog.Entry{}, err
	}
	if ok {
		e = catalog.Merge(old, e)
		if catalog.Equal(e, old) {
			return e, nil
		}
	}
	if err := errors.Join(p.failure(), p.space.check()); err != nil {
		return catalog.Entry{}, fmt.Errorf("store: catalog entry %q: %w", e.Key, err)
	}
	changed = true
	b := p.db.NewBatch()
	defer b.Close()
	err = b.Set(entryKey(e.Key), e.Encode(nil), nil)
	if err == nil {
		err = p.commitLater(b)
	}
	if err != nil {
		return catalog.Entry{}, fmt.Errorf("store: catalog entry %q: %w", e.Key, err)
	}
	return e, nil
}

// EntriesVersion implements EntriesVersioner.
func (p *Pebble) EntriesVersion() uint64 { return p.entriesVersion.Load() }

// MergeEntries implements EntriesMerger: the entries merged in one batch, one commit
// and, with SyncAlways, one disk sync, all or nothing.
func (p *Pebble) MergeEntries(es []catalog.Entry) ([]catalog.Entry, error) {
	return p.MergeCatalog(nil, es)
}

// MergeCatalog implements CatalogMerger: the lists' members and the entries merged in
// one batch, one commit and, with SyncAlways, one disk sync, all or nothing.
func (p *Pebble) MergeCatalog(lists []catalog.TagMembers, es []catalog.Entry) (_ []catalog.Entry, err error) {
	for _, e := range es {
		if err := e.Validate(); err != nil {
			return nil, err
		}
	}
	posts, err := postingWrites(lists)
	if err != nil {
		return nil, err
	}
	if len(es) == 0 && len(posts.keys) == 0 {
		return nil, nil
	}
	what := posts.what
	if len(es) > 0 {
		what = fmt.Sprintf("%d catalog entries (%q, …)", len(es), es[0].Key)
	}
	if !p.enter() {
		return nil, ErrClosed
	}
	defer p.state.RUnlock()
	defer func() { // after catMu is released (commitLater), also when nothing changed
		if err == nil {
			err = p.durable()
		}
	}()
	p.catMu.Lock()
	defer p.catMu.Unlock()
	b := p.db.NewBatch()
	defer b.Close()
	out, changed, err := p.stageEntries(b, es)
	if err != nil {
		return nil, err
	}
	if len(posts.keys) > 0 {
		if err := errors.Join(p.failure(), p.space.check()); err != nil {
			return nil, fmt.Errorf("store: %s: %w", posts.what, err)
		}
		if err := p.stagePostings(b, posts); err != nil {
			return nil, err
		}
	}
	if b.Empty() {
		return out, nil
	}
	if changed {
		if err := errors.Join(p.failure(), p.space.check()); err != nil {
			return nil, fmt.Errorf("store: %s: %w", what, err)
		}
	}
	if err := p.commitLater(b); err != nil {
		return nil, fmt.Errorf("store: %s: %w", what, err)
	}
	if changed { // visible now: a shape summarised before it is stale
		p.entriesVersion.Add(1)
	}
	return out, nil
}

// stageEntries adds to b what merging es into the stored entries changes (a key named
// twice merges into what the first made) and returns the merged entries, in order, and
// whether any changed. The caller holds catMu.
func (p *Pebble) stageEntries(b *pebble.Batch, es []catalog.Entry) ([]catalog.Entry, bool, error) {
	if len(es) == 0 {
		return nil, false, nil
	}
	out := make([]catalog.Entry, len(es))
	keys := make([]string, len(es))
	for i, e := range es {
		keys[i] = e.Key
	}
	stored, err := p.loadEntries(keys)
	if err != nil {
		return nil, false, err
	}
	// What this call merged so far, per key: a key named twice merges into the first.
	merged := make(map[string]int, len(es))
	changed := false
	for i, e := range es {
		old, ok := catalog.Entry{}, false
		if j, seen := merged[e.Key]; seen {
			old, ok = out[j], true
		} else {
			old, ok = stored[e.Key]
		}
		if ok {
			e = catalog.Merge(old, e)
		}
		out[i] = e
		merged[e.Key] = i
		if !ok || !catalog.Equal(e, old) {
			changed = true
		}
	}
	if !changed {
		return out, false, nil
	}
	for key, i := range merged {
		if err := b.Set(entryKey(key), out[i].Encode(nil), nil); err != nil {
			return nil, false, fmt.Errorf("store: %d catalog entries (%q, …): %w", len(es), es[0].Key, err)
		}
	}
	return out, true, nil
}

// EntriesOf implements EntriesGetter.
func (p *Pebble) EntriesOf(keys []string) ([]catalog.Entry, error) {
	if !p.enter() {
		return nil, ErrClosed
	}
	defer p.state.RUnlock()
	stored, err := p.loadEntries(slices.Clone(keys))
	if err != nil {
		return nil, err
	}
	out := make([]catalog.Entry, 0, len(stored))
	for _, k := range keys {
		if e, ok := stored[k]; ok {
			out = append(out, e)
		}
	}
	return out, nil
}

// loadEntries reads the stored entries of keys (which it sorts), all at once
// (lookupMany).
func (p *Pebble) loadEntries(keys []string) (map[string]catalog.Entry, error) {
	slices.Sort(keys)
	keys = slices.Compact(keys)
	ks := make([][]byte, len(keys))
	for i, k := range keys {
		ks[i] = entryKey(k)
	}
	out := make(map[string]catalog.Entry, len(keys))
	err := p.lookupMany(ks, func(i int, v []byte, found bool) error {
		if !found {
			return nil
		}
		e, err := catalog.DecodeEntry(v)
		if err != nil {
			return fmt.Errorf("%w: catalog entry %q: %v", ErrCorrupt, keys[i], err)
		}
		out[keys[i]] = e
		return nil
	})
	return out, err
}

func (p *Pebble) loadEntry(key string) (catalog.Entry, bool, error) {
	v, closer, err := p.db.Get(entryKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return catalog.Entry{}, false, nil
	}
	if err != nil {
		return catalog.Entry{}, false, err
	}
	defer closer.Close()
	e, err := catalog.DecodeEntry(v)
	if err != nil {
		return catalog.Entry{}, false, fmt.Errorf("%w: catalog entry %q: %v", ErrCorrupt, key, err)
	}
	return e, true, nil
}

// Entry implements Catalog.
func (p *Pebble) Entry(key string) (catalog.Entry, bool, error) {
	if !p.enter() {
		return catalog.Entry{}, false, ErrClosed
	}
	defer p.state.RUnlock()
	return p.loadEntry(key)
}

// Entries implements Catalog, a batch of walkBatch entries per iterator.
func (p *Pebble) Entries(after string, fn func(catalog.Entry) bool) error {
	for {
		batch, err := p.entryBatch(after)
		if err != nil {
			return err
		}
		for _, e := range batch {
			if !fn(e) {
				return nil
			}
		}
		if len(batch) < walkBatch {
			return nil
		}
		after = batch[len(batch)-1].Key
	}
}

func (p *Pebble) entryBatch(after string) ([]catalog.Entry, error) {
	if !p.enter() {
		return nil, ErrClosed
	}
	defer p.state.RUnlock()
	lower := append(entryKey(after), 0)
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: []byte{famEntry + 1}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []catalog.Entry
	for valid := it.First(); valid && len(out) < walkBatch; valid = it.Next() {
		e, err := catalog.DecodeEntry(it.Value())
		if err != nil {
			return nil, fmt.Errorf("%w: catalog entry at %x: %v", ErrCorrupt, it.Key(), err)
		}
		out = append(out, e)
	}
	return out, it.Error()
}

// MergePostings implements Catalog.
func (p *Pebble) MergePostings(tag catalog.Tag, members []catalog.Member) error {
	return p.MergePostingsMany([]catalog.TagMembers{{Tag: tag, Members: members}})
}

// MergePostingsMany implements PostingsMerger: every list's members looked up at once
// (lookupMany) and merged in one batch, one commit and one sync.
func (p *Pebble) MergePostingsMany(lists []catalog.TagMembers) error {
	_, err := p.MergeCatalog(lists, nil)
	return err
}

// postingSet is the members of a merge of posting lists, one per store key, in key
// order.
type postingSet struct {
	keys    [][]byte
	members []catalog.Member
	what    string // what a failure names
}

// postingWrites checks lists and returns their members by store key, each key once:
// the merge of its states, as merging them one after another would leave it (a tag may
// come in more than one list).
func postingWrites(lists []catalog.TagMembers) (postingSet, error) {
	type posting struct {
		key []byte
		m   catalog.Member
	}
	var all []posting
	for _, l := range lists {
		if err := checkMembers(l.Tag, l.Members); err != nil {
			return postingSet{}, err
		}
		prefix := postingPrefix(l.Tag)
		for _, m := range l.Members {
			all = append(all, posting{append(prefix[:len(prefix):len(prefix)], m.Key...), m})
		}
	}
	if len(all) == 0 {
		return postingSet{}, nil
	}
	// In key order (lookupMany).
	slices.SortStableFunc(all, func(a, b posting) int { return bytes.Compare(a.key, b.key) })
	ps := postingSet{keys: make([][]byte, 0, len(all)), members: make([]catalog.Member, 0, len(all)),
		what: "postings of " + lists[0].Tag.String()}
	if len(lists) > 1 {
		ps.what = fmt.Sprintf("postings of %d tags", len(lists))
	}
	for _, x := range all {
		if n := len(ps.keys); n > 0 && bytes.Equal(ps.keys[n-1], x.key) {
			ps.members[n-1] = catalog.MergeMember(ps.members[n-1], x.m)
			continue
		}
		ps.keys, ps.members = append(ps.keys, x.key), append(ps.members, x.m)
	}
	return ps, nil
}

// stagePostings adds to b the members of ps that change what is stored. The caller
// holds catMu.
func (p *Pebble) stagePostings(b *pebble.Batch, ps postingSet) error {
	return p.lookupMany(ps.keys, func(i int, v []byte, found bool) error {
		m := ps.members[i]
		if found {
			old, derr := catalog.DecodeMemberState(m.Key, v)
			if derr != nil {
				return fmt.Errorf("%w: %v", ErrCorrupt, derr)
			}
			if m = catalog.MergeMember(old, m); m == old {
				return nil
			}
		}
		return b.Set(ps.keys[i], catalog.EncodeMemberState(m), nil)
	})
}

// Postings implements Catalog.
func (p *Pebble) Postings(tag catalog.Tag, after string, limit int) ([]catalog.Member, error) {
	if err := checkPostingsArgs(tag, limit); err != nil {
		return nil, err
	}
	if !p.enter() {
		return nil, ErrClosed
	}
	defer p.state.RUnlock()
	prefix := postingPrefix(tag)
	lower := append(append(prefix[:len(prefix):len(prefix)], after...), 0)
	if after == "" {
		lower = prefix
	}
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []catalog.Member
	for valid := it.First(); valid && len(out) < limit; valid = it.Next() {
		key := string(it.Key()[len(prefix):])
		m, err := catalog.DecodeMemberState(key, it.Value())
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		out = append(out, m)
	}
	return out, it.Error()
}

// PostingTags implements Catalog: it seeks from one list to the next.
func (p *Pebble) PostingTags(fn func(catalog.Tag) bool) error {
	from := []byte{famPosting}
	for {
		tags, next, err := p.postingTagBatch(from)
		if err != nil {
			return err
		}
		for _, t := range tags {
			if !fn(t) {
				return nil
			}
		}
		if next == nil {
			return nil
		}
		from = next
	}
}

func (p *Pebble) postingTagBatch(from []byte) (tags []catalog.Tag, next []byte, err error) {
	if !p.enter() {
		return nil, nil, ErrClosed
	}
	defer p.state.RUnlock()
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: from, UpperBound: []byte{famPosting + 1}})
	if err != nil {
		return nil, nil, err
	}
	defer it.Close()
	for valid := it.First(); valid; {
		if len(tags) == walkBatch {
			return tags, append([]byte(nil), it.Key()...), nil
		}
		t, _, err := parsePostingKey(it.Key())
		if err != nil {
			return nil, nil, err
		}
		tags = append(tags, t)
		end := prefixEnd(postingPrefix(t))
		if end == nil {
			break
		}
		valid = it.SeekGE(end)
	}
	return tags, nil, it.Error()
}
