package catalog

import (
	"math/rand"
	"slices"
	"testing"
)

// TestNormalTagsAgreesWithNormalizeTags: Validate's one-pass check accepts exactly the
// tags NormalizeTags returns unchanged, over tags with duplicate keys, keys out of
// order, invalid keys and values, and too many tags.
func TestNormalTagsAgreesWithNormalizeTags(t *testing.T) {
	keys := []string{"a", "b", "bb", "c", "", "k=v", "host"}
	vals := []string{"1", "x", "", "y"}
	rng := rand.New(rand.NewSource(1))
	cases := [][]Tag{nil, {}, make([]Tag, MaxTags+1)}
	for i := range cases[2] {
		cases[2][i] = Tag{K: string(rune('a'+i%26)) + string(rune('a'+i/26)), V: "v"}
	}
	slices.SortFunc(cases[2], func(a, b Tag) int {
		if a.K < b.K {
			return -1
		}
		return 1
	})
	for i := 0; i < 5000; i++ {
		tags := make([]Tag, rng.Intn(5))
		for j := range tags {
			tags[j] = Tag{K: keys[rng.Intn(len(keys))], V: vals[rng.Intn(len(vals))]}
		}
		cases = append(cases, tags)
	}
	accepted := 0
	for _, tags := range cases {
		norm, err := NormalizeTags(tags)
		want := err == nil && slices.Equal(norm, tags)
		if got := normalTags(tags); got != want {
			t.Fatalf("normalTags(%v) = %v, NormalizeTags gives %v, %v", tags, got, norm, err)
		}
		if want {
			accepted++
		}
	}
	if accepted < 100 {
		t.Fatalf("only %d of %d cases were normal tags: the test checks too little", accepted, len(cases))
	}
}
