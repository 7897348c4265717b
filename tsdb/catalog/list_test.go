package catalog

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
)

// memSource is a posting source over an index built with IndexTags.
type memSource struct {
	lists map[Tag][]Member
	reads atomic.Int64
}

func newMemSource(series map[string][]Tag) *memSource {
	s := &memSource{lists: map[Tag][]Member{}}
	for key, tags := range series {
		for _, t := range IndexTags(key, tags) {
			s.lists[t] = append(s.lists[t], Member{Key: key, Version: 1})
		}
	}
	for _, l := range s.lists {
		sort.Slice(l, func(i, j int) bool { return l[i].Key < l[j].Key })
	}
	return s
}

func (s *memSource) read(_ context.Context, t Tag, after string, limit int) ([]Member, error) {
	s.reads.Add(1)
	l := s.lists[t]
	i := sort.Search(len(l), func(i int) bool { return l[i].Key > after })
	return l[i:min(len(l), i+limit)], nil
}

func TestList(t *testing.T) {
	all := map[string][]Tag{}
	for st := 0; st < 30; st++ {
		for _, ch := range []string{"freq", "va/mag", "va/ang"} {
			key := fmt.Sprintf("pmu%d/%s", st, ch)
			all[key] = []Tag{{"station", fmt.Sprint("pmu", st)}, {"bus", fmt.Sprint(st % 3)}, {"kind", strings.Split(ch, "/")[0]}}
		}
	}
	all["db/cpu,host=a#usage"] = []Tag{{"__db", "db"}, {"host", "a"}}
	all["up{job=\"x\"}"] = nil
	src := newMemSource(all)
	// The brute-force answer: every key, filtered.
	want := func(q Query) []string {
		var out []string
		for k, tags := range all {
			norm, _ := NormalizeTags(tags)
			if strings.HasPrefix(k, q.Prefix) && Matches(norm, mustNorm(q.Match)) {
				out = append(out, k)
			}
		}
		sort.Strings(out)
		return out
	}
	queries := []Query{
		{},
		{Match: []Tag{{"bus", "1"}}},
		{Match: []Tag{{"bus", "1"}, {"kind", "va"}}},
		{Match: []Tag{{"bus", "1"}, {"kind", "nope"}}},
		{Prefix: "pmu1"},
		{Prefix: "pmu1/"},
		{Prefix: "pmu12/va/m"},
		{Prefix: "db/cpu,"},
		{Prefix: "up{"},
		{Prefix: "pmu2", Match: []Tag{{"kind", "freq"}}},
	}
	for _, q := range queries {
		got, err := List(context.Background(), src.read, q)
		if err != nil {
			t.Fatalf("%+v: %v", q, err)
		}
		if w := want(q); !reflect.DeepEqual(got, w) && !(len(got) == 0 && len(w) == 0) {
			t.Errorf("List(%+v):\n got  %v\n want %v", q, got, w)
		}
	}
	// A prefix with a '/' reads one list, not the all-series buckets.
	src.reads.Store(0)
	if _, err := List(context.Background(), src.read, Query{Prefix: "pmu12/va/"}); err != nil || src.reads.Load() != 1 {
		t.Fatalf("prefix listing read %d pages (%v), want 1", src.reads.Load(), err)
	}
	if _, err := List(context.Background(), src.read, Query{Match: []Tag{{"k=", "v"}}}); err == nil {
		t.Fatal("a bad match tag was accepted")
	}
}

func mustNorm(tags []Tag) []Tag {
	n, _ := NormalizeTags(tags)
	return n
}

// TestCandidatesReadsTheShortList: a query for one host among more series than a
// posting page reads one page of each list and answers the host's list, a superset of
// List's answer that the caller checks against entries.
func TestCandidatesReadsTheShortList(t *testing.T) {
	all := map[string][]Tag{}
	for i := range ListPage + 1000 {
		host := fmt.Sprintf("h%04d", i/3)
		all[fmt.Sprintf("db/cpu,host=%s#f%d", host, i%3)] = []Tag{{"__db", "db"}, {"host", host}, {"kind", fmt.Sprint(i % 2)}}
	}
	src := newMemSource(all)
	ctx := context.Background()
	for _, q := range []Query{
		{Match: []Tag{{"__db", "db"}, {"host", "h0007"}}},
		{Match: []Tag{{"__db", "db"}, {"host", "h0007"}, {"kind", "1"}}},
		{Match: []Tag{{"__db", "db"}, {"host", "h0007"}}, Prefix: "db/cpu,host=h0007#f1"},
		{Match: []Tag{{"__db", "db"}, {"kind", "1"}}}, // both lists longer than a page: List
		{Match: []Tag{{"host", "nope"}, {"__db", "db"}}},
	} {
		src.reads.Store(0)
		got, err := Candidates(ctx, src.read, q)
		if err != nil {
			t.Fatal(err)
		}
		exact, err := List(ctx, src.read, q)
		if err != nil {
			t.Fatal(err)
		}
		if !sort.StringsAreSorted(got) {
			t.Errorf("%+v: candidates not sorted", q)
		}
		set := map[string]bool{}
		for _, k := range got {
			set[k] = true
		}
		for _, k := range exact {
			if !set[k] {
				t.Errorf("%+v: %s selected but not a candidate", q, k)
			}
		}
		if len(got) > 3 && len(exact) < len(got) && q.Match[1].K == "host" {
			t.Errorf("%+v: %d candidates, want the host's list", q, len(got))
		}
	}
	src.reads.Store(0)
	if _, err := Candidates(ctx, src.read, Query{Match: []Tag{{"__db", "db"}, {"host", "h0007"}}}); err != nil {
		t.Fatal(err)
	}
	if n := src.reads.Load(); n != 2 {
		t.Errorf("%d posting reads, want one page of each list", n)
	}
}

// A source that answers ErrFullPage for each full first page (a listing whose replicas
// sent such pages without their members) gives Candidates the same answer as the
// members would; any other read of such a page fails with it.
func TestCandidatesTakesErrFullPageAsFull(t *testing.T) {
	all := map[string][]Tag{}
	for i := range ListPage + 1000 {
		host := fmt.Sprintf("h%04d", i/3)
		all[fmt.Sprintf("db/cpu,host=%s#f%d", host, i%3)] = []Tag{{"__db", "db"}, {"host", host}, {"kind", fmt.Sprint(i % 2)}}
	}
	src := newMemSource(all)
	var elided atomic.Int64
	elide := func(ctx context.Context, t Tag, after string, limit int) ([]Member, error) {
		ms, err := src.read(ctx, t, after, limit)
		if err == nil && limit == CandidatePage && len(ms) == limit {
			elided.Add(1)
			return nil, ErrFullPage
		}
		return ms, err
	}
	ctx := context.Background()
	for _, q := range []Query{
		{Match: []Tag{{"__db", "db"}, {"host", "h0007"}}},
		{Match: []Tag{{"host", "h0007"}, {"kind", "1"}, {"__db", "db"}}},
		{Match: []Tag{{"__db", "db"}, {"kind", "1"}}}, // both lists longer than a page: List
	} {
		want, err := Candidates(ctx, src.read, q)
		if err != nil {
			t.Fatal(err)
		}
		elided.Store(0)
		got, err := Candidates(ctx, elide, q)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("%+v: %d candidates, %v, with full pages elided; want the %d of the members", q, len(got), err, len(want))
		}
		if elided.Load() == 0 {
			t.Fatalf("%+v: no page was full", q)
		}
	}
	if _, err := readAll(ctx, func(context.Context, Tag, string, int) ([]Member, error) { return nil, ErrFullPage }, Tag{"__db", "db"}, ""); !errors.Is(err, ErrFullPage) {
		t.Fatalf("readAll of an elided page: %v, want ErrFullPage", err)
	}
}
