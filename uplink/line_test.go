package uplink

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
)

// FuzzAppendTime: the line encoder's timestamps are strconv's, whatever the previous
// timestamp was.
func FuzzAppendTime(f *testing.F) {
	for _, t := range []int64{0, -1, 1e9 - 1, 1e9, 1e9 + 1, 1_764_000_000_016_666_667, math.MaxInt64, math.MinInt64} {
		f.Add(t, t+16_666_667)
	}
	f.Fuzz(func(t *testing.T, a, b int64) {
		var l lineEncoder
		for _, v := range []int64{a, b, a} {
			l.buf = l.buf[:0]
			l.appendTime(v)
			if got, want := string(l.buf), strconv.FormatInt(v, 10); got != want {
				t.Fatalf("appendTime(%d) after others = %q, want %q", v, got, want)
			}
		}
	})
}

// TestNextLook: a regular look comes when the horizon has just passed a multiple of
// the interval, within one interval.
func TestNextLook(t *testing.T) {
	u := &Uplink{cfg: Config{Interval: 10 * time.Second}, settle: 2 * time.Second}
	for _, now := range []int64{12_300_000_000, 12_500_000_000, 12_500_000_001, 99_999_999_999, 1_764_000_000_123_456_789} {
		d := u.nextLook(time.Unix(0, now))
		horizon := now + int64(d) - int64(u.settle)
		if d <= 0 || d > u.cfg.Interval || horizon%int64(u.cfg.Interval) != int64(lookPast) {
			t.Errorf("at %d: next look in %v, its horizon %d: want within %v, %v past a multiple of it", now, d, horizon, u.cfg.Interval, lookPast)
		}
	}
}

// TestLineFloatsExact: what the centre parses of a line's value is the stored float64,
// bit for bit, among them PMU readings sent as float32 (C37.118) and stored widened.
// Their float32 shortest form ("59.98") would be cheaper to format but parses as
// another float64 than the one stored, so the encoder formats the float64's.
func TestLineFloatsExact(t *testing.T) {
	e := catalog.Entry{Key: "sub7/pmu1/freq"}
	var pts series.Points
	r := rand.New(rand.NewPCG(1, 2))
	vals := []float64{0, math.Copysign(0, -1), 1, -1, 59.98, float64(float32(59.98)), float64(float32(0.1)), math.SmallestNonzeroFloat64,
		math.MaxFloat64, -math.MaxFloat64, float64(math.SmallestNonzeroFloat32), 1e21, 1e-7, 123456789012345678}
	for range 2000 {
		vals = append(vals, math.Float64frombits(r.Uint64()), float64(float32(r.NormFloat64()*1000)), r.Float64()*360-180)
	}
	for i, v := range vals {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			pts.AppendFloat(int64(i), v)
		}
	}
	var l lineEncoder
	l.points(&e, &pts)
	lines := strings.Split(strings.TrimSuffix(string(l.body()), "\n"), "\n")
	if len(lines) != pts.Len() {
		t.Fatalf("%d lines for %d points", len(lines), pts.Len())
	}
	for i, line := range lines {
		_, rest, _ := strings.Cut(line, " value=")
		text, _, _ := strings.Cut(rest, " ")
		got, err := strconv.ParseFloat(text, 64)
		if err != nil || math.Float64bits(got) != math.Float64bits(pts.F[i]) {
			t.Fatalf("line %q: the centre reads %v (%v), want %v exactly", line, got, err, pts.F[i])
		}
	}
}

// TestLinePointsAllocs: formatting a series' points into a batch's buffer allocates
// nothing per point (the series' prefix is formatted once per series).
func TestLinePointsAllocs(t *testing.T) {
	es, ps := pmuBatch(10 * time.Second)
	var l lineEncoder
	l.points(&es[0], &ps[0]) // the buffer grows once
	allocs := testing.AllocsPerRun(50, func() {
		l.reset()
		l.points(&es[0], &ps[0])
	})
	if limit := 4.0; allocs > limit {
		t.Errorf("%.0f allocations to format %d points, want at most %.0f (the series' prefix)", allocs, ps[0].Len(), limit)
	}
}
