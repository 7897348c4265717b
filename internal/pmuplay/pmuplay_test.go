package pmuplay

import (
	"math/rand"
	"strings"
	"testing"
)

func TestSamplesAreDeterministicAndCheckedExactly(t *testing.T) {
	play := func() map[string]float64 {
		p := &PMU{Name: "pmu1", Rnd: rand.New(rand.NewSource(1)), T0: 1e18}
		s := p.Samples(120)
		out := map[string]float64{}
		for _, ch := range Channels {
			pts := s[ch]
			if pts.Len() != 120 {
				t.Fatalf("%s: %d samples, want 120", ch, pts.Len())
			}
			if err := SamePoints(&pts, &pts); err != nil {
				t.Fatalf("%s against itself: %v", ch, err)
			}
			out[ch] = pts.F[119]
		}
		return out
	}
	a, b := play(), play()
	for ch := range a {
		if a[ch] != b[ch] {
			t.Errorf("%s: two plays of seed 1 differ: %v and %v", ch, a[ch], b[ch])
		}
	}
	if f := a["freq"]; f < 59.9 || f > 60.1 {
		t.Errorf("freq = %v, want near 60 Hz", f)
	}

	p := &PMU{Name: "pmu1", Rnd: rand.New(rand.NewSource(1))}
	s := p.Samples(10)
	want := s["vang"]
	got := want.Slice(0, 9)
	if err := SamePoints(&want, &got); err == nil || !strings.Contains(err.Error(), "got 9 points, want 10") {
		t.Errorf("a short read: err = %v, want one naming both counts", err)
	}
	other := s["iang"]
	if err := SamePoints(&want, &other); err == nil || !strings.Contains(err.Error(), "point 0") {
		t.Errorf("other values: err = %v, want one naming point 0", err)
	}
	if p.Key("vang") != "pmu1/vang" {
		t.Errorf("Key = %q", p.Key("vang"))
	}
}
