package wire

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
)

func TestAggSpansRoundTrip(t *testing.T) {
	shards := []ShardAgg{
		{Start: 100, Key: "k", From: 100e9, To: 110e9},
		{Start: 110, Key: "k", From: 110e9, To: 120e9, Digest: true},
		{Start: 90, Key: "k", From: 95e9, To: 95e9},
		{Start: -10, Key: "k", From: math.MinInt64, To: math.MaxInt64, Digest: true},
		{Start: math.MaxInt64, Key: "k", From: math.MaxInt64, To: math.MaxInt64},
	}
	got, err := DecodeAggSpans(AppendAggSpans(nil, shards), "k")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, shards) {
		t.Fatalf("got %+v\nwant %+v", got, shards)
	}
	if got, err := DecodeAggSpans(AppendAggSpans(nil, nil), "k"); err != nil || len(got) != 0 {
		t.Fatalf("no shards: %v, %v", got, err)
	}
}

func TestAggResultsRoundTrip(t *testing.T) {
	var pts series.Points
	for i := range 100 {
		pts.AppendFloat(int64(i)*1e9, float64(i%7))
	}
	ws := agg.Windows(&pts, 0, 100e9, 30e9)
	var ipts series.Points
	ipts.AppendInt(5, -3)
	rs := []ShardAggResult{
		{Held: true, Count: 100, Hash: 0xdeadbeefcafe, Type: series.Float, Windows: ws},
		{Held: true, Count: 100, Hash: 1, Type: series.Float},
		{},
		{Held: true, Count: 1, Hash: math.MaxUint64, Type: series.Int, Windows: agg.Windows(&ipts, 0, 10, 10)},
	}
	got, err := DecodeAggResults(AppendAggResults(nil, rs))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rs) {
		t.Fatalf("got %+v\nwant %+v", got, rs)
	}
	// Appending to one result's windows never overwrites the next one's.
	got[0].Windows = append(got[0].Windows, agg.Window{Start: 1 << 40})
	if !reflect.DeepEqual(got[3].Windows, rs[3].Windows) {
		t.Fatal("windows share capacity across results")
	}
}

func TestAggPackedCorrupt(t *testing.T) {
	good := AppendAggSpans(nil, []ShardAgg{{Start: 1, From: 1, To: 2}})
	for name, b := range map[string][]byte{
		"empty":           nil,
		"version":         {9, 0},
		"count too large": {aggSeriesVersion, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"truncated":       good[:len(good)-1],
		"trailing":        append(append([]byte{}, good...), 0),
		"flags":           {aggSeriesVersion, 1, 0x80, 0, 0, 0},
		"past the end":    {aggSeriesVersion, 1, 0, 0, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
	} {
		if _, err := DecodeAggSpans(b, "k"); !errors.Is(err, ErrCorruptAgg) {
			t.Errorf("spans %s: %v, want ErrCorruptAgg", name, err)
		}
	}
	if _, err := DecodeAggSpans(AppendAggSpans(nil, make([]ShardAgg, MaxAggSeriesShards+1)), "k"); err == nil {
		t.Errorf("%d spans decoded, at most %d", MaxAggSeriesShards+1, MaxAggSeriesShards)
	}
	res := AppendAggResults(nil, []ShardAggResult{{Held: true, Count: 1, Type: series.Float}})
	for name, b := range map[string][]byte{
		"count too large": {aggSeriesVersion, 0xff, 0xff, 0x03},
		"truncated":       res[:len(res)-1],
		"type":            {aggSeriesVersion, 1, 1, 9, 1, 0, 0, 0, 0, 0, 0, 0, 0},
		"windows size":    {aggSeriesVersion, 1, 3, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f},
	} {
		if _, err := DecodeAggResults(b); !errors.Is(err, ErrCorruptAgg) {
			t.Errorf("results %s: %v, want ErrCorruptAgg", name, err)
		}
	}
}

// FuzzDecodeAggPacked decodes any bytes as packed spans and results: no panic, and
// what it allocates is bounded by a small multiple of the bytes received.
func FuzzDecodeAggPacked(f *testing.F) {
	f.Add(AppendAggSpans(nil, []ShardAgg{{Start: 10, From: 10e9, To: 20e9, Digest: true}, {Start: 20, From: 20e9, To: 25e9}}))
	var pts series.Points
	pts.AppendFloat(1, 2)
	f.Add(AppendAggResults(nil, []ShardAggResult{{Held: true, Count: 1, Type: series.Float, Windows: agg.Windows(&pts, 0, 10, 5)}, {}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		limit := uint64(200*len(b) + 4<<10)
		if grew := allocated(func() { _, _ = DecodeAggSpans(b, "k") }); grew > limit {
			t.Fatalf("spans: %d bytes allocated %d", len(b), grew)
		}
		if grew := allocated(func() { _, _ = DecodeAggResults(b) }); grew > limit {
			t.Fatalf("results: %d bytes allocated %d", len(b), grew)
		}
		if rs, err := DecodeAggResults(b); err == nil {
			if again, err := DecodeAggResults(AppendAggResults(nil, rs)); err != nil || len(again) != len(rs) {
				t.Fatalf("re-encoded results: %v", err)
			}
		}
	})
}
