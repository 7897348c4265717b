package rollup

import (
	"encoding/binary"
	"errors"
	"hash/fnv"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
)

// What a rollup home keeps in its store (store.RollupStore), per series:
//
//	head                 → rollupHead (encodeHead): type, started, from, front, levels
//	level i, window start → the window's statistics, digest in Hash (agg.AppendPartial);
//	                       level 0 holds only non-empty windows (a known window with no
//	                       record is empty), coarser levels hold every complete window
//	markLevel, start      → markDirty or markUnsettled: a finest window not to be trusted
//	                       until a later pull settles it
//
// Marks are stored before a mark request is acknowledged, so a restarted home does not
// vouch for a window a late write changed.

// markLevel is the store level of a series' marks.
const markLevel = 255

// Mark values.
const (
	markDirty     = 1
	markUnsettled = 2
)

// headVersion is the first byte of an encoded head.
const headVersion = 1

// rollupHead is the persistent part of a homeSeries.
type rollupHead struct {
	Started     bool
	Type        series.Type
	From, Front int64  // ns; [From, Front) of the finest level has been pulled
	Levels      uint64 // levelsPrint of the levels the records were written with
}

// encodeHead appends h: version ‖ flags ‖ type ‖ varint from ‖ varint front ‖ u64 levels.
func encodeHead(h rollupHead) []byte {
	b := []byte{headVersion, 0, byte(h.Type)}
	if h.Started {
		b[1] = 1
	}
	b = binary.AppendVarint(b, h.From)
	b = binary.AppendVarint(b, h.Front)
	return binary.LittleEndian.AppendUint64(b, h.Levels)
}

var errBadHead = errors.New("rollup head: malformed")

// decodeHead reverses encodeHead; it refuses anything else.
func decodeHead(b []byte) (rollupHead, error) {
	var h rollupHead
	if len(b) < 3 || b[0] != headVersion || b[1] > 1 {
		return h, errBadHead
	}
	h.Started, h.Type = b[1] == 1, series.Type(b[2])
	if h.Type != series.Unknown && h.Type != series.Float && h.Type != series.Int && h.Type != series.String {
		return h, errBadHead
	}
	b = b[3:]
	var n int
	if h.From, n = binary.Varint(b); n <= 0 {
		return h, errBadHead
	}
	b = b[n:]
	if h.Front, n = binary.Varint(b); n <= 0 {
		return h, errBadHead
	}
	b = b[n:]
	if len(b) != 8 || h.Front < h.From {
		return h, errBadHead
	}
	h.Levels = binary.LittleEndian.Uint64(b)
	return h, nil
}

// levelsPrint fingerprints level widths: records written under other levels are
// dropped at load rather than misread.
func levelsPrint(widths []int64) uint64 {
	h := fnv.New64a()
	for _, w := range widths {
		h.Write(binary.LittleEndian.AppendUint64(nil, uint64(w)))
	}
	return h.Sum64()
}

// windowValue encodes a window's statistics (Hash: its digest) as a record value.
func windowValue(p agg.Partial) []byte { return agg.AppendPartial(nil, &p) }

// decodeWindow reverses windowValue.
func decodeWindow(v []byte) (agg.Partial, error) {
	p, rest, err := agg.DecodePartial(v)
	if err == nil && len(rest) != 0 {
		err = errors.New("rollup window: trailing bytes")
	}
	return p, err
}

// spanOne names one record.
func spanOne(level uint8, start int64) store.RollupSpan {
	return store.RollupSpan{Level: level, From: start, To: start + 1}
}
