package store

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/series"
)

func takeChanged(t *testing.T, p *Pebble) []string {
	t.Helper()
	prs, complete := p.TakeChanged()
	if !complete {
		t.Fatal("TakeChanged: incomplete")
	}
	var got []string
	for _, pr := range prs {
		got = append(got, fmt.Sprintf("%d/%s", pr.Ref.Start, pr.Key))
	}
	slices.Sort(got)
	return got
}

// TakeChanged hands over each pair that changed once: appends, late points into sealed
// quanta, deletes; not seals, not re-writes of what is already held; and says when it
// lost count.
func TestTakeChangedListsWhatChanged(t *testing.T) {
	p := openTest(t, t.TempDir(), testOptions(SyncNone))
	defer p.Close()
	q := int64(p.Quantum())
	start := testStart - testStart%q
	ref := func(key string, start int64) ShardRef {
		return ShardRef{ID: quanta.ShardID(quanta.QFI, key, start), Start: start}
	}
	two := func(start int64) series.Points {
		return series.Points{Type: series.Float, T: []int64{start * 1e9, start*1e9 + 1}, F: []float64{1, 2}}
	}
	var want []string
	for _, k := range []string{"a", "b", "c"} {
		for qi := int64(0); qi < 2; qi++ {
			s := start + qi*q
			for range 2 { // twice: still one change per pair
				if err := p.Append(ref(k, s), k, two(s)); err != nil {
					t.Fatal(err)
				}
			}
			want = append(want, fmt.Sprintf("%d/%s", s, k))
		}
	}
	slices.Sort(want)
	if got := takeChanged(t, p); !slices.Equal(got, want) {
		t.Fatalf("after appends: %v, want %v", got, want)
	}
	if _, err := p.SealNow(time.Unix(start+10*q, 0)); err != nil {
		t.Fatal(err)
	}
	if err := p.Append(ref("a", start), "a", two(start)); err != nil { // nothing new
		t.Fatal(err)
	}
	if got := takeChanged(t, p); len(got) != 0 {
		t.Fatalf("after a seal and a re-write of held points: %v, want none", got)
	}
	if err := p.Append(ref("b", start), "b", series.Points{Type: series.Float, T: []int64{start*1e9 + 5}, F: []float64{3}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DeleteRange(ref("c", start+q), "c", (start+q)*1e9, (start+q)*1e9+1); err != nil {
		t.Fatal(err)
	}
	w := []string{fmt.Sprintf("%d/b", start), fmt.Sprintf("%d/c", start+q)}
	if got := takeChanged(t, p); !slices.Equal(got, w) {
		t.Fatalf("after a late point and a delete: %v, want %v", got, w)
	}
	// Past the bound: incomplete, once; then counting again.
	for i := range MaxChangedPairs + 1 {
		p.changes.note(fmt.Sprintf("%030d", i))
	}
	if prs, complete := p.TakeChanged(); complete || len(prs) != 0 {
		t.Fatalf("over the bound: %d pairs, complete %v", len(prs), complete)
	}
	if _, complete := p.TakeChanged(); !complete {
		t.Fatal("after an incomplete take the next is incomplete too")
	}
}
