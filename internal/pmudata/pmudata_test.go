package pmudata

import (
	"math"
	"testing"
	"time"
)

var pi32 = float64(float32(math.Pi)) // π rounded to float32, a hair above π

var ranges = map[string][2]float64{"freq": {59.8, 60.2}, "va/mag": {6900, 7500}, "va/ang": {-pi32, pi32}, "ia/ang": {-pi32, pi32}}

func TestGenerateIsDeterministicFloat32AndInRange(t *testing.T) {
	c := Default()
	c.Duration = 2 * time.Minute
	a, b := Generate(c), Generate(c)
	if len(a) != 24 || a[0].Key() != "pmu1/freq" || a[1].Key() != "pmu1/va/ang" || a[23].Key() != "pmu6/ia/ang" {
		t.Fatalf("channels: %d, first %q", len(a), a[0].Key())
	}
	for i := range a {
		p, q := a[i].Points, b[i].Points
		if p.Len() != q.Len() || p.Len() < c.Frames()*99/100 || p.Len() > c.Frames() {
			t.Fatalf("%s: %d and %d points of %d frames", a[i].Key(), p.Len(), q.Len(), c.Frames())
		}
		if !p.Sorted() {
			t.Fatalf("%s: timestamps do not ascend", a[i].Key())
		}
		for k, v := range p.F {
			if math.Float64bits(v) != math.Float64bits(q.F[k]) || p.T[k] != q.T[k] {
				t.Fatalf("%s: point %d differs between two runs", a[i].Key(), k)
			}
			if float64(float32(v)) != v {
				t.Fatalf("%s: %v is not a float32", a[i].Key(), v)
			}
			if p.T[k]%1000 != 0 {
				t.Fatalf("%s: timestamp %d is not whole µs", a[i].Key(), p.T[k])
			}
			r := ranges[a[i].Name]
			if v < r[0] || v > r[1] {
				t.Fatalf("%s: value %v outside %v", a[i].Key(), v, r)
			}
		}
	}
	// Another seed gives other data.
	c.Seed = 2
	if o := Generate(c); o[0].Points.F[100] == a[0].Points.F[100] && o[0].Points.F[200] == a[0].Points.F[200] {
		t.Error("seed 2 gave the same frequencies as seed 1")
	}
}
