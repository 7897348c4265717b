package rollup

import (
	"bytes"
	"math"
	"testing"

	"github.com/tsdht/tsdht/tsdb/series"
)

func TestRollupHeadRoundTrip(t *testing.T) {
	for _, h := range []rollupHead{
		{},
		{Started: true, Type: series.Float, From: -60e9, Front: 3600e9, Levels: 42},
		{Started: true, Type: series.String, From: math.MinInt64, Front: math.MaxInt64, Levels: math.MaxUint64},
	} {
		got, err := decodeHead(encodeHead(h))
		if err != nil || got != h {
			t.Fatalf("%+v: decoded %+v, %v", h, got, err)
		}
	}
	for _, bad := range [][]byte{nil, {2, 0, 0, 0, 0}, {1, 2, 0, 0, 0}, {1, 0, 9, 0, 0}, encodeHead(rollupHead{From: 2, Front: 1})} {
		if _, err := decodeHead(bad); err == nil {
			t.Errorf("%x decoded", bad)
		}
	}
}

func FuzzRollupHead(f *testing.F) {
	f.Add(encodeHead(rollupHead{Started: true, Type: series.Int, From: 1, Front: 2, Levels: 3}))
	f.Add([]byte{1, 1, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHead(b)
		if err != nil {
			return
		}
		if again := encodeHead(h); !bytes.Equal(again, b) {
			// Varints have one canonical form per value in Go's encoder; a longer
			// form that decodes must still decode to the same head.
			if h2, err := decodeHead(again); err != nil || h2 != h {
				t.Fatalf("%x → %+v → %x → %+v, %v", b, h, again, h2, err)
			}
		}
	})
}
