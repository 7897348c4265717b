package chunk

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tsdht/tsdht/tsdb/series"
)

// stableCorpus is a fixed set of batches of every shape the encoder meets: random
// batches (clocks regular and jittery, values of every kind), widened float32s, a 60 Hz
// channel, tsbs-like device readings every 10 s, and integer columns at the edges of
// int64 (where differences wrap).
func stableCorpus() []series.Points {
	r := rand.New(rand.NewPCG(29, 1))
	var out []series.Points
	for range 300 {
		out = append(out, randomPoints(r))
	}
	for range 40 {
		out = append(out, randomSingles(r))
	}
	out = append(out, pmuFrequency(r, 600), truckReadings(r, 360, 2), truckReadings(r, 28, 0), truckReadings(r, 1, 3))
	edges := []int64{math.MinInt64, math.MinInt64 + 1, -1 << 62, -1, 0, 1, 1 << 61, 1 << 62, math.MaxInt64 - 1, math.MaxInt64}
	for range 60 {
		p := series.Points{Type: series.Int}
		n := 1 + r.IntN(300)
		for i := range n {
			p.T = append(p.T, int64(i)*10e9)
			v := edges[r.IntN(len(edges))] + r.Int64N(5) - 2
			if r.IntN(2) == 0 && i > 0 {
				v = p.I[i-1] + edges[r.IntN(len(edges))]/int64(1+r.IntN(4)) // wrapping steps
			}
			p.I = append(p.I, v)
		}
		out = append(out, p)
	}
	return out
}

// truckReadings is n readings of a tsbs IoT truck: stamped every 10 s, values with
// up to dec decimals that wander.
func truckReadings(r *rand.Rand, n, dec int) series.Points {
	p := series.Points{Type: series.Float}
	v, scale := 50.0, math.Pow(10, float64(dec))
	for i := range n {
		p.T = append(p.T, 1_451_606_400_000_000_000+int64(i)*10e9)
		v += r.Float64()*4 - 2
		p.F = append(p.F, math.Round(v*scale)/scale)
	}
	return p
}

// TestEncodingIsStable pins the encoder's output, byte for byte, over stableCorpus,
// with the full mode search and with Quick: a change that makes the encoder faster
// must not change what it writes. A deliberate change of the format updates the hashes
// (and, if old chunks must still be read, the chunk version).
func TestEncodingIsStable(t *testing.T) {
	want := map[bool]string{
		false: "1bb9368303ae6b73bd62d9210c497328ed173775aeb2fb19f0ff8fb7276c5daa",
		true:  "33aadea856e3f0a5f2330f78b0ac318789135b5718c3b8137c0337fd46adfa3c",
	}
	corpus := stableCorpus()
	for _, quick := range []bool{false, true} {
		e := Encoder{Quick: quick}
		h := sha256.New()
		var buf []byte
		for i, p := range corpus {
			var err error
			if buf, err = e.Encode(buf[:0], p); err != nil {
				t.Fatalf("batch %d: %v", i, err)
			}
			got, err := Decode(buf)
			if err != nil || !equalBits(p, got) {
				t.Fatalf("batch %d (quick %v) does not round-trip: %v", i, quick, err)
			}
			h.Write(buf)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != want[quick] {
			t.Errorf("quick %v: the encoding of the corpus hashes to %s, want %s", quick, got, want[quick])
		}
	}
}

// BenchmarkEncodeTruck encodes an hour of a tsbs IoT reading (one point every 10 s, two
// decimals), as the seal of a series of 1 h quanta does, and its 28-point blocks as
// the appends of a 5,000-line tsbs batch write them (Quick).
func BenchmarkEncodeTruck(b *testing.B) {
	hour := truckReadings(rand.New(rand.NewPCG(3, 4)), 360, 2)
	for _, c := range []struct {
		name  string
		p     series.Points
		quick bool
	}{{"seal", hour, false}, {"block", hour.Slice(0, 28), true}} {
		b.Run(c.name, func(b *testing.B) {
			e := Encoder{Quick: c.quick}
			var dst []byte
			var err error
			b.ReportAllocs()
			for b.Loop() {
				if dst, err = e.Encode(dst[:0], c.p); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*c.p.Len()), "ns/point")
		})
	}
}
