package chunk

import (
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/tsdht/tsdht/tsdb/series"
)

// equalBits reports whether two batches hold the same timestamps and bit-identical
// values (NaN payloads and -0 included).
func equalBits(a, b series.Points) bool {
	return a.Type == b.Type && series.SameBits(&a, &b)
}

func roundTrip(t *testing.T, p series.Points) []byte {
	t.Helper()
	b, err := Encode(nil, p)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if !equalBits(p, got) {
		t.Fatalf("round trip changed the points:\n in  %+v\n out %+v", p, got)
	}
	return b
}

func TestRoundTripEdgeCases(t *testing.T) {
	nanPayload := math.Float64frombits(0x7ff8_dead_beef_0001)
	negNaN := math.Float64frombits(0xfff0_0000_0000_0001) // signalling, negative
	cases := map[string]series.Points{
		"one float":   {Type: series.Float, T: []int64{0}, F: []float64{1.5}},
		"specials":    {Type: series.Float, T: []int64{-5, -1, 0, 7, 9, 11, 12}, F: []float64{math.NaN(), nanPayload, negNaN, math.Inf(1), math.Inf(-1), math.Copysign(0, -1), 0}},
		"subnormals":  {Type: series.Float, T: []int64{1, 2, 3}, F: []float64{5e-324, -5e-324, math.MaxFloat64}},
		"decimals":    {Type: series.Float, T: []int64{10, 20, 30, 40}, F: []float64{59.998, 60.001, 60.0, 0.1}},
		"extreme ts":  {Type: series.Int, T: []int64{math.MinInt64, -1, 0, math.MaxInt64}, I: []int64{math.MaxInt64, math.MinInt64, 0, -1}},
		"ints":        {Type: series.Int, T: []int64{1, 2, 3, 4, 5}, I: []int64{100, 101, 102, 103, 1 << 40}},
		"one int":     {Type: series.Int, T: []int64{42}, I: []int64{math.MinInt64}},
		"two ints":    {Type: series.Int, T: []int64{42, 43}, I: []int64{math.MinInt64, math.MaxInt64}},
		"strings":     {Type: series.String, T: []int64{1, 2, 3, 4}, S: []string{"", "ok", strings.Repeat("x", series.MaxStringValueLen), "ok"}},
		"empty strs":  {Type: series.String, T: []int64{1, 2, 3}, S: []string{"", "", ""}},
		"repeat strs": {Type: series.String, T: []int64{1, 2, 3, 4, 5, 6}, S: []string{"run", "run", "run", "stop", "stop", "run"}},
		"utf8":        {Type: series.String, T: []int64{1, 2}, S: []string{"Grüße", "\x00\xff"}},
	}
	for name, p := range cases {
		t.Run(name, func(t *testing.T) { roundTrip(t, p) })
	}
}

func TestEncodeRefusesBadBatches(t *testing.T) {
	for name, p := range map[string]series.Points{
		"empty":    {},
		"unsorted": {Type: series.Int, T: []int64{2, 1}, I: []int64{1, 2}},
		"dup":      {Type: series.Int, T: []int64{1, 1}, I: []int64{1, 2}},
		"invalid":  {Type: series.Int, T: []int64{1}, F: []float64{1}},
	} {
		if _, err := Encode(nil, p); err == nil {
			t.Errorf("%s: Encode accepted it", name)
		}
	}
}

// randomPoints makes a batch whose shape varies with r: regular or jittery clocks,
// smooth, noisy, decimal or arbitrary values, and gaps.
func randomPoints(r *rand.Rand) series.Points {
	n := 1 + r.IntN(600)
	if r.IntN(10) == 0 {
		n = 1 + r.IntN(5000)
	}
	p := series.Points{Type: series.Type(1 + r.IntN(3))}
	t := r.Int64() >> r.IntN(64)
	if r.IntN(2) == 0 {
		t = -t
	}
	step := int64(1 + r.IntN(1e9))
	jitter := int64(r.IntN(3)) * int64(r.IntN(5000))
	for range n {
		d := step
		if jitter > 0 {
			d += r.Int64N(2*jitter+1) - jitter
		}
		if r.IntN(100) == 0 {
			d += r.Int64N(1 << 40) // a gap
		}
		if d < 1 {
			d = 1
		}
		if t > math.MaxInt64-d {
			break
		}
		t += d
		p.T = append(p.T, t)
	}
	n = len(p.T)
	style := r.IntN(5)
	f, iv := r.NormFloat64()*100, r.Int64()
	words := []string{"", "ok", "fault", "recovering", strings.Repeat("z", r.IntN(100))}
	for i := range n {
		switch p.Type {
		case series.Float:
			switch style {
			case 0: // arbitrary bit patterns, NaN payloads included
				f = math.Float64frombits(r.Uint64())
			case 1: // decimals with noise
				f = math.Round((60+r.NormFloat64()*0.01)*1000) / 1000
			case 2: // random walk at full precision
				f += r.NormFloat64()
			case 3: // constant with rare changes
				if r.IntN(50) == 0 {
					f = float64(r.IntN(10))
				}
			default: // specials mixed in
				f = []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1), 1e-300, float64(i)}[r.IntN(7)]
			}
			p.F = append(p.F, f)
		case series.Int:
			switch style {
			case 0:
				iv = int64(r.Uint64())
			case 1:
				iv += int64(r.IntN(3))
			case 2:
				iv = []int64{math.MinInt64, math.MaxInt64, 0, -1}[r.IntN(4)]
			default:
				iv += r.Int64N(1000) - 500
			}
			p.I = append(p.I, iv)
		case series.String:
			if style == 0 {
				b := make([]byte, r.IntN(40))
				for k := range b {
					b[k] = byte(r.Uint32())
				}
				p.S = append(p.S, string(b))
			} else {
				p.S = append(p.S, words[r.IntN(len(words))])
			}
		}
	}
	return p
}

func TestRoundTripRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	iters := 3000
	if testing.Short() {
		iters = 300
	}
	quick := Encoder{Quick: true}
	for range iters {
		p := randomPoints(r)
		full := roundTrip(t, p)
		// A quick encoder's chunk decodes to the same points, and is larger only
		// where a mode it skips would have won.
		b, err := quick.Encode(nil, p)
		if err != nil {
			t.Fatalf("quick encode: %v", err)
		}
		if got, err := Decode(b); err != nil || !equalBits(p, got) {
			t.Fatalf("quick round trip: %v\n in  %+v\n out %+v", err, p, got)
		}
		if len(b) < len(full) {
			t.Fatalf("quick chunk of %d bytes beats the full search's %d", len(b), len(full))
		}
	}
}

// TestDecodeRejectsDamage flips, truncates and extends valid chunks: every result must
// be a clean error or a valid batch, never a panic.
func TestDecodeRejectsDamage(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		b, err := Encode(nil, randomPoints(r))
		if err != nil {
			t.Fatal(err)
		}
		for cut := 0; cut < len(b); cut += 1 + len(b)/20 {
			if _, err := Decode(b[:cut]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("truncated to %d of %d bytes: err = %v", cut, len(b), err)
			}
		}
		if _, err := Decode(append(b[:len(b):len(b)], 0)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("trailing byte accepted: %v", err)
		}
		d := append([]byte(nil), b...)
		d[r.IntN(len(d))] ^= byte(1 << r.IntN(8))
		if p, err := Decode(d); err == nil {
			if verr := p.Valid(); verr != nil || !p.Sorted() {
				t.Fatalf("damaged chunk decoded to a bad batch: %v", verr)
			}
		}
	}
}

func TestDecodeBoundsAllocation(t *testing.T) {
	// A header that claims MaxPoints points in a handful of bytes.
	b := []byte{version, byte(series.Float), 0x80, 0x80, 0x40, 0, 1, 0}
	if _, err := Decode(b); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v", err)
	}
	// A count just inside the bound still allocates in proportion to the input only.
	b = append([]byte{version, byte(series.Int), 64}, make([]byte, 2)...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 10 {
		_, _ = Decode(b)
	}
	runtime.ReadMemStats(&after)
	if perCall := (after.TotalAlloc - before.TotalAlloc) / 10; perCall > 4096 {
		t.Errorf("%d bytes allocated rejecting a %d-byte chunk", perCall, len(b))
	}
}

// pmuFrequency returns one PMU channel: µs-resolution 60 Hz timestamps with occasional
// 1 µs clock-servo jitter and a frequency near 60 Hz reported to the mHz.
func pmuFrequency(r *rand.Rand, n int) series.Points {
	var p series.Points
	start := int64(1_700_000_000) * 1e9
	f := 60.0
	for k := range n {
		us := (int64(k)*1_000_000 + 30) / 60
		if r.IntN(10) == 0 {
			us += int64(r.IntN(3)) - 1
		}
		f += (60-f)*0.01 + r.NormFloat64()*0.0005
		p.AppendFloat(start+us*1000, math.Round(f*1000)/1000)
	}
	return p
}

func TestCompressesPMU(t *testing.T) {
	p := pmuFrequency(rand.New(rand.NewPCG(5, 6)), 600)
	b := roundTrip(t, p)
	perPoint := float64(len(b)) / float64(p.Len())
	t.Logf("600 PMU frequency points: %d bytes, %.3f B/point", len(b), perPoint)
	if perPoint > 1.5 {
		t.Errorf("%.3f B/point; want <= 1.5", perPoint)
	}
}

func BenchmarkEncodePMU(b *testing.B) {
	p := pmuFrequency(rand.New(rand.NewPCG(5, 6)), 600)
	var e Encoder
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = e.Encode(buf[:0], p)
	}
	b.ReportMetric(float64(len(buf))/float64(p.Len()), "B/point")
}

func BenchmarkDecodePMU(b *testing.B) {
	p := pmuFrequency(rand.New(rand.NewPCG(5, 6)), 600)
	buf, _ := Encode(nil, p)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 20 {
		b, _ := Encode(nil, randomPoints(r))
		f.Add(b)
	}
	for range 10 {
		b, _ := Encode(nil, randomSingles(r))
		f.Add(b)
	}
	f.Add([]byte{version, byte(series.String), 3, 0, 0, 1, 0, 0, 1, 0, 0})
	f.Add([]byte{1, byte(series.String), 3, 0, 0, 1, 0, 0, 1, 0, 0})
	// Version-1 chunks, as stores hold them.
	for _, b := range goldenV1(f).Chunks[:20] {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		if verr := p.Valid(); verr != nil || !p.Sorted() || p.Len() == 0 {
			t.Fatalf("decoded a bad batch: %v", verr)
		}
		// What decodes must re-encode to something that decodes the same.
		again, err := Encode(nil, p)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		q, err := Decode(again)
		if err != nil || !equalBits(p, q) {
			t.Fatalf("re-encoded chunk differs: %v", err)
		}
	})
}

func FuzzRoundTrip(f *testing.F) {
	f.Add(uint8(1), []byte("\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f"), int64(0), int64(16_666_667))
	f.Add(uint8(2), []byte("\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00\x00\x00"), int64(math.MinInt64), int64(1))
	f.Add(uint8(3), []byte("ok\x00ok\x00fault\x00"), int64(-1e18), int64(1e9))
	f.Add(uint8(4), []byte("\x00\x00\x00\x00\x00\x00\x80\x42\x00\x00\x00\x00\x01\x00\x80\x42"), int64(1e18), int64(16_666_667))
	f.Fuzz(func(t *testing.T, typ uint8, data []byte, start, step int64) {
		// Build a valid batch from the fuzzer's bytes: 8 bytes per point, a timestamp
		// delta from the first 2 bytes, a value from the rest.
		p := series.Points{Type: series.Type(1 + typ%3)}
		ts := start
		for i := 0; i+8 <= len(data); i += 8 {
			w := data[i : i+8]
			u := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
				uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
			d := step + int64(u&0xffff) - 0x8000
			if d < 1 {
				d = 1
			}
			if i > 0 {
				if ts > math.MaxInt64-d {
					break
				}
				ts += d
			}
			p.T = append(p.T, ts)
			switch p.Type {
			case series.Float:
				if typ&4 != 0 { // a float32 (C37.118 floating point), widened
					p.F = append(p.F, math.Float64frombits(widen(uint32(u>>32))))
				} else {
					p.F = append(p.F, math.Float64frombits(u))
				}
			case series.Int:
				p.I = append(p.I, int64(u))
			case series.String:
				p.S = append(p.S, string(w[:u%9]))
			}
		}
		if p.Len() == 0 {
			return
		}
		roundTrip(t, p)
	})
}

// BenchmarkEncodeBlock encodes what a store's unsealed block holds under a /write
// load (scripts/bench-http): 90 points of a 60 Hz series stamped in ns, values with
// two decimals, with the full mode search (full) and with Encoder.Quick (quick).
func BenchmarkEncodeBlock(b *testing.B) {
	p := series.Points{Type: series.Float}
	for k := 0; k < 90; k++ {
		p.T = append(p.T, 1_700_000_000_000_000_000+int64(k)*1e9/60)
		p.F = append(p.F, float64(k%1000)*0.37+17)
	}
	for _, quick := range []bool{false, true} {
		name := map[bool]string{false: "full", true: "quick"}[quick]
		b.Run(name, func(b *testing.B) {
			e := Encoder{Quick: quick}
			var dst []byte
			var err error
			for i := 0; i < b.N; i++ {
				if dst, err = e.Encode(dst[:0], p); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(dst))/float64(p.Len()), "B/point")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*p.Len()), "ns/point")
		})
	}
}
