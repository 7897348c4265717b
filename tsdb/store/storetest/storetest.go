// Package storetest owns the conformance suite every store.Store must pass: the
// contract of store.go and DESIGN.md's data model, checked the same way for every
// engine so that the in-memory and on-disk stores cannot drift apart.
package storetest

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
)

// Run runs the suite. open must return a new, empty store each time it is called; the
// suite closes every store it opens.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	for _, c := range append(cases, statsCases...) {
		t.Run(c.name, func(t *testing.T) {
			s := open(t)
			closed := false
			defer func() {
				if !closed {
					if err := s.Close(); err != nil {
						t.Errorf("Close: %v", err)
					}
				}
			}()
			c.run(t, s, func() { closed = true })
		})
	}
}

type testCase struct {
	name string
	// run exercises s; it calls markClosed if it closed s itself.
	run func(t *testing.T, s store.Store, markClosed func())
}

// Fixed shards for the cases. refB shares refA's ID but not its quantum; refC is
// another shard altogether.
var (
	refA = ref("a", 1_700_000_000)
	refB = store.ShardRef{ID: refA.ID, Start: refA.Start + 10}
	refC = ref("c", 1_700_000_010)
)

func ref(key string, start int64) store.ShardRef {
	return store.ShardRef{ID: quanta.ShardID(quanta.QFI, key, start), Start: start}
}

// sec is the first nanosecond of refA's quantum.
const sec = int64(1_700_000_000) * 1e9

func floats(ts []int64, vs ...float64) series.Points {
	return series.Points{Type: series.Float, T: ts, F: vs}
}

func ints(ts []int64, vs ...int64) series.Points {
	return series.Points{Type: series.Int, T: ts, I: vs}
}

func strs(ts []int64, vs ...string) series.Points {
	return series.Points{Type: series.String, T: ts, S: vs}
}

func tsList(ts ...int64) []int64 { return ts }

// mustAppend appends and fails the test on error.
func mustAppend(t *testing.T, s store.Store, r store.ShardRef, key string, p series.Points) {
	t.Helper()
	if err := s.Append(r, key, p); err != nil {
		t.Fatalf("Append(%s, %d points): %v", key, p.Len(), err)
	}
}

// mustRead reads [from, to) and fails the test on error.
func mustRead(t *testing.T, s store.Store, r store.ShardRef, key string, from, to int64) (series.Points, bool) {
	t.Helper()
	p, held, err := s.Read(r, key, from, to)
	if err != nil {
		t.Fatalf("Read(%s, [%d, %d)): %v", key, from, to, err)
	}
	if verr := p.Valid(); verr != nil {
		t.Fatalf("Read(%s) returned an invalid batch: %v", key, verr)
	}
	if !p.Sorted() {
		t.Fatalf("Read(%s) returned unsorted or duplicate timestamps: %v", key, p.T)
	}
	return p, held
}

// readAll reads every point of key in r.
func readAll(t *testing.T, s store.Store, r store.ShardRef, key string) (series.Points, bool) {
	t.Helper()
	return mustRead(t, s, r, key, math.MinInt64, math.MaxInt64)
}

// wantPoints compares timestamps and values bit for bit (NaN payloads included).
func wantPoints(t *testing.T, got, want series.Points) {
	t.Helper()
	if msg := diff(got, want); msg != "" {
		t.Fatalf("%s\n got  %s\n want %s", msg, show(got), show(want))
	}
}

func diff(got, want series.Points) string {
	if got.Len() != want.Len() {
		return fmt.Sprintf("%d points, want %d", got.Len(), want.Len())
	}
	if got.Len() > 0 && got.Type != want.Type {
		return fmt.Sprintf("type %v, want %v", got.Type, want.Type)
	}
	for i := range want.T {
		if got.T[i] != want.T[i] {
			return fmt.Sprintf("point %d at t=%d, want t=%d", i, got.T[i], want.T[i])
		}
		same := true
		switch want.Type {
		case series.Float:
			same = math.Float64bits(got.F[i]) == math.Float64bits(want.F[i])
		case series.Int:
			same = got.I[i] == want.I[i]
		case series.String:
			same = got.S[i] == want.S[i]
		}
		if !same {
			return fmt.Sprintf("point %d (t=%d) has value %q, want %q", i, want.T[i], got.Value(i), want.Value(i))
		}
	}
	return ""
}

func show(p series.Points) string {
	if p.Len() > 8 {
		return fmt.Sprintf("%d %v points, t=%d..%d", p.Len(), p.Type, p.T[0], p.T[p.Len()-1])
	}
	var b strings.Builder
	for i := range p.T {
		fmt.Fprintf(&b, "%d:%.20s ", p.T[i], p.Value(i))
	}
	return b.String()
}

// walker is what a store may offer tsdb's repairer (repair.Walker): the pairs it holds,
// and dropping one.
type walker interface {
	Pairs(fn func(ref store.ShardRef, key string) bool) error
	Delete(ref store.ShardRef, key string) error
}

func mustReadAll(t *testing.T, s store.Store, r store.ShardRef, key string) series.Points {
	t.Helper()
	p, _ := readAll(t, s, r, key)
	return p
}

func wantStats(t *testing.T, s store.Store, want store.Stats) {
	t.Helper()
	if got := s.Stats().Counts(); got != want {
		t.Fatalf("Stats counts = %+v, want %+v", got, want)
	}
}

var cases = []testCase{
	{"OutOfOrderAppendsAreSorted", func(t *testing.T, s store.Store, _ func()) {
		mustAppend(t, s, refA, "k", floats(tsList(sec+30, sec+10, sec+20), 3, 1, 2))
		mustAppend(t, s, refA, "k", floats(tsList(sec+5, sec+25), 0.5, 2.5))
		got, held := readAll(t, s, refA, "k")
		if !held {
			t.Fatal("held = false for a written shard")
		}
		wantPoints(t, got, floats(tsList(sec+5, sec+10, sec+20, sec+25, sec+30), 0.5, 1, 2, 2.5, 3))
	}},
	{"DuplicateTimestampKeepsLastValue", func(t *testing.T, s store.Store, _ func()) {
		mustAppend(t, s, refA, "k", ints(tsList(sec+1, sec+2, sec+1, sec+3, sec+2), 10, 20, 11, 30, 21))
		got, _ := readAll(t, s, refA, "k")
		wantPoints(t, got, ints(tsList(sec+1, sec+2, sec+3), 11, 21, 30))
		mustAppend(t, s, refA, "k", ints(tsList(sec+2, sec+4), 22, 40))
		mustAppend(t, s, refA, "k", ints(tsList(sec+2), 23))
		got, _ = readAll(t, s, refA, "k")
		wantPoints(t, got, ints(tsList(sec+1, sec+2, sec+3, sec+4), 11, 23, 30, 40))
		wantStats(t, s, store.Stats{Shards: 1, Series: 1, Points: 4})
	}},
	{"TrimIsHalfOpenAndExact", func(t *testing.T, s store.Store, _ func()) {
		var all series.Points
		for i := int64(0); i < 10; i++ {
			all.AppendInt(sec+i*100, i)
		}
		mustAppend(t, s, refA, "k", all)
		for _, r := range []struct{ from, to int64 }{
			{sec + 100, sec + 300}, // both edges on points
			{sec + 101, sec + 300}, // from just after a point
			{sec + 100, sec + 301}, // to just after a point
			{sec + 99, sec + 299},  // edges just before points
			{sec - 1, sec + 1},     // first point only
			{sec + 900, sec + 901}, // last point only
			{sec + 900, sec + 900}, // empty range on a point
			{sec + 901, math.MaxInt64},
			{math.MinInt64, sec},
			{math.MinInt64, math.MaxInt64},
		} {
			got, held := mustRead(t, s, refA, "k", r.from, r.to)
			if !held {
				t.Fatalf("[%d, %d): held = false", r.from, r.to)
			}
			wantPoints(t, got, all.Trim(r.from, r.to))
		}
		// from > to is an error or an empty answer, never points.
		if got, _, err := s.Read(refA, "k", sec+300, sec+100); err == nil && got.Len() != 0 {
			t.Fatalf("from > to returned %d points", got.Len())
		}
	}},
	{"HeldOnlyForStoredSeriesInStoredShard", func(t *testing.T, s store.Store, _ func()) {
		if got, held := readAll(t, s, refA, "k"); held || got.Len() != 0 {
			t.Fatalf("empty store: held=%v, %d points", held, got.Len())
		}
		mustAppend(t, s, refA, "k", floats(tsList(sec), 1))
		if _, held := readAll(t, s, refA, "other"); held {
			t.Fatal("held = true for an unknown series in a held shard")
		}
		if _, held := readAll(t, s, refC, "k"); held {
			t.Fatal("held = true for an unknown shard")
		}
		if _, held := readAll(t, s, refB, "k"); held {
			t.Fatal("held = true for another quantum with the same ID")
		}
		// Held is about the shard, not the range: an empty range of a held shard is held.
		if got, held := mustRead(t, s, refA, "k", sec+1, sec+2); !held || got.Len() != 0 {
			t.Fatalf("empty range of a held shard: held=%v, %d points", held, got.Len())
		}
	}},
	{"CollidingShardIDsKeepSeriesApart", func(t *testing.T, s store.Store, _ func()) {
		// Two series whose 80-bit halves collide land in the same shard ID.
		mustAppend(t, s, refA, "pmu1/f", floats(tsList(sec+1, sec+2), 60.01, 60.02))
		mustAppend(t, s, refA, "pmu1/fx", floats(tsList(sec+2, sec+3), -1, -2))
		mustAppend(t, s, refA, "pmu1", ints(tsList(sec+2), 7))
		got, _ := readAll(t, s, refA, "pmu1/f")
		wantPoints(t, got, floats(tsList(sec+1, sec+2), 60.01, 60.02))
		got, _ = readAll(t, s, refA, "pmu1/fx")
		wantPoints(t, got, floats(tsList(sec+2, sec+3), -1, -2))
		got, _ = readAll(t, s, refA, "pmu1")
		wantPoints(t, got, ints(tsList(sec+2), 7))
		wantStats(t, s, store.Stats{Shards: 3, Series: 3, Points: 5})
	}},
	{"QuantaWithTheSameIDStayApart", func(t *testing.T, s store.Store, _ func()) {
		mustAppend(t, s, refA, "k", ints(tsList(sec+1), 1))
		mustAppend(t, s, refB, "k", ints(tsList(sec+1), 2))
		got, _ := readAll(t, s, refA, "k")
		wantPoints(t, got, ints(tsList(sec+1), 1))
		got, _ = readAll(t, s, refB, "k")
		wantPoints(t, got, ints(tsList(sec+1), 2))
		wantStats(t, s, store.Stats{Shards: 2, Series: 1, Points: 2})
	}},
	{"TypeFixedByFirstWrite", func(t *testing.T, s store.Store, _ func()) {
		mustAppend(t, s, refA, "k", floats(tsList(sec+1), 1))
		err := s.Append(refA, "k", ints(tsList(sec+2, sec+3), 2, 3))
		if !errors.Is(err, series.ErrTypeMismatch) {
			t.Fatalf("int write into a float series: err = %v, want ErrTypeMismatch", err)
		}
		// Refused into another shard too, and that shard does not appear.
		err = s.Append(refC, "k", strs(tsList(sec+2), "x"))
		if !errors.Is(err, series.ErrTypeMismatch) {
			t.Fatalf("string write into a float series: err = %v", err)
		}
		if _, held := readAll(t, s, refC, "k"); held {
			t.Fatal("a refused batch created a shard")
		}
		got, _ := readAll(t, s, refA, "k")
		wantPoints(t, got, floats(tsList(sec+1), 1))
		if typ, ok := s.SeriesType("k"); !ok || typ != series.Float {
			t.Fatalf("SeriesType = %v, %v", typ, ok)
		}
		wantStats(t, s, store.Stats{Shards: 1, Series: 1, Points: 1})
	}},
	{"DeclareSeriesQuantum", func(t *testing.T, s store.Store, _ func()) {
		// The first declaration fixes the quantum; later ones get it back.
		d, err := s.DeclareSeries("hourly", store.Decl{Type: series.Float, Quantum: 3600})
		if err != nil || d.Quantum != 3600 || d.NoQuantum {
			t.Fatalf("first DeclareSeries = %+v, %v", d, err)
		}
		if d, err = s.DeclareSeries("hourly", store.Decl{Type: series.Float, Quantum: 60}); err != nil || d.Quantum != 3600 {
			t.Fatalf("second DeclareSeries = %+v, %v; want the first quantum, 3600", d, err)
		}
		// A series an append recorded knows no quantum until a declaration says it.
		mustAppend(t, s, refA, "appended", floats(tsList(sec), 1))
		if d, ok := s.SeriesDecl("appended"); !ok || !d.NoQuantum || d.Type != series.Float {
			t.Fatalf("SeriesDecl of an appended series = %+v, %v; want float with no quantum", d, ok)
		}
		if d, err = s.DeclareSeries("appended", store.Decl{Type: series.Float, Quantum: 600}); err != nil || d.Quantum != 600 || d.NoQuantum {
			t.Fatalf("DeclareSeries of an appended series = %+v, %v; want its quantum recorded", d, err)
		}
		// A type-only declaration leaves a recorded quantum alone.
		if _, err := s.DeclareType("hourly", series.Float); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DeclareSeries("hourly", store.Decl{Type: series.Int, Quantum: 3600}); !errors.Is(err, series.ErrTypeMismatch) {
			t.Fatalf("DeclareSeries of another type: %v; want ErrTypeMismatch", err)
		}
		for key, want := range map[string]quanta.Quantum{"hourly": 3600, "appended": 600} {
			if d, ok := s.SeriesDecl(key); !ok || d.Quantum != want || d.NoQuantum {
				t.Errorf("SeriesDecl(%q) = %+v, %v; want quantum %d", key, d, ok, want)
			}
		}
		if _, ok := s.SeriesDecl("unknown"); ok {
			t.Error("SeriesDecl of an unknown series reports one")
		}
	}},
	{"DeclareType", func(t *testing.T, s store.Store, _ func()) {
		if _, ok := s.SeriesType("k"); ok {
			t.Fatal("SeriesType of an unknown series reports a type")
		}
		if typ, err := s.DeclareType("k", series.String); err != nil || typ != series.String {
			t.Fatalf("first DeclareType = %v, %v", typ, err)
		}
		if typ, err := s.DeclareType("k", series.String); err != nil || typ != series.String {
			t.Fatalf("repeated DeclareType = %v, %v", typ, err)
		}
		typ, err := s.DeclareType("k", series.Int)
		if !errors.Is(err, series.ErrTypeMismatch) || typ != series.String {
			t.Fatalf("conflicting DeclareType = %v, %v; want string and ErrTypeMismatch", typ, err)
		}
		if err := s.Append(refA, "k", ints(tsList(sec), 1)); !errors.Is(err, series.ErrTypeMismatch) {
			t.Fatalf("Append of another type after DeclareType: %v", err)
		}
		mustAppend(t, s, refA, "k", strs(tsList(sec), "on"))
		// Declaring alone makes a series but holds no shard.
		if _, err := s.DeclareType("declared-only", series.Int); err != nil {
			t.Fatal(err)
		}
		if typ, ok := s.SeriesType("declared-only"); !ok || typ != series.Int {
			t.Fatalf("SeriesType after DeclareType = %v, %v", typ, ok)
		}
		wantStats(t, s, store.Stats{Shards: 1, Series: 2, Points: 1})
		if _, err := s.DeclareType("bad", series.Unknown); err == nil {
			t.Fatal("DeclareType accepted the Unknown type")
		}
		if _, ok := s.SeriesType("bad"); ok {
			t.Fatal("a refused declaration recorded a type")
		}
	}},
	{"FloatSpecialValues", func(t *testing.T, s store.Store, _ func()) {
		nanPayload := math.Float64frombits(0x7ff8_0000_dead_beef)
		want := floats(tsList(-sec, -1, 0, 1, 2, 3, 4),
			math.NaN(), nanPayload, math.Inf(1), math.Inf(-1), math.Copysign(0, -1), math.MaxFloat64, math.SmallestNonzeroFloat64)
		mustAppend(t, s, refA, "k", want)
		got, _ := readAll(t, s, refA, "k")
		wantPoints(t, got, want)
	}},
	{"IntExtremesAndNegativeTimestamps", func(t *testing.T, s store.Store, _ func()) {
		// MaxInt64 itself lies beyond every half-open range, so the last point sits just before it.
		want := ints(tsList(math.MinInt64, -sec, -1, 0, math.MaxInt64-1), math.MaxInt64, math.MinInt64, -1, 0, 1)
		mustAppend(t, s, refA, "k", want)
		got, _ := readAll(t, s, refA, "k")
		wantPoints(t, got, want)
		got, _ = mustRead(t, s, refA, "k", math.MinInt64, 0)
		wantPoints(t, got, want.Slice(0, 3))
	}},
	{"Strings", func(t *testing.T, s store.Store, _ func()) {
		big := strings.Repeat("€", series.MaxStringValueLen/3) + "x"
		want := strs(tsList(sec+1, sec+2, sec+3, sec+4), "", big, "Grüße\x00", "")
		mustAppend(t, s, refA, "k", want)
		got, _ := readAll(t, s, refA, "k")
		wantPoints(t, got, want)
		tooBig := strs(tsList(sec+5), strings.Repeat("x", series.MaxStringValueLen+1))
		if err := s.Append(refA, "k", tooBig); err == nil {
			t.Fatal("a string over MaxStringValueLen was accepted")
		}
	}},
	{"RefusesBadInput", func(t *testing.T, s store.Store, _ func()) {
		for name, key := range map[string]string{
			"empty key":   "",
			"long key":    strings.Repeat("k", series.MaxKeyLen+1),
			"invalid key": "\xff\xfe",
		} {
			if err := s.Append(refA, key, floats(tsList(sec), 1)); err == nil {
				t.Errorf("%s accepted by Append", name)
			}
			if _, err := s.DeclareType(key, series.Float); err == nil {
				t.Errorf("%s accepted by DeclareType", name)
			}
		}
		bad := series.Points{Type: series.Float, T: tsList(sec, sec+1), F: []float64{1}}
		if err := s.Append(refA, "k", bad); err == nil {
			t.Error("columns of different lengths accepted")
		}
		// The longest valid key works, and an empty batch is a no-op that declares nothing.
		mustAppend(t, s, refA, strings.Repeat("k", series.MaxKeyLen), floats(tsList(sec), 1))
		mustAppend(t, s, refA, "empty", series.Points{})
		if _, ok := s.SeriesType("empty"); ok {
			t.Error("an empty batch declared a type")
		}
		wantStats(t, s, store.Stats{Shards: 1, Series: 1, Points: 1})
	}},
	{"BatchesAreNotAliased", func(t *testing.T, s store.Store, _ func()) {
		in := ints(tsList(sec+2, sec+1), 2, 1)
		mustAppend(t, s, refA, "k", in)
		if in.T[0] != sec+2 || in.I[0] != 2 {
			t.Fatal("Append reordered the caller's batch")
		}
		in.T[0], in.I[0] = sec+9, 9 // the caller reuses its buffers
		got, _ := readAll(t, s, refA, "k")
		got.I[0] = 99 // and scribbles on what it read
		again, _ := readAll(t, s, refA, "k")
		wantPoints(t, again, ints(tsList(sec+1, sec+2), 1, 2))
	}},
	{"StatsCount", func(t *testing.T, s store.Store, _ func()) {
		wantStats(t, s, store.Stats{})
		mustAppend(t, s, refA, "a", floats(tsList(sec+1, sec+2), 1, 2))
		mustAppend(t, s, refA, "b", floats(tsList(sec+1), 1))
		mustAppend(t, s, refC, "a", floats(tsList(sec+11, sec+12, sec+13), 1, 2, 3))
		mustAppend(t, s, refC, "a", floats(tsList(sec+13, sec+14), 3, 4)) // one new point
		wantStats(t, s, store.Stats{Shards: 3, Series: 2, Points: 7})
	}},
	{"ConcurrentAppendsAndReads", func(t *testing.T, s store.Store, _ func()) {
		const writers, batches, perBatch = 8, 25, 4
		var wg sync.WaitGroup
		errs := make(chan error, 2*writers)
		for w := range writers {
			wg.Add(2)
			go func() { // writer: its own series and a shared one, interleaved
				defer wg.Done()
				own := fmt.Sprintf("w%d", w)
				for b := range batches {
					var p series.Points
					for i := range perBatch {
						p.AppendInt(sec+int64(b*perBatch+i), int64(w))
					}
					if err := s.Append(refA, own, p); err != nil {
						errs <- err
						return
					}
					// Every writer writes the same timestamps into "shared".
					if err := s.Append(refA, "shared", p); err != nil {
						errs <- err
						return
					}
				}
			}()
			go func() { // reader: what it sees is always sorted and of one type
				defer wg.Done()
				for range batches {
					p, _, err := s.Read(refA, "shared", math.MinInt64, math.MaxInt64)
					if err == nil && (!p.Sorted() || p.Valid() != nil) {
						err = errors.New("concurrent read returned a bad batch")
					}
					if err != nil {
						errs <- err
						return
					}
					s.Stats()
					s.SeriesType(fmt.Sprintf("w%d", w))
				}
			}()
		}
		// Racing first declarations of different types: exactly one type wins.
		results := make(chan error, writers)
		for w := range writers {
			go func() {
				_, err := s.DeclareType("raced", series.Type(1+w%3))
				results <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		winners := 0
		for range writers {
			if err := <-results; err == nil {
				winners++
			} else if !errors.Is(err, series.ErrTypeMismatch) {
				t.Fatal(err)
			}
		}
		typ, _ := s.SeriesType("raced")
		want := 0
		for w := range writers {
			if series.Type(1+w%3) == typ {
				want++
			}
		}
		if winners != want {
			t.Fatalf("%d racing declarations succeeded; want the %d of type %v", winners, want, typ)
		}
		const n = batches * perBatch
		for w := range writers {
			got, _ := readAll(t, s, refA, fmt.Sprintf("w%d", w))
			if got.Len() != n {
				t.Fatalf("writer %d: %d points, want %d", w, got.Len(), n)
			}
		}
		if got, _ := readAll(t, s, refA, "shared"); got.Len() != n {
			t.Fatalf("shared: %d points, want %d", got.Len(), n)
		}
		wantStats(t, s, store.Stats{Shards: writers + 1, Series: writers + 2, Points: (writers + 1) * n})
	}},
	{"WalkAndDelete", func(t *testing.T, s store.Store, _ func()) {
		w, ok := s.(walker)
		if !ok {
			t.Skip("the store offers no walk")
		}
		walk := func() map[string]bool {
			t.Helper()
			seen := map[string]bool{}
			err := w.Pairs(func(r store.ShardRef, key string) bool {
				// The callback may call back into the store.
				if _, held, err := s.Read(r, key, math.MinInt64, math.MaxInt64); err != nil || !held {
					t.Errorf("walked pair %d/%s: held=%v err=%v", r.Start, key, held, err)
				}
				name := fmt.Sprintf("%x/%d/%s", r.ID, r.Start, key)
				if seen[name] {
					t.Errorf("pair %s walked twice", name)
				}
				seen[name] = true
				return true
			})
			if err != nil {
				t.Fatal(err)
			}
			return seen
		}
		name := func(r store.ShardRef, key string) string { return fmt.Sprintf("%x/%d/%s", r.ID, r.Start, key) }
		mustAppend(t, s, refA, "a", floats(tsList(sec+1, sec+2), 1, 2))
		mustAppend(t, s, refA, "b", floats(tsList(sec+1), 1))
		mustAppend(t, s, refB, "a", floats(tsList(sec+11), 1))
		mustAppend(t, s, refC, "a", floats(tsList(sec+11, sec+12, sec+13), 1, 2, 3))
		if _, err := s.DeclareType("declared", series.Int); err != nil {
			t.Fatal(err)
		}
		want := map[string]bool{name(refA, "a"): true, name(refA, "b"): true, name(refB, "a"): true, name(refC, "a"): true}
		if got := walk(); len(got) != len(want) {
			t.Fatalf("walked %v, want %v", got, want)
		} else {
			for n := range want {
				if !got[n] {
					t.Fatalf("walk missed %s: %v", n, got)
				}
			}
		}
		calls := 0
		if err := w.Pairs(func(store.ShardRef, string) bool { calls++; return false }); err != nil || calls != 1 {
			t.Fatalf("a walk told to stop went on: %d calls, %v", calls, err)
		}

		if err := w.Delete(refA, "a"); err != nil {
			t.Fatal(err)
		}
		if got, held := readAll(t, s, refA, "a"); held || got.Len() != 0 {
			t.Fatalf("after Delete: held=%v, %d points", held, got.Len())
		}
		wantPoints(t, mustReadAll(t, s, refB, "a"), floats(tsList(sec+11), 1))
		wantStats(t, s, store.Stats{Shards: 3, Series: 3, Points: 5})
		if typ, ok := s.SeriesType("a"); !ok || typ != series.Float {
			t.Fatal("Delete took the series' type")
		}
		if got := walk(); got[name(refA, "a")] || len(got) != 3 {
			t.Fatalf("walk after Delete: %v", got)
		}
		// Deleting what is not held changes nothing.
		if err := w.Delete(refA, "a"); err != nil {
			t.Fatal(err)
		}
		if err := w.Delete(refC, "never"); err != nil {
			t.Fatal(err)
		}
		wantStats(t, s, store.Stats{Shards: 3, Series: 3, Points: 5})
		// The pair comes back whole, counted afresh.
		mustAppend(t, s, refA, "a", floats(tsList(sec+2, sec+3), 5, 6))
		wantPoints(t, mustReadAll(t, s, refA, "a"), floats(tsList(sec+2, sec+3), 5, 6))
		wantStats(t, s, store.Stats{Shards: 4, Series: 3, Points: 7})
	}},
	{"ClosedStoreRefusesCalls", func(t *testing.T, s store.Store, markClosed func()) {
		mustAppend(t, s, refA, "k", floats(tsList(sec), 1))
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		markClosed()
		if err := s.Append(refA, "k", floats(tsList(sec+1), 2)); !errors.Is(err, store.ErrClosed) {
			t.Errorf("Append after Close: %v", err)
		}
		if _, _, err := s.Read(refA, "k", 0, math.MaxInt64); !errors.Is(err, store.ErrClosed) {
			t.Errorf("Read after Close: %v", err)
		}
		if _, err := s.DeclareType("other", series.Int); !errors.Is(err, store.ErrClosed) {
			t.Errorf("DeclareType after Close: %v", err)
		}
	}},
}
