package quanta

import (
	"errors"
	"math"
	"math/rand"
	"testing"
	"time"
)

// The vectors were computed independently so that the layout can never drift by accident:
// changing any of them breaks every deployed cluster. QFI and KFI came from Python hashlib;
// HFI from coreutils, e.g. `printf '1563703200\0pmu17/bus3/vang' | sha1sum` (and checked
// again with Python's hashlib.sha1(b"1563703200\0pmu17/bus3/vang")).
func TestShardIDVectors(t *testing.T) {
	cases := []struct {
		key           string
		start         int64
		qfi, kfi, hfi string
	}{
		{"pmu17/bus3/vang", 1563703200, "aa82a4ef62aec999998241538584737a1630f4b8", "41538584737a1630f4b8aa82a4ef62aec9999982", "66c142ee9e6bd71dcc2eae71b56c49cd63c1f0d5"},
		{"a", 0, "b6589fc6ab0dc82cf12086f7e437faa5a7fce15d", "86f7e437faa5a7fce15db6589fc6ab0dc82cf120", "4fb1485874c933a0c2391a7aff896bf2ade3bd4d"},
		{"pmu1/freq", -10, "35c0ba310bf18ad1a4c24cf561007491f555d590", "4cf561007491f555d59035c0ba310bf18ad1a4c2", "b5becb6d00a3653ae1cf010e755abb49bd01c9d5"},
		{"x", 1700000000, "eaaa8ade9421721d702311f6ad8ec52a2984abaa", "11f6ad8ec52a2984abaaeaaa8ade9421721d7023", "04666290144fc2121cb9d6c6bf171efe98773edf"},
	}
	for _, c := range cases {
		if got := ShardID(QFI, c.key, c.start).String(); got != c.qfi {
			t.Errorf("QFI(%q,%d) = %s, want %s", c.key, c.start, got, c.qfi)
		}
		if got := ShardID(KFI, c.key, c.start).String(); got != c.kfi {
			t.Errorf("KFI(%q,%d) = %s, want %s", c.key, c.start, got, c.kfi)
		}
		if got := ShardID(HFI, c.key, c.start).String(); got != c.hfi {
			t.Errorf("HFI(%q,%d) = %s, want %s", c.key, c.start, got, c.hfi)
		}
		// One SeriesIDs serves every quantum of its series.
		for _, f := range []Format{QFI, KFI, HFI} {
			ids := NewSeriesIDs(f, c.key)
			for _, start := range []int64{c.start + 10, c.start, c.start - 10} {
				if got, want := ids.At(start), ShardID(f, c.key, start); got != want {
					t.Errorf("SeriesIDs(%s, %q).At(%d) = %s, want %s", f, c.key, start, got, want)
				}
			}
		}
		id, err := ParseID(c.qfi)
		if err != nil || id != ShardID(QFI, c.key, c.start) {
			t.Errorf("ParseID(%s) = %v, %v", c.qfi, id, err)
		}
	}
}

// TagID vectors, computed independently with Python hashlib:
// sha1(b"tsdht/tag\x00" + struct.pack(">I", len(k)) + k + v).
func TestTagIDVectors(t *testing.T) {
	cases := []struct{ k, v, want string }{
		{"bus", "3", "1d7eff1791553abb199c89ab67bef91339ddff56"},
		{"station", "PMU 17", "6dbfb588dfc1762e2d815c7df73f6ea6f055e6e2"},
		{"\x00all", "7", "710284a0db0bf72847d16764916ae0d18c1a848d"},
		{"", "", "5030a96d4b8f7dff9cc66c277e8957b47c986e6c"},
	}
	for _, c := range cases {
		if got := TagID(c.k, c.v).String(); got != c.want {
			t.Errorf("TagID(%q, %q) = %s, want %s", c.k, c.v, got, c.want)
		}
	}
	// The length prefix keeps the boundary between key and value.
	if TagID("ab", "c") == TagID("a", "bc") {
		t.Error("TagID(ab, c) == TagID(a, bc)")
	}
}

func TestStart(t *testing.T) {
	cases := []struct {
		q    Quantum
		t    int64
		want int64
	}{
		{10, 0, 0},
		{10, 1, 0},
		{10, 9_999_999_999, 0},
		{10, 10_000_000_000, 10},
		{10, 1563703205_123456789, 1563703200},
		{10, -1, -10},
		{10, -10_000_000_000, -10},
		{10, -10_000_000_001, -20},
		{1, -1, -1},
		{7, 13_000_000_000, 7},
		{10, math.MaxInt64, 9223372030},
		{10, math.MinInt64, -9223372040},
	}
	for _, c := range cases {
		if got := c.q.Start(c.t); got != c.want {
			t.Errorf("Quantum(%d).Start(%d) = %d, want %d", c.q, c.t, got, c.want)
		}
	}
}

// Every timestamp lies in exactly one quantum: inside [start, end) of its own quantum,
// and outside the neighbours'.
func TestEveryTimestampInExactlyOneQuantum(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 100000; i++ {
		q := Quantum(1 + r.Intn(3600))
		ts := r.Int63n(1<<62) - 1<<61
		s := q.Start(ts)
		lo, hi := q.StartNanos(ts), q.EndNanos(s)
		if ts < lo || ts >= hi {
			t.Fatalf("q=%d t=%d: quantum [%d,%d) does not hold it", q, ts, lo, hi)
		}
		if s%int64(q) != 0 {
			t.Fatalf("q=%d t=%d: start %d is not a multiple of the quantum", q, ts, s)
		}
	}
}

func TestCoveringIsCompleteAndMinimal(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	for i := 0; i < 20000; i++ {
		q := Quantum(1 + r.Intn(60))
		from := r.Int63n(1<<40) - 1<<39
		to := from + r.Int63n(int64(q)*1e9*20)
		starts, err := q.Covering(from, to)
		if err != nil {
			t.Fatal(err)
		}
		if from == to {
			if len(starts) != 0 {
				t.Fatalf("empty range covered by %v", starts)
			}
			continue
		}
		// Minimal: the first quantum holds from, the last holds to−1, each overlaps the range.
		if starts[0] != q.Start(from) || starts[len(starts)-1] != q.Start(to-1) {
			t.Fatalf("q=%d [%d,%d): covering %d..%d", q, from, to, starts[0], starts[len(starts)-1])
		}
		// Complete: consecutive, no gaps or repeats.
		for j := 1; j < len(starts); j++ {
			if starts[j]-starts[j-1] != int64(q) {
				t.Fatalf("gap in covering: %v", starts)
			}
		}
		// A random timestamp in the range falls in a covering quantum.
		ts := from + r.Int63n(to-from)
		s := q.Start(ts)
		if s < starts[0] || s > starts[len(starts)-1] {
			t.Fatalf("t=%d not covered", ts)
		}
	}
}

func TestCoveringEdges(t *testing.T) {
	q := Quantum(10)
	cases := []struct {
		name     string
		from, to int64
		want     []int64
	}{
		{"empty", 5e9, 5e9, nil},
		{"inside one", 1e9, 9e9, []int64{0}},
		{"exact quantum", 0, 10e9, []int64{0}},
		{"one ns past", 0, 10e9 + 1, []int64{0, 10}},
		{"across zero", -1, 1, []int64{-10, 0}},
		{"three", 15e9, 35e9, []int64{10, 20, 30}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := q.Covering(c.from, c.to)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Fatalf("got %v, want %v", got, c.want)
				}
			}
		})
	}
	if _, err := q.Covering(2, 1); !errors.Is(err, ErrBadRange) {
		t.Errorf("from > to: err = %v, want ErrBadRange", err)
	}
	if _, err := q.Covering(math.MinInt64, math.MaxInt64); err == nil {
		t.Errorf("range over all of time: want an error, not %d quanta", uint64(math.MaxInt64))
	}
}

func TestNewQuantum(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second, 500 * time.Millisecond, 1500 * time.Millisecond} {
		if _, err := NewQuantum(d); err == nil {
			t.Errorf("NewQuantum(%v): want error", d)
		}
	}
	if q, err := NewQuantum(10 * time.Second); err != nil || q != 10 {
		t.Errorf("NewQuantum(10s) = %d, %v", q, err)
	}
}

func TestParseFormat(t *testing.T) {
	for _, f := range Formats {
		g, err := ParseFormat(f.String())
		if err != nil || g != f || !f.Valid() {
			t.Errorf("ParseFormat(%q) = %v, %v", f.String(), g, err)
		}
	}
	if Format(0).Valid() || Format(4).Valid() {
		t.Error("Format 0 or 4 reported valid")
	}
	if _, err := ParseFormat("HFI"); err == nil {
		t.Error("ParseFormat(HFI): want error (names are lowercase)")
	}
	if _, err := ParseFormat("QFI2"); err == nil {
		t.Error("ParseFormat(QFI2): want error")
	}
}

func TestFit(t *testing.T) {
	for _, c := range []struct {
		every time.Duration
		base  Quantum
		want  Quantum
	}{
		{time.Second / 60, 10, 10},   // a PMU channel keeps the cluster's 10 s
		{time.Second, 10, 600},       // 1 Hz: 10 minutes
		{10 * time.Second, 10, 3600}, // every 10 s: an hour
		{time.Minute, 10, 6 * 3600},  // every minute: 6 hours
		{time.Hour, 10, 24 * 3600},   // hourly: a day, the longest Fit picks
		{0, 10, 10},                  // unknown rate: the cluster's
		{time.Minute, 3600, 6 * 3600},
		{time.Millisecond, 3600, 3600}, // never shorter than the cluster's
	} {
		if got := Fit(c.every, c.base); got != c.want {
			t.Errorf("Fit(%v, %d) = %d, want %d", c.every, c.base, got, c.want)
		}
	}
}
