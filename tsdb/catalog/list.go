package catalog

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// PostingSource reads one page of a tag's posting list: up to limit members with keys
// after after, in key order, removed ones included. The time-series layer reads it
// from the tag's replica set and merges the replicas' answers.
type PostingSource func(ctx context.Context, tag Tag, after string, limit int) ([]Member, error)

// Query selects series: those carrying every Match tag whose keys start with Prefix.
// An empty query selects every series.
type Query struct {
	Match  []Tag
	Prefix string
}

// ListTags returns the tags whose posting lists List and Candidates read for q: its
// Match tags; else the posting of Prefix's longest '/'-terminated prefix (PrefixQuery),
// or the AllBuckets buckets of the all-series index.
func (q Query) ListTags() []Tag {
	if len(q.Match) > 0 {
		return q.Match
	}
	if t, ok := PrefixQuery(q.Prefix); ok {
		return []Tag{t}
	}
	return AllTags()
}

// MaxListed bounds what one listing returns, so that a listing of a huge catalog
// fails with a message instead of exhausting a small node's memory.
const MaxListed = 1_000_000

// ListPage is how many members one posting read asks for.
const ListPage = 5000

// listConcurrency bounds the posting lists read at once.
const listConcurrency = 4

// List returns the sorted keys of the series q selects. It reads the posting list of
// each Match tag and intersects them; with no Match, the posting of Prefix's longest
// '/'-terminated prefix (PrefixQuery), or the AllBuckets buckets of the all-series
// index. It never reads every node: only the replica sets of those lists.
func List(ctx context.Context, src PostingSource, q Query) ([]string, error) {
	if err := validateMatch(q.Match); err != nil {
		return nil, err
	}
	var lists [][]Tag // each element: tags whose union is one list
	switch {
	case len(q.Match) > 0:
		for _, m := range q.Match {
			lists = append(lists, []Tag{m})
		}
	default:
		lists = append(lists, q.ListTags())
	}
	keys := make([][]string, len(lists))
	errs := make([]error, len(lists))
	var wg sync.WaitGroup
	slots := make(chan struct{}, listConcurrency)
	for i, union := range lists {
		keys[i] = nil
		var mu sync.Mutex
		var parts [][]string
		for _, t := range union {
			wg.Add(1)
			go func(i int, t Tag) {
				defer wg.Done()
				slots <- struct{}{}
				defer func() { <-slots }()
				ks, err := readAll(ctx, src, t, q.Prefix)
				mu.Lock()
				defer mu.Unlock()
				if err != nil && errs[i] == nil {
					errs[i] = err
				}
				parts = append(parts, ks)
				if len(parts) == len(union) {
					keys[i] = unionSorted(parts)
				}
			}(i, t)
		}
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	out := Intersect(keys...)
	if len(out) > MaxListed {
		return nil, fmt.Errorf("%d series selected; at most %d per listing: narrow it with --match or --prefix", len(out), MaxListed)
	}
	return out, nil
}

// readAll reads a whole posting list, live members with keys starting with prefix.
func readAll(ctx context.Context, src PostingSource, t Tag, prefix string) ([]string, error) {
	var out []string
	after := ""
	if prefix != "" {
		// Keys are sorted: start just before the prefix.
		after = prefixFloor(prefix)
	}
	for {
		page, err := src(ctx, t, after, ListPage)
		if err != nil {
			return nil, fmt.Errorf("postings of %s: %w", t.display(), err)
		}
		for _, m := range page {
			if !strings.HasPrefix(m.Key, prefix) {
				if m.Key > prefix {
					return out, nil // past every key with the prefix
				}
				continue
			}
			if !m.Removed {
				out = append(out, m.Key)
			}
		}
		if len(out) > MaxListed {
			return nil, fmt.Errorf("posting list of %s holds more than %d series: narrow the listing", t.display(), MaxListed)
		}
		if len(page) < ListPage {
			return out, nil
		}
		after = page[len(page)-1].Key
	}
}

// prefixFloor returns the greatest string below every string starting with p that a
// Postings "after" can take: p without its last byte is below p, and every key with
// prefix p sorts after it.
func prefixFloor(p string) string { return p[:len(p)-1] }

func unionSorted(parts [][]string) []string {
	var all []string
	for _, p := range parts {
		all = append(all, p...)
	}
	sort.Strings(all)
	w := 0
	for i, k := range all {
		if i > 0 && k == all[w-1] {
			continue
		}
		all[w] = k
		w++
	}
	return all[:w]
}

// display names a posting list for a message.
func (t Tag) display() string {
	switch t.K {
	case AllTagKey:
		return "all series (bucket " + t.V + ")"
	case PrefixTagKey:
		return "prefix " + t.V
	}
	return t.String()
}

// CandidatePage is how many members Candidates asks of each posting list first.
const CandidatePage = 256

// Candidates returns, sorted, the keys of series that may be those q selects: a
// superset of List's answer, for a caller that checks each candidate against its entry
// anyway (Coordinator.Series does). With two or more Match tags it reads the first
// CandidatePage members of each tag's posting list at once and, when one of them ends
// there, answers the shortest such list alone, without reading the longer ones further:
// a query for one host among thousands of series reads the host's short list, not the
// database's. When every list is longer, it is List.
func Candidates(ctx context.Context, src PostingSource, q Query) ([]string, error) {
	if len(q.Match) < 2 {
		return List(ctx, src, q)
	}
	if err := validateMatch(q.Match); err != nil {
		return nil, err
	}
	after := ""
	if q.Prefix != "" {
		after = prefixFloor(q.Prefix)
	}
	pages := make([][]Member, len(q.Match))
	errs := make([]error, len(q.Match))
	var wg sync.WaitGroup
	for i, t := range q.Match {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pages[i], errs[i] = src(ctx, t, after, CandidatePage)
		}()
	}
	wg.Wait()
	best := -1
	for i, p := range pages {
		if errors.Is(errs[i], ErrFullPage) {
			continue // full: not the shortest list
		}
		if errs[i] != nil {
			return nil, fmt.Errorf("postings of %s: %w", q.Match[i].display(), errs[i])
		}
		if len(p) < CandidatePage && (best < 0 || len(p) < len(pages[best])) {
			best = i
		}
	}
	if best < 0 {
		return List(ctx, src, q)
	}
	out := make([]string, 0, len(pages[best]))
	for _, m := range pages[best] {
		if !m.Removed && strings.HasPrefix(m.Key, q.Prefix) {
			out = append(out, m.Key)
		}
	}
	return out, nil
}

// validateMatch checks a query's Match tags as List and Candidates take them.
func validateMatch(match []Tag) error {
	for _, m := range match {
		if err := ValidateTagKey(m.K); err != nil {
			return fmt.Errorf("--match: %w", err)
		}
		if err := ValidateTagValue(m.K, m.V); err != nil {
			return fmt.Errorf("--match: %w", err)
		}
	}
	return nil
}
