package agg_test

import (
	"errors"
	"math"
	"testing"

	"github.com/tsdht/tsdht/tsdb/agg"
)

// Digests travel with their start, count and hash intact, smaller than the windows in
// full, and hostile bytes are refused before they allocate.
func TestDigestsWire(t *testing.T) {
	ws := []agg.Window{
		{Start: -120, Partial: agg.Partial{Count: 3, Hash: 1, Sum: 5, Min: 1, Max: 3}},
		{Start: 60, Partial: agg.Partial{Count: 1, Hash: math.MaxUint64}},
		{Start: 1 << 40, Partial: agg.Partial{Count: 1 << 33, Hash: 42}},
	}
	b := agg.AppendDigestsWire(nil, ws)
	got, err := agg.DecodeDigestsWire(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ws) {
		t.Fatalf("%d digests, want %d", len(got), len(ws))
	}
	for i := range ws {
		if got[i].Start != ws[i].Start || got[i].Count != ws[i].Count || got[i].Hash != ws[i].Hash {
			t.Errorf("digest %d: %+v, want start %d count %d hash %d", i, got[i], ws[i].Start, ws[i].Count, ws[i].Hash)
		}
		if got[i].Sum != 0 || got[i].Max != 0 {
			t.Errorf("digest %d carries statistics: %+v", i, got[i])
		}
	}
	if full := agg.AppendWindowsWire(nil, 1, ws); len(b) >= len(full) {
		t.Errorf("digests take %d bytes, the windows in full %d", len(b), len(full))
	}
	if got, err := agg.DecodeDigestsWire(agg.AppendDigestsWire(nil, nil)); err != nil || len(got) != 0 {
		t.Errorf("no digests: %v, %v", got, err)
	}
	for name, bad := range map[string][]byte{
		"empty":          nil,
		"huge count":     {0xff, 0xff, 0xff, 0xff, 0x0f},
		"truncated":      b[:len(b)-1],
		"trailing bytes": append(append([]byte(nil), b...), 0),
		"not ascending":  agg.AppendDigestsWire(nil, []agg.Window{ws[1], ws[0]}),
		"zero count":     agg.AppendDigestsWire(nil, []agg.Window{{Start: 0}}),
	} {
		if _, err := agg.DecodeDigestsWire(bad); !errors.Is(err, agg.ErrCorrupt) {
			t.Errorf("%s: %v, want corrupt", name, err)
		}
	}
}
