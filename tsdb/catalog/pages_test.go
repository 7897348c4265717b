package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
)

// A PageLog reads each page once however many queries ask for it, keeps the pages in
// the order read, and past its bound answers ErrPagesFull, which stops the listing.
func TestPageLog(t *testing.T) {
	all := map[string][]Tag{}
	for i := range 40 {
		all[fmt.Sprintf("iot/t%02d", i)] = []Tag{{K: "fleet", V: []string{"East", "South"}[i%2]}, {K: "f", V: fmt.Sprint(i % 4)}}
	}
	src := newMemSource(all)
	ctx := context.Background()
	log := NewPageLog(src.read, 0)
	qs := []Query{
		{Match: []Tag{{K: "fleet", V: "South"}, {K: "f", V: "1"}}},
		{Match: []Tag{{K: "fleet", V: "South"}, {K: "f", V: "3"}}},
	}
	got, err := CandidatesAny(ctx, log.Source, qs)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, q := range qs {
		ks, err := List(ctx, src.read, q)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, ks...)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("candidates %v, want %v", got, want)
	}
	if n := len(log.Pages()); n != 3 || src.reads.Load() != 3+4 {
		t.Fatalf("%d pages logged, %d reads; want 3 (South's once) and 3 more than List's 4", n, src.reads.Load())
	}
	small := NewPageLog(src.read, MemberBytes(Member{Key: "iot/t00"})*15)
	if _, err := CandidatesAny(ctx, small.Source, qs); !errors.Is(err, ErrPagesFull) {
		t.Fatalf("a log bound below South's 20 members: %v, want ErrPagesFull", err)
	}
	if small.Bytes() > MemberBytes(Member{Key: "iot/t00"})*15 {
		t.Fatalf("logged %d bytes past the bound", small.Bytes())
	}
}
