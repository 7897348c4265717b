package uplink

import (
	"maps"
	"testing"
)

func TestCursorRecordRoundTrip(t *testing.T) {
	r := cursorRecord{Cursor: 5_000, From: 1_000, Counts: map[int64]int64{1_000: 3, 2_000: 0, 4_000: 60}}
	got, err := decodeCursor(r.encode(1_000))
	if err != nil || got.Cursor != r.Cursor || got.From != r.From || !maps.Equal(got.Counts, r.Counts) {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, r)
	}
	// Too many windows: the newest are kept, and From says where they start.
	many := cursorRecord{Cursor: 1_000_000, From: 0, Counts: map[int64]int64{}}
	for w := int64(0); w < 1_000_000; w += 1_000 {
		many.Counts[w] = 1
	}
	got, err = decodeCursor(many.encode(1_000))
	if err != nil || len(got.Counts) != maxCursorWindows || got.From != 1_000_000-maxCursorWindows*1_000 {
		t.Fatalf("%d windows from %d (%v)", len(got.Counts), got.From, err)
	}
}

func FuzzDecodeCursor(f *testing.F) {
	f.Add("1 5000 1000 1000:3 4000:60")
	f.Add("1 0 0")
	f.Add("2 0 0")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := decodeCursor(s)
		if err != nil {
			return
		}
		again, err := decodeCursor(r.encode(1))
		if err != nil {
			t.Fatalf("%q decodes, but its encoding does not: %v", s, err)
		}
		if again.Cursor != r.Cursor {
			t.Fatalf("%q: cursor %d, then %d", s, r.Cursor, again.Cursor)
		}
	})
}
