package chunk

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tsdht/tsdht/tsdb/series"
)

// prefixOf returns one point of type t before any chunk's: what Append appends to.
func prefixOf(t series.Type) series.Points {
	var p series.Points
	switch t {
	case series.Float:
		p.AppendFloat(-1<<62, 1.5)
	case series.Int:
		p.AppendInt(-1<<62, 7)
	case series.String:
		p.AppendString(-1<<62, "x")
	}
	return p
}

// FuzzDecoderAppend: a Decoder that appends a chunk to points already held gives those
// points and then what Decode gives, and on an error leaves the points as they were,
// whatever the Decoder decoded before.
func FuzzDecoderAppend(f *testing.F) {
	r := rand.New(rand.NewPCG(9, 10))
	for range 20 {
		b, _ := Encode(nil, randomPoints(r))
		f.Add(b, uint8(series.Float))
	}
	for range 10 {
		b, _ := Encode(nil, randomSingles(r))
		f.Add(b, uint8(series.Int))
	}
	for _, b := range goldenV1(f).Chunks[:10] {
		f.Add(b, uint8(series.String))
	}
	var d Decoder // shared: its scratch carries over from one input to the next
	f.Fuzz(func(t *testing.T, b []byte, pt uint8) {
		want, werr := Decode(b)
		typ := series.Type(pt%3 + 1)
		p := prefixOf(typ)
		before := prefixOf(typ)
		err := d.Append(&p, b)
		switch {
		case werr != nil && err == nil:
			t.Fatalf("Append took a chunk Decode refuses (%v)", werr)
		case err != nil && !errors.Is(err, ErrCorrupt):
			t.Fatalf("error does not wrap ErrCorrupt: %v", err)
		case err != nil:
			if werr == nil && want.Type == typ {
				t.Fatalf("Append refused a chunk Decode takes: %v", err)
			}
			if !samePoints(p, before) {
				t.Fatalf("a failed Append changed the points to %d of them", p.Len())
			}
		default:
			if want.Type != typ {
				t.Fatalf("Append put a %v chunk after %v points", want.Type, typ)
			}
			again := series.Concat(before, want)
			if !samePoints(p, again) {
				t.Fatalf("Append gave %d points, not the %d held and then the chunk's", p.Len(), again.Len())
			}
		}
		// Into empty points: what Decode gives.
		var q series.Points
		if err := d.Append(&q, b); (err == nil) != (werr == nil) || err == nil && !samePoints(q, want) {
			t.Fatalf("Append to nothing: %d points, %v; Decode: %d points, %v", q.Len(), err, want.Len(), werr)
		}
	})
}

// TestDecoderAppendsBlocks: the blocks of a run appended one after another are the run.
func TestDecoderAppendsBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	var all series.Points
	var d Decoder
	var got series.Points
	for range 30 {
		p := randomPoints(r)
		if p.Type != series.Float {
			continue
		}
		off := int64(0)
		if all.Len() > 0 {
			off = all.T[all.Len()-1] - p.T[0] + 1
		}
		for i := range p.T {
			p.T[i] += off
		}
		b, err := Encode(nil, p)
		if err != nil {
			t.Fatal(err)
		}
		all = series.Concat(all, p)
		if err := d.Append(&got, b); err != nil {
			t.Fatal(err)
		}
	}
	if all.Len() == 0 || !samePoints(got, all) {
		t.Fatalf("appended %d points, want the %d encoded", got.Len(), all.Len())
	}
}

// samePoints: the same type, timestamps and values, float values bit for bit (NaN too).
func samePoints(a, b series.Points) bool {
	bits := func(f []float64) []uint64 {
		out := make([]uint64, len(f))
		for i, v := range f {
			out[i] = math.Float64bits(v)
		}
		return out
	}
	return a.Type == b.Type && slices.Equal(a.T, b.T) && slices.Equal(bits(a.F), bits(b.F)) &&
		slices.Equal(a.I, b.I) && slices.Equal(a.S, b.S)
}
