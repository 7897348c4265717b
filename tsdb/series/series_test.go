package series

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestValidateKey(t *testing.T) {
	cases := []struct {
		key string
		ok  bool
	}{
		{"pmu17/bus3/vang", true},
		{"k", true},
		{strings.Repeat("x", MaxKeyLen), true},
		{"", false},
		{strings.Repeat("x", MaxKeyLen+1), false},
		{"bad\xffutf8", false},
	}
	for _, c := range cases {
		if err := ValidateKey(c.key); (err == nil) != c.ok {
			t.Errorf("ValidateKey(%.20q) = %v, want ok=%v", c.key, err, c.ok)
		}
	}
}

func TestNormalizeSortsAndKeepsLastDuplicate(t *testing.T) {
	var p Points
	for _, tv := range [][2]int64{{5, 50}, {1, 10}, {3, 30}, {1, 11}, {5, 51}, {2, 20}, {1, 12}} {
		p.AppendInt(tv[0], tv[1])
	}
	p.Normalize()
	wantT := []int64{1, 2, 3, 5}
	wantV := []int64{12, 20, 30, 51}
	if len(p.T) != len(wantT) {
		t.Fatalf("got %v", p.T)
	}
	for i := range wantT {
		if p.T[i] != wantT[i] || p.I[i] != wantV[i] {
			t.Fatalf("got T=%v I=%v, want T=%v I=%v", p.T, p.I, wantT, wantV)
		}
	}
}

func TestTrimIsHalfOpen(t *testing.T) {
	var p Points
	for i := int64(0); i < 10; i++ {
		p.AppendFloat(i*10, float64(i))
	}
	cases := []struct {
		from, to int64
		want     int
	}{
		{0, 100, 10}, {0, 90, 9}, {0, 91, 10}, {10, 10, 0}, {11, 20, 0}, {-5, 1, 1}, {95, 200, 0}, {50, 40, 0},
	}
	for _, c := range cases {
		if got := p.Trim(c.from, c.to); got.Len() != c.want {
			t.Errorf("Trim(%d,%d) = %d points, want %d", c.from, c.to, got.Len(), c.want)
		}
	}
}

func TestMergeUnionsAndPrefersSecond(t *testing.T) {
	var a, b Points
	for _, x := range []int64{1, 3, 5} {
		a.AppendString(x, "a")
	}
	for _, x := range []int64{2, 3, 6} {
		b.AppendString(x, "b")
	}
	m := Merge(a, b)
	want := []string{"1a", "2b", "3b", "5a", "6b"}
	if m.Len() != len(want) {
		t.Fatalf("merged %d points", m.Len())
	}
	for i, w := range want {
		if got := m.Value(i); string(rune('0'+m.T[i]))+got != w {
			t.Errorf("point %d = %d%s, want %s", i, m.T[i], got, w)
		}
	}
}

func randomPoints(r *rand.Rand, typ Type, n int) Points {
	p := Points{Type: typ}
	t := r.Int63n(1<<62) - 1<<61
	for i := 0; i < n; i++ {
		t += r.Int63n(1e9)
		switch typ {
		case Float:
			v := r.NormFloat64()
			switch r.Intn(20) {
			case 0:
				v = math.NaN()
			case 1:
				v = math.Inf(-1)
			}
			p.AppendFloat(t, v)
		case Int:
			p.AppendInt(t, r.Int63()-r.Int63())
		case String:
			p.AppendString(t, strings.Repeat("ab,\"", r.Intn(4)))
		}
	}
	return p
}

func TestWireRoundTrip(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	for _, typ := range []Type{Float, Int, String} {
		for _, n := range []int{0, 1, 2, 1000} {
			p := randomPoints(r, typ, n)
			b, err := msgpack.Marshal(&p)
			if err != nil {
				t.Fatal(err)
			}
			var q Points
			if err := msgpack.Unmarshal(b, &q); err != nil {
				t.Fatalf("%v/%d: %v", typ, n, err)
			}
			if q.Len() != p.Len() || (n > 0 && q.Type != p.Type) {
				t.Fatalf("%v/%d: got %d points of %v", typ, n, q.Len(), q.Type)
			}
			for i := range p.T {
				if p.T[i] != q.T[i] || !p.Equal(i, &q, i) {
					t.Fatalf("%v/%d: point %d differs", typ, n, i)
				}
				if typ == Float && math.Float64bits(p.F[i]) != math.Float64bits(q.F[i]) {
					t.Fatalf("float bits differ at %d", i)
				}
			}
		}
	}
}

func TestWireRefusesInconsistentColumns(t *testing.T) {
	// Two timestamps but floats for one: the decoder must refuse, not index past the end.
	enc := func(fields ...any) []byte {
		b, err := msgpack.Marshal(fields)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ts := appendDeltas(nil, []int64{1, 2})
	for name, b := range map[string][]byte{
		"short floats":  enc(1, uint8(Float), ts, make([]byte, 8)),
		"short strings": enc(1, uint8(String), ts, []string{"a"}),
		"bad varint":    enc(1, uint8(Int), ts, []byte{0xff}),
		"too few":       enc(1, uint8(Float)),
		"unknown type":  enc(1, 9, ts, nil),
	} {
		var p Points
		if err := msgpack.Unmarshal(b, &p); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

func FuzzWireDecode(f *testing.F) {
	r := rand.New(rand.NewSource(4))
	for _, typ := range []Type{Float, Int, String} {
		p := randomPoints(r, typ, 5)
		b, _ := msgpack.Marshal(&p)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Points
		if err := msgpack.Unmarshal(b, &p); err != nil {
			return
		}
		if err := p.Valid(); err != nil {
			t.Fatalf("decoded invalid points: %v", err)
		}
	})
}

func TestWireSizeBoundsTheEncoding(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	for _, typ := range []Type{Float, Int, String} {
		for _, n := range []int{0, 1, 10, 1000} {
			p := Points{Type: typ}
			for i := 0; i < n; i++ {
				ts := r.Int63() - r.Int63()
				switch typ {
				case Float:
					p.AppendFloat(ts, r.NormFloat64())
				case Int:
					p.AppendInt(ts, r.Int63()-r.Int63())
				case String:
					p.AppendString(ts, strings.Repeat("x", r.Intn(300)))
				}
			}
			b, err := msgpack.Marshal(&p)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > p.WireSize() {
				t.Errorf("%s × %d: encoded %d bytes, WireSize says at most %d", typ, n, len(b), p.WireSize())
			}
		}
	}
}

func TestBatchesCutBySize(t *testing.T) {
	var p Points
	for i := 0; i < 1000; i++ {
		p.AppendString(int64(i), strings.Repeat("s", 4096))
	}
	bs := p.Batches(50_000, 1<<20)
	total := 0
	for _, b := range bs {
		if b.WireSize() > 1<<20 {
			t.Fatalf("a batch of %d points bounds %d bytes, over 1 MiB", b.Len(), b.WireSize())
		}
		total += b.Len()
	}
	if total != 1000 || len(bs) < 4 {
		t.Fatalf("%d batches holding %d points", len(bs), total)
	}
	var f Points
	for i := 0; i < 120_000; i++ {
		f.AppendFloat(int64(i), 1)
	}
	if bs := f.Batches(50_000, 1<<30); len(bs) != 3 || bs[0].Len() != 50_000 {
		t.Fatalf("cut by points: %d batches", len(bs))
	}
}

// Concat allocates its result once, timestamps and values: a long read's answer is
// concatenated from hundreds of shards and must not grow its value column step by step.
func TestConcatAllocatesOnce(t *testing.T) {
	r := rand.New(rand.NewSource(13))
	for _, typ := range []Type{Float, Int, String} {
		var parts []Points
		for range 16 {
			parts = append(parts, Points{Type: typ}, randomPoints(r, typ, 563))
		}
		want := 0
		for i := range parts {
			want += parts[i].Len()
		}
		var got Points
		if allocs := testing.AllocsPerRun(10, func() { got = Concat(parts...) }); allocs != 2 {
			t.Errorf("%v: Concat of %d parts made %v allocations; want 2", typ, len(parts), allocs)
		}
		if got.Len() != want || got.Type != typ {
			t.Errorf("%v: Concat gave %d points of %v; want %d of %v", typ, got.Len(), got.Type, want, typ)
		}
	}
}
