package series

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// requireSameBits fails unless q holds p's points exactly, floats bit for bit.
func requireSameBits(t *testing.T, what string, p, q Points) {
	t.Helper()
	if q.Len() != p.Len() || (p.Len() > 0 && q.Type != p.Type) {
		t.Fatalf("%s: got %d points of %v, want %d of %v", what, q.Len(), q.Type, p.Len(), p.Type)
	}
	for i := range p.T {
		if p.T[i] != q.T[i] || !p.Equal(i, &q, i) {
			t.Fatalf("%s: point %d: got %d=%s, want %d=%s", what, i, q.T[i], q.Value(i), p.T[i], p.Value(i))
		}
		if p.Type == Float && math.Float64bits(p.F[i]) != math.Float64bits(q.F[i]) {
			t.Fatalf("%s: float bits differ at %d: %x, want %x", what, i, math.Float64bits(q.F[i]), math.Float64bits(p.F[i]))
		}
	}
}

// pmu returns n points of a 60 Hz frequency channel: ns timestamps, 3 decimals.
func pmu(r *rand.Rand, n int) Points {
	var p Points
	f := 60.0
	for i := 0; i < n; i++ {
		f += (60-f)*0.01 + r.NormFloat64()*0.002
		p.AppendFloat(1_795_309_200_000_000_000+int64(i)*1e9/60, math.Round(f*1000)/1000)
	}
	return p
}

func TestPackedRoundTrip(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	cases := map[string]Points{
		"pmu":            pmu(r, 9000),
		"empty":          {Type: Float},
		"empty, untyped": {},
		"specials": {Type: Float, T: []int64{math.MinInt64, -1, 0, 1, math.MaxInt64},
			F: []float64{math.Copysign(0, -1), math.NaN(), math.Inf(1), math.SmallestNonzeroFloat64, math.MaxFloat64}},
		"decimals, then one that has none": {Type: Float, T: []int64{1, 2, 3}, F: []float64{0.5, 0.25, 1.0 / 3}},
		"big decimals":                     {Type: Float, T: []int64{1, 2}, F: []float64{1e15, 9007199.254740993}},
		"int extremes":                     {Type: Int, T: []int64{1, 2, 3}, I: []int64{math.MinInt64, math.MaxInt64, 0}},
		"strings":                          {Type: String, T: []int64{1, 2, 3}, S: []string{"", "on", "ünïcode"}},
	}
	for _, typ := range []Type{Float, Int, String} {
		for _, n := range []int{1, 2, 1000} {
			cases[typ.String()+" random "+string(rune('0'+n%10))] = randomPoints(r, typ, n)
		}
	}
	cases["float32 readings"] = float32PMU(r, 1000)
	cases["noisy float64"] = noisyAngle(r, 1000)
	cases["across zero, float32"] = Points{Type: Float, T: []int64{1, 2, 3, 4}, F: []float64{float64(float32(0.1)), 0, float64(float32(-0.1)), float64(float32(-3e-39))}}
	cases["-0 among float32"] = Points{Type: Float, T: []int64{1, 2, 3}, F: []float64{float64(float32(0.1)), math.Copysign(0, -1), float64(float32(-0.1))}}
	cases["zeros"] = Points{Type: Float, T: []int64{1, 2}, F: []float64{0, 0}}
	cases["extreme bits"] = Points{Type: Float, T: []int64{1, 2, 3, 4}, F: []float64{math.MaxFloat64, -math.MaxFloat64, math.NaN(), math.Float64frombits(0xfff8000000000001)}}
	for name, p := range cases {
		for v := 0; v <= PackedVersion+1; v++ {
			b := AppendPackedFor(nil, &p, v)
			if want := byte(1); v <= 1 && b[0] != want {
				t.Fatalf("%s: a reader of version %d got version %d", name, v, b[0])
			}
			q, err := DecodePacked(b)
			if err != nil {
				t.Fatalf("%s, for version %d: %v", name, v, err)
			}
			requireSameBits(t, fmt.Sprintf("%s, for version %d", name, v), p, q)
		}
		if !bytes.Equal(AppendPacked(nil, &p), AppendPackedFor(nil, &p, 1)) {
			t.Fatalf("%s: AppendPacked is not version 1", name)
		}
	}
}

// float32PMU returns n points of a 60 Hz voltage angle as a C37.118 PMU in floating-
// point format sends it: float32 readings, timestamps a few µs off the 60 Hz grid.
func float32PMU(r *rand.Rand, n int) Points {
	var p Points
	for i := 0; i < n; i++ {
		v := math.Mod(0.5*float64(i)/60+0.01*r.NormFloat64(), 360) - 180
		p.AppendFloat(1_795_309_200_000_000_000+int64(i)*1e9/60+r.Int63n(2000), float64(float32(v)))
	}
	return p
}

// noisyAngle is float32PMU's angle at full float64 precision: what tsdht bench
// read writes.
func noisyAngle(r *rand.Rand, n int) Points {
	var p Points
	for i := 0; i < n; i++ {
		v := math.Mod(0.5*float64(i)/60+0.01*r.NormFloat64(), 360) - 180
		p.AppendFloat(1_795_309_200_000_000_000+int64(i)*1e9/60+r.Int63n(2000), v)
	}
	return p
}

// Version 2 sends values with no decimal scale in fewer bytes than version 1's 8 a
// value: float32 readings in about a third, noisy float64 angles in less; and never in
// more than version 1.
func TestPackedVersion2IsSmaller(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	for _, c := range []struct {
		name string
		p    Points
		max  float64 // bytes a point, version 2
	}{
		{"float32 PMU angle", float32PMU(r, 9000), 4.5},
		{"float64 noisy angle", noisyAngle(r, 9000), 8.5},
	} {
		v1, v2 := AppendPackedFor(nil, &c.p, 1), AppendPackedFor(nil, &c.p, 2)
		b1, b2 := float64(len(v1))/float64(c.p.Len()), float64(len(v2))/float64(c.p.Len())
		t.Logf("%s: %.2f B/point in version 1, %.2f in version 2", c.name, b1, b2)
		if b2 > c.max || len(v2) >= len(v1) {
			t.Errorf("%s: %.2f B/point in version 2 (version 1: %.2f); want <= %.1f and fewer than version 1", c.name, b2, b1, c.max)
		}
	}
	for name, p := range map[string]Points{
		"decimals":     pmu(r, 1000),
		"ints":         randomPoints(r, Int, 1000),
		"raw specials": {Type: Float, T: []int64{1, 2}, F: []float64{math.Inf(1), math.Copysign(0, -1)}},
		"random bits":  randomBits(r, 1000),
	} {
		if v1, v2 := AppendPackedFor(nil, &p, 1), AppendPackedFor(nil, &p, 2); len(v2) > len(v1) {
			t.Errorf("%s: %d bytes in version 2, more than version 1's %d", name, len(v2), len(v1))
		}
	}
}

// randomBits returns floats of random bits: no form does better than raw.
func randomBits(r *rand.Rand, n int) Points {
	var p Points
	for i := 0; i < n; i++ {
		p.AppendFloat(int64(i), math.Float64frombits(r.Uint64()))
	}
	return p
}

// TestPackedIsSmall: what the packed form is for — a PMU channel in ~2 bytes a point,
// against 12 in the msgpack form.
func TestPackedIsSmall(t *testing.T) {
	p := pmu(rand.New(rand.NewSource(6)), 9000)
	packed := AppendPacked(nil, &p)
	plain, err := msgpack.Marshal(&p)
	if err != nil {
		t.Fatal(err)
	}
	perPoint := float64(len(packed)) / float64(p.Len())
	t.Logf("9000 PMU points: packed %d bytes (%.2f B/point), msgpack %d bytes", len(packed), perPoint, len(plain))
	if perPoint > 3 {
		t.Errorf("%.2f B/point packed; want <= 3", perPoint)
	}
}

func TestPackedRefusesCorruptInput(t *testing.T) {
	p := pmu(rand.New(rand.NewSource(7)), 100)
	good := AppendPacked(nil, &p)
	for name, b := range map[string][]byte{
		"empty":                   nil,
		"version":                 append([]byte{9}, good[1:]...),
		"type":                    append([]byte{good[0], 7}, good[2:]...),
		"untyped points":          append([]byte{good[0], byte(Unknown)}, good[2:]...),
		"truncated":               good[:len(good)-1],
		"trailing":                append(append([]byte{}, good...), 0),
		"huge count":              {packedVersion, byte(Float), 0xff, 0xff, 0xff, 0xff, 0x0f},
		"bad scale":               {packedVersion, byte(Float), 1, 2, 42, 0},
		"long string":             {packedVersion, byte(String), 1, 2, 50, 'a'},
		"raw floats cut":          {packedVersion, byte(Float), 1, 2, rawFloats, 0, 0},
		"version 3":               {3, byte(Float), 1, 2, rawFloats, 0, 0, 0, 0, 0, 0, 0, 0},
		"bit deltas in version 1": {packedVersion, byte(Float), 1, 2, bitDeltas, 0, 2},
		"bit deltas shift":        {2, byte(Float), 1, 2, bitDeltas, 64, 2},
		"bit deltas cut":          {2, byte(Float), 2, 2, 2, bitDeltas, 0, 2},
	} {
		if _, err := DecodePacked(b); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

func BenchmarkPackPMU(b *testing.B) {
	p := pmu(rand.New(rand.NewSource(8)), 9000)
	var buf []byte
	for b.Loop() {
		buf = AppendPacked(buf[:0], &p)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*p.Len()), "ns/point")
}

func BenchmarkUnpackPMU(b *testing.B) {
	p := pmu(rand.New(rand.NewSource(8)), 9000)
	buf := AppendPacked(nil, &p)
	for b.Loop() {
		if _, err := DecodePacked(buf); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*p.Len()), "ns/point")
}

func FuzzPackedDecode(f *testing.F) {
	r := rand.New(rand.NewSource(9))
	for _, typ := range []Type{Float, Int, String} {
		p := randomPoints(r, typ, 5)
		f.Add(AppendPacked(nil, &p))
	}
	q := pmu(r, 20)
	f.Add(AppendPacked(nil, &q))
	for _, p := range []Points{float32PMU(r, 20), noisyAngle(r, 20)} {
		f.Add(AppendPackedFor(nil, &p, 2))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePacked(b)
		if err != nil {
			return
		}
		if err := p.Valid(); err != nil {
			t.Fatalf("decoded invalid points: %v", err)
		}
		// What decodes re-encodes to the same bytes' meaning.
		for v := 1; v <= PackedVersion; v++ {
			q, err := DecodePacked(AppendPackedFor(nil, &p, v))
			if err != nil {
				t.Fatalf("re-decode of version %d: %v", v, err)
			}
			requireSameBits(t, fmt.Sprintf("re-encoded in version %d", v), p, q)
		}
	})
}

// BenchmarkPackFloats compares, per point, packing and unpacking 9,000 floats with no
// decimal scale in version 1 (raw) and version 2 (bit deltas): what version 2's fewer
// bytes cost in CPU, on both sides of a read.
func BenchmarkPackFloats(b *testing.B) {
	r := rand.New(rand.NewSource(12))
	for _, c := range []struct {
		name string
		p    Points
	}{{"float64", noisyAngle(r, 9000)}, {"float32", float32PMU(r, 9000)}} {
		for v := 1; v <= PackedVersion; v++ {
			b.Run(fmt.Sprintf("%s/v%d/pack", c.name, v), func(b *testing.B) {
				var buf []byte
				for b.Loop() {
					buf = AppendPackedFor(buf[:0], &c.p, v)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*c.p.Len()), "ns/point")
				b.ReportMetric(float64(len(buf))/float64(c.p.Len()), "B/point")
			})
			b.Run(fmt.Sprintf("%s/v%d/unpack", c.name, v), func(b *testing.B) {
				buf := AppendPackedFor(nil, &c.p, v)
				for b.Loop() {
					if _, err := DecodePacked(buf); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*c.p.Len()), "ns/point")
			})
		}
	}
}
