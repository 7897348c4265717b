package series

import (
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
	for name, p := range cases {
		b := AppendPacked(nil, &p)
		q, err := DecodePacked(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		requireSameBits(t, name, p, q)
	}
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
		"empty":          nil,
		"version":        append([]byte{9}, good[1:]...),
		"type":           append([]byte{good[0], 7}, good[2:]...),
		"untyped points": append([]byte{good[0], byte(Unknown)}, good[2:]...),
		"truncated":      good[:len(good)-1],
		"trailing":       append(append([]byte{}, good...), 0),
		"huge count":     {packedVersion, byte(Float), 0xff, 0xff, 0xff, 0xff, 0x0f},
		"bad scale":      {packedVersion, byte(Float), 1, 2, 42, 0},
		"long string":    {packedVersion, byte(String), 1, 2, 50, 'a'},
		"raw floats cut": {packedVersion, byte(Float), 1, 2, rawFloats, 0, 0},
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
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePacked(b)
		if err != nil {
			return
		}
		if err := p.Valid(); err != nil {
			t.Fatalf("decoded invalid points: %v", err)
		}
		// What decodes re-encodes to the same bytes' meaning.
		q, err := DecodePacked(AppendPacked(nil, &p))
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		requireSameBits(t, "re-encoded", p, q)
	})
}
