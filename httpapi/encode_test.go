package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/series"
)

// viaEncodingJSON is what the answer was before answerWriter, and what InfluxDB
// itself does: the values boxed, times formatted by formatTimes, encoding/json.
func viaEncodingJSON(t testing.TB, results []*result, epoch string) []byte {
	t.Helper()
	copies := make([]*result, 0, len(results))
	for _, res := range results {
		c := *res
		c.Series = nil
		for _, s := range res.Series {
			r := *s
			if r.table != nil {
				r.Values, r.table = r.table.values(), nil
			} else {
				r.Values = make([][]any, len(s.Values))
				for i, v := range s.Values {
					r.Values[i] = append([]any(nil), v...)
				}
			}
			c.Series = append(c.Series, &r)
		}
		formatTimes(&c, epoch)
		copies = append(copies, &c)
	}
	var b bytes.Buffer
	if err := json.NewEncoder(&b).Encode(map[string]any{"results": copies}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func viaAnswerWriter(results []*result, epoch string) []byte {
	var b bytes.Buffer
	unit, _ := epochUnit(epoch)
	aw := newAnswerWriter(&b, unit)
	aw.answer(results)
	aw.release()
	return b.Bytes()
}

func sameAnswer(t *testing.T, what string, results []*result) {
	t.Helper()
	for _, epoch := range []string{"", "ns", "u", "ms", "s", "m", "h"} {
		want := viaEncodingJSON(t, results, epoch)
		if got := viaAnswerWriter(results, epoch); !bytes.Equal(got, want) {
			t.Fatalf("%s, epoch %q:\n got %.2000s\nwant %.2000s", what, epoch, got, want)
		}
	}
}

// awkwardTimes are times whose RFC 3339 form has every shape: before the epoch,
// on and off minute boundaries, with fractions of every length.
var awkwardTimes = []int64{
	-1, -59_999_999_999, -60_000_000_000, -60_000_000_001, 0, 1, 999_999_999, 1_000_000_000, 59_999_999_999,
	60_000_000_000, 1_700_000_000_123_456_789, 1_700_000_000_100_000_000, 1_700_000_059_000_000_010,
	time.Date(2262, 4, 11, 23, 47, 16, 0, time.UTC).UnixNano(), math.MinInt64 + 1, math.MaxInt64,
}

var awkwardFloats = []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 59.95, 1e20, 1e21, -1e21, 1e-6, 1e-7, 9.999e-7,
	123456789012345678, math.MaxFloat64, math.SmallestNonzeroFloat64, 1.0 / 3, 2.5e-10, -4.2e300}

var awkwardStrings = []string{"", "plain", `say "hi"`, `back\slash`, "<b>&amp;</b>", "tab\there\nnewline\r\x00\x1f\x7f",
	"héllo wörld", "line\u2028sep\u2029", "bad\xff\xfeutf8", "emoji 🙂", "\b\f"}

func TestAnswerWriterMatchesEncodingJSON(t *testing.T) {
	var fl, in, st series.Points
	fl.Type, in.Type, st.Type = series.Float, series.Int, series.String
	for i, tm := range awkwardTimes {
		fl.T, in.T, st.T = append(fl.T, tm), append(in.T, tm), append(st.T, tm)
		fl.F = append(fl.F, awkwardFloats[i%len(awkwardFloats)])
		in.I = append(in.I, int64(i*i)-7)
		st.S = append(st.S, awkwardStrings[i%len(awkwardStrings)])
	}
	for _, f := range awkwardFloats {
		fl.T = append(fl.T, 0)
		fl.F = append(fl.F, f)
	}
	one := func(p *series.Points) *rawTable { return newRawTable(p.T, []rawColumn{{pts: p}}) }
	// Three columns of different types, rows where some have no value.
	times := []int64{awkwardTimes[0], awkwardTimes[3], awkwardTimes[5], awkwardTimes[11]}
	multi := newRawTable(times, []rawColumn{
		{pts: &fl, at: []int32{0, -1, 2, 3}},
		{pts: &in, at: []int32{-1, 1, 2, -1}},
		{pts: &st, at: []int32{4, 5, -1, 10}},
	})
	desc := one(&fl)
	desc.reverse()
	cols := []string{"time", "v"}
	tags := map[string]string{"host": "a<b", "dc": "é", "zone": "x\"y"}
	for _, c := range []struct {
		what string
		res  []*result
	}{
		{"float column", []*result{{Series: []*row{{Name: "m", Columns: cols, table: one(&fl)}}}}},
		{"int column", []*result{{Series: []*row{{Name: "m", Tags: tags, Columns: cols, table: one(&in)}}}}},
		{"string column", []*result{{Series: []*row{{Name: "<m>", Columns: cols, table: one(&st)}}}}},
		{"three columns", []*result{{Series: []*row{{Name: "m", Columns: []string{"time", "a", "b", "c"}, table: multi}}}}},
		{"descending, sliced", []*result{{Series: []*row{{Name: "m", Columns: cols, table: desc.slice(2, 9)}}}}},
		{"empty table", []*result{{Series: []*row{{Name: "m", Columns: cols, table: one(&series.Points{})}}}}},
		{"boxed values", []*result{{Series: []*row{{Columns: []string{"time", "a", "b", "c", "d", "e"}, Partial: true, Values: [][]any{
			{tsValue(awkwardTimes[11]), 1.5, int64(-3), "s<", true, nil},
			{tsValue(-1), math.Copysign(0, -1), 7, "", false, []string{"x"}},
			{"autogen", "0s", "168h0m0s", 1, true, 1e-9},
		}}}}}},
		{"nil columns, no values", []*result{{Series: []*row{{Name: "m"}}}}},
		{"errors and statements", []*result{{StatementID: 0, Err: "bad <query>"}, {StatementID: 1, Partial: true,
			Series: []*row{{Name: "m", Columns: cols, table: one(&in)}}}, {StatementID: 2}}},
		{"no results", []*result{}},
	} {
		sameAnswer(t, c.what, c.res)
	}
	// Chunks of a table answer as chunks of its values do.
	res := &result{Series: []*row{{Name: "m", Columns: cols, table: one(&fl)}, {Name: "n", Columns: cols, table: desc}}}
	for _, part := range chunk(res, 4) {
		sameAnswer(t, "chunk", []*result{part})
	}
}

func TestAnswerWriterRandomValues(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var p series.Points
	p.Type = series.Float
	for i := 0; i < 20_000; i++ {
		f := math.Float64frombits(rng.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		if i%2 == 0 {
			f = math.Round(rng.NormFloat64()*1e4) / 1e3
		}
		p.T = append(p.T, rng.Int63()-rng.Int63())
		p.F = append(p.F, f)
	}
	sameAnswer(t, "random floats and times", []*result{{Series: []*row{{Name: "m", Columns: []string{"time", "v"},
		table: newRawTable(p.T, []rawColumn{{pts: &p}})}}}})
	// Ascending times, many within one second or one day, as a series holds them.
	tm := int64(-1e15)
	for i := range p.T {
		tm += rng.Int63n(int64([]float64{1e9 / 60, 3e9, 1e14}[rng.Intn(3)]))
		p.T[i] = tm
	}
	sameAnswer(t, "ascending times", []*result{{Series: []*row{{Name: "m", Columns: []string{"time", "v"},
		table: newRawTable(p.T, []rawColumn{{pts: &p}})}}}})
}

// NaN and the infinities, which encoding/json refuses (failing the whole answer),
// are written as null.
func TestAnswerWriterNonFinite(t *testing.T) {
	p := series.Points{Type: series.Float, T: []int64{0, 1, 2}, F: []float64{math.NaN(), math.Inf(1), math.Inf(-1)}}
	got := viaAnswerWriter([]*result{{Series: []*row{{Name: "m", Columns: []string{"time", "v"},
		table: newRawTable(p.T, []rawColumn{{pts: &p}})}}}}, "ns")
	if want := `{"results":[{"statement_id":0,"series":[{"name":"m","columns":["time","v"],"values":[[0,null],[1,null],[2,null]]}]}]}` + "\n"; string(got) != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
}

func FuzzAnswerWriter(f *testing.F) {
	for i, tm := range awkwardTimes {
		f.Add(tm, awkwardFloats[i%len(awkwardFloats)], awkwardStrings[i%len(awkwardStrings)], int64(i))
	}
	f.Fuzz(func(t *testing.T, tm int64, v float64, s string, n int64) {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return
		}
		fl := series.Points{Type: series.Float, T: []int64{tm}, F: []float64{v}}
		in := series.Points{Type: series.Int, T: []int64{tm}, I: []int64{n}}
		st := series.Points{Type: series.String, T: []int64{tm}, S: []string{s}}
		sameAnswer(t, "fuzzed", []*result{{Err: s, Series: []*row{{Name: s, Tags: map[string]string{s: s}, Columns: []string{"time", s, "i", "s"},
			table: newRawTable([]int64{tm}, []rawColumn{{pts: &fl}, {pts: &in}, {pts: &st}})}}}})
	})
}

func sameFloat(t *testing.T, f float64) {
	t.Helper()
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return
	}
	want, _ := json.Marshal(f)
	if got := appendJSONFloat(nil, f); !bytes.Equal(got, want) {
		t.Fatalf("%v (%#x): got %s, want %s", f, math.Float64bits(f), got, want)
	}
}

// Decimals of every length and scale, the shapes appendJSONFloat writes without
// strconv, and their neighbours, which it must not.
func TestJSONFloatDecimals(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for i := 0; i < 200_000; i++ {
		n := rng.Int63n(int64(math.Pow10(1 + rng.Intn(17))))
		if rng.Intn(2) == 0 {
			n = -n
		}
		f := float64(n) / math.Pow10(rng.Intn(9))
		sameFloat(t, f)
		sameFloat(t, math.Nextafter(f, math.Inf(1)))
		sameFloat(t, float64(float32(f)))
	}
}

func FuzzJSONFloat(f *testing.F) {
	for _, v := range awkwardFloats {
		f.Add(v)
	}
	f.Add(59.95)
	f.Add(float64(float32(59.95)))
	f.Fuzz(func(t *testing.T, v float64) { sameFloat(t, v) })
}

// failingWriter fails every write, as a connection whose client went away.
type failingWriter struct{ writes int }

func (f *failingWriter) Write(p []byte) (int, error) {
	f.writes++
	return 0, io.ErrClosedPipe
}

// Once a write fails, the rest of a long answer is not encoded.
func TestAnswerWriterStopsWhenTheClientLeaves(t *testing.T) {
	p := series.Points{Type: series.Float}
	for i := 0; i < 100_000; i++ {
		p.T, p.F = append(p.T, int64(i)*1e9), append(p.F, float64(i)/10)
	}
	var w failingWriter
	aw := newAnswerWriter(&w, 0)
	aw.answer([]*result{{Series: []*row{{Name: "m", Columns: []string{"time", "v"}, table: newRawTable(p.T, []rawColumn{{pts: &p}})}}}})
	if err := aw.release(); err != io.ErrClosedPipe || w.writes != 1 {
		t.Fatalf("release: %v after %d writes, want %v after 1", err, w.writes, io.ErrClosedPipe)
	}
}

// mergeSets lines the rows of several tag sets up by time, at equal times in the order
// InfluxDB's heap leaves them (rawOrder: here the set without the tag first, since a
// null tag value does not order), with each set's tag value (none where the set lacks the tag); a field of
// different types in different sets is left to the boxed path.
func TestMergeSets(t *testing.T) {
	cols := []column{{name: "host", field: "host", tag: true}, {name: "v", field: "v"}, {name: "n", field: "n"}}
	a := series.Points{Type: series.Float, T: []int64{10, 20, 30}, F: []float64{1.5, 2.5, 3.5}}
	an := series.Points{Type: series.Int, T: []int64{20}, I: []int64{7}}
	b := series.Points{Type: series.Float, T: []int64{5, 20}, F: []float64{-1, -2}}
	sets := []tagSet{{tags: map[string]string{"host": "a"}}, {tags: map[string]string{}}}
	tables := []*rawTable{
		newRawTable(a.T, []rawColumn{{pts: &series.Points{}, at: []int32{-1, -1, -1}}, {pts: &a, at: []int32{0, 1, 2}}, {pts: &an, at: []int32{-1, 0, -1}}}),
		newRawTable(b.T, []rawColumn{{pts: &series.Points{}, at: []int32{-1, -1}}, {pts: &b, at: []int32{0, 1}}, {pts: &series.Points{}, at: []int32{-1, -1}}}),
	}
	m, ok := mergeSets(cols, sets, tables, false, false)
	if !ok {
		t.Fatal("mergeSets refused fields of one type")
	}
	want := [][]any{
		{tsValue(5), nil, -1.0, nil},
		{tsValue(10), "a", 1.5, nil},
		{tsValue(20), nil, -2.0, nil},
		{tsValue(20), "a", 2.5, int64(7)},
		{tsValue(30), "a", 3.5, nil},
	}
	if got := m.values(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("merged\n got %v\nwant %v", got, want)
	}
	// One set's rows need no merging; a tag it lacks is null.
	for _, one := range []struct {
		set  tagSet
		host any
	}{{sets[0], "a"}, {sets[1], nil}} {
		tb := newRawTable(a.T, []rawColumn{{pts: &series.Points{}, at: []int32{-1, -1, -1}}, {pts: &a}, {pts: &an, at: []int32{-1, 0, -1}}})
		m, ok := mergeSets(cols, []tagSet{one.set}, []*rawTable{tb}, false, false)
		want := [][]any{{tsValue(10), one.host, 1.5, nil}, {tsValue(20), one.host, 2.5, int64(7)}, {tsValue(30), one.host, 3.5, nil}}
		if got := m.values(); !ok || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("one set, %v\n got %v\nwant %v", ok, got, want)
		}
	}
	bi := series.Points{Type: series.Int, T: []int64{5}, I: []int64{1}}
	tables[1] = newRawTable(bi.T, []rawColumn{{pts: &series.Points{}, at: []int32{-1}}, {pts: &bi}, {pts: &series.Points{}, at: []int32{-1}}})
	if _, ok := mergeSets(cols, sets, tables, false, false); ok {
		t.Fatal("mergeSets merged a field of floats with one of integers")
	}
}

// Integer times written from the last one's digits (epochInt) read as formatted whole:
// steps within and across a hundred, a carry into a new digit, small, negative and
// descending times.
func TestAnswerWriterEpochDigits(t *testing.T) {
	var p series.Points
	p.Type = series.Float
	add := func(ms int64) {
		p.T = append(p.T, ms*1e6)
		p.F = append(p.F, float64(len(p.T)))
	}
	for _, start := range []int64{-250, 0, 7, 95, 9_990, 99_983, 1_795_941_230_000} {
		ms := start
		for i := range 40 {
			add(ms)
			ms += []int64{16, 17, 1, 0, 99, 100, 150}[i%7]
		}
		add(ms - 3) // descending
		add(ms - 250)
	}
	want := viaEncodingJSON(t, []*result{{Series: []*row{{Name: "m", Columns: []string{"time", "v"},
		table: newRawTable(p.T, []rawColumn{{pts: &p}})}}}}, "ms")
	if got := viaAnswerWriter([]*result{{Series: []*row{{Name: "m", Columns: []string{"time", "v"},
		table: newRawTable(p.T, []rawColumn{{pts: &p}})}}}}, "ms"); !bytes.Equal(got, want) {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// A hint of decimal places carried from value to value (a series' values mostly have
// as many) never changes what is written: decimals of 0 to 8 places in random order,
// and their neighbours, against encoding/json.
func TestJSONFloatPlacesHint(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	places := 0
	for i := 0; i < 200_000; i++ {
		k := rng.Intn(9)
		if i%4 != 0 {
			k = 5 // mostly one number of places, as a series
		}
		f := float64(rng.Int63n(1e12)-5e11) / math.Pow(10, float64(k))
		switch rng.Intn(5) {
		case 0:
			f = math.Nextafter(f, math.Inf(1))
		case 1:
			f *= 10
		}
		want, _ := json.Marshal(f)
		if got := appendJSONFloatHint(nil, f, &places); !bytes.Equal(got, want) {
			t.Fatalf("%v after a hint of %d places: got %s, want %s", f, places, got, want)
		}
	}
}
