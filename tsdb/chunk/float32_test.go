package chunk

import (
	"encoding/gob"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/tsdht/tsdht/internal/pmudata"
	"github.com/tsdht/tsdht/tsdb/series"
)

// TestNarrowWiden checks the integer float32 conversions against the hardware's for
// every class of value (NaNs excepted: the hardware may quiet them, which is why the
// codec does not use it) and that NaN payloads survive unchanged.
func TestNarrowWiden(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	check := func(u uint32) {
		w := widen(u)
		f := math.Float32frombits(u)
		if f == f && w != math.Float64bits(float64(f)) {
			t.Fatalf("widen(%#08x) = %#016x, hardware %#016x", u, w, math.Float64bits(float64(f)))
		}
		back, ok := narrow(w)
		if !ok || back != u {
			t.Fatalf("narrow(widen(%#08x)) = %#08x, %v", u, back, ok)
		}
		if m, ok := fromMonotone(toMonotone(u)); !ok || m != u {
			t.Fatalf("monotone round trip of %#08x = %#08x", u, m)
		}
	}
	for _, u := range []uint32{0, 1 << 31, 1, 0x007fffff, 0x00800000, 0x7f7fffff, 0x7f800000, 0xff800000,
		0x7fc00000, 0x7f800001, 0xffffffff, 0x80000001} {
		check(u)
	}
	for range 1_000_000 {
		check(r.Uint32())
	}
	// Float64s that are not widened float32s must not narrow.
	for _, v := range []float64{0.1, 60.001, 1e300, 5e-324, math.SmallestNonzeroFloat32 / 2, math.Float64frombits(0x7ff0_0000_0000_0001)} {
		if u, ok := narrow(math.Float64bits(v)); ok {
			t.Errorf("narrow(%v) = %#08x, want not a float32", v, u)
		}
	}
	for range 100_000 {
		b := r.Uint64()
		u, ok := narrow(b)
		if ok && widen(u) != b {
			t.Fatalf("narrow(%#016x) = %#08x, which widens to %#016x", b, u, widen(u))
		}
	}
	// Monotone order: the integers order as the values do.
	for range 100_000 {
		a, b := r.Uint32(), r.Uint32()
		fa, fb := math.Float32frombits(a), math.Float32frombits(b)
		if fa != fa || fb != fb || fa == fb {
			continue
		}
		if (fa < fb) != (toMonotone(a) < toMonotone(b)) {
			t.Fatalf("order of %v and %v lost", fa, fb)
		}
	}
}

// randomSingles is a batch of float32 values widened: noise around a level, a wrapping
// angle, or arbitrary patterns (NaN payloads, ±Inf, -0, subnormals).
func randomSingles(r *rand.Rand) series.Points {
	n := 1 + r.IntN(2000)
	p := series.Points{Type: series.Float}
	t := r.Int64N(1 << 62)
	style := r.IntN(3)
	a := r.Float64()*6 - 3
	for i := range n {
		t += 1 + r.Int64N(1e8)
		var f float32
		switch style {
		case 0:
			f = float32(60 + r.NormFloat64()*1e-3)
		case 1:
			a += 1e-3 + r.NormFloat64()*1e-5
			a -= 2 * math.Pi * math.Floor((a+math.Pi)/(2*math.Pi))
			f = float32(a)
		default:
			f = math.Float32frombits(r.Uint32())
			if i%7 == 0 {
				f = []float32{float32(math.Inf(1)), float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32}[r.IntN(3)]
			}
		}
		p.AppendFloat(t, math.Float64frombits(widen(math.Float32bits(f))))
	}
	return p
}

func TestRoundTripSingles(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	iters := 2000
	if testing.Short() {
		iters = 200
	}
	chose := 0
	for range iters {
		p := randomSingles(r)
		b := roundTrip(t, p)
		if b[0] != version {
			t.Fatalf("version byte %d", b[0])
		}
		if floatMode(t, b) == floatSingle {
			chose++
		}
	}
	if chose < iters/2 {
		t.Errorf("float32 mode chosen for %d of %d float32 batches", chose, iters)
	}
}

// floatMode returns the float mode byte of a float chunk.
func floatMode(t *testing.T, b []byte) byte {
	t.Helper()
	_, n, rest, err := header(b)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, err = decodeInts(rest, n, nil, b[0])
	if err != nil {
		t.Fatal(err)
	}
	return rest[0]
}

// TestVersion1ChunksDecode decodes chunks written by the version-1 encoder (before
// chunk version 2), kept in testdata: a store holds them.
func TestVersion1ChunksDecode(t *testing.T) {
	golden := goldenV1(t)
	if len(golden.Chunks) < 40 || len(golden.Chunks) != len(golden.Points) {
		t.Fatalf("%d chunks, %d batches", len(golden.Chunks), len(golden.Points))
	}
	for i, b := range golden.Chunks {
		if b[0] != 1 {
			t.Fatalf("chunk %d has version %d", i, b[0])
		}
		p, err := Decode(b)
		if err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		if !equalBits(p, golden.Points[i]) {
			t.Fatalf("chunk %d decodes to other points", i)
		}
		// A version-1 chunk re-encodes to version 2 with the same points.
		roundTrip(t, p)
	}
}

// TestCompressesFloat32PMU bounds the size of a 10 s quantum of each channel of the
// reference PMU data set (internal/pmudata) in bytes a point, timestamps included.
func TestCompressesFloat32PMU(t *testing.T) {
	c := pmudata.Default()
	c.Duration = 120e9
	sizes := map[string][2]int{}
	for _, ch := range pmudata.Generate(c) {
		for i := 0; i < ch.Points.Len(); i += 600 {
			part := ch.Points.Slice(i, min(i+600, ch.Points.Len()))
			b := roundTrip(t, part)
			s := sizes[ch.Name]
			sizes[ch.Name] = [2]int{s[0] + len(b), s[1] + part.Len()}
		}
	}
	limits := map[string]float64{"freq": 1.4, "va/ang": 1.8, "va/mag": 1.5, "ia/ang": 2.1}
	for name, s := range sizes {
		per := float64(s[0]) / float64(s[1])
		t.Logf("%s: %.3f B/point", name, per)
		if per > limits[name] {
			t.Errorf("%s: %.3f B/point; want <= %.2f", name, per, limits[name])
		}
	}
}

func BenchmarkEncodeFloat32PMU(b *testing.B) {
	c := pmudata.Default()
	c.Duration = 10e9
	p := pmudata.Generate(c)[1].Points
	var e Encoder
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = e.Encode(buf[:0], p)
	}
	b.ReportMetric(float64(len(buf))/float64(p.Len()), "B/point")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*p.Len()), "ns/point")
}

// v1Golden is testdata/v1-chunks.gob: chunks the version-1 encoder wrote, and their points.
type v1Golden struct {
	Chunks [][]byte
	Points []series.Points
}

func goldenV1(t testing.TB) v1Golden {
	f, err := os.Open("testdata/v1-chunks.gob")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var g v1Golden
	if err := gob.NewDecoder(f).Decode(&g); err != nil {
		t.Fatal(err)
	}
	return g
}

// TestConstantChunksStayDecodable: constant streams make a regular, constant batch a
// few bytes long whatever its length; beyond what a decoder accepts per byte
// (maxPointsPerByte) the encoder must fall back to blocks.
func TestConstantChunksStayDecodable(t *testing.T) {
	for _, n := range []int{1, 3, 600, 2048, 100_000, MaxPoints} {
		p := series.Points{Type: series.Int}
		for i := range n {
			p.AppendInt(int64(i)*1000, 7)
		}
		b := roundTrip(t, p)
		if n == 2048 && len(b) > 16 {
			t.Errorf("2048 constant points take %d bytes", len(b))
		}
	}
}
