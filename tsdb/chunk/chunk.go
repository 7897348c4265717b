// Package chunk owns the compressed form of a sealed batch of points: one sorted run
// of a series' points (a quantum of one shard, in the store) encoded column by column.
//
// Layout (all integers little-endian bit packing or Go varints):
//
//	version byte (2; version 1 chunks, written before, are still read)
//	type    byte (series.Float, Int or String)
//	n       uvarint, 1..MaxPoints
//	timestamps  int stream (ints2.go): delta-of-deltas or deltas at a lag, with a common
//	            scale, bit-packed
//	values      Float: floats.go (decimal-scaled int stream, float32 patterns as an
//	            int stream, or Gorilla XOR)
//	            Int: int stream (raw, delta or delta-of-delta, centred or not, whichever
//	            is smallest; ints2.go)
//	            String: strings.go (dictionary of repeats, or lengths + bytes)
//
// Why our own codec: the Go Gorilla implementations (github.com/keisku/gorilla,
// archived; github.com/dgryski/go-tsz, unmaintained) encode float64 values only and
// assume second-resolution uint32 timestamps, and Prometheus' chunkenc would pull the
// whole Prometheus module in for float-only, millisecond chunks. We need int64 and
// string values, nanosecond timestamps with µs jitter, and a decoder that hostile bytes
// cannot crash or balloon.
//
// Decoding is defensive: every count is checked against the bytes that remain before
// anything is allocated (at most 32 points per input byte, and never more than
// MaxPoints), reads never leave the input, and timestamps must strictly ascend, so
// corrupt input yields ErrCorrupt, never a panic or a huge allocation.
package chunk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/tsdht/tsdht/tsdb/series"
)

// version is the first byte of every chunk this package writes. Version 1 chunks
// (version-1 int streams, no float32 mode) are still read: stores keep them.
const version = 2

// MaxPoints is the most points one chunk may hold.
const MaxPoints = 1 << 20

// ErrCorrupt is wrapped by every decoding error.
var ErrCorrupt = errors.New("corrupt chunk")

var errShort = fmt.Errorf("%w: truncated", ErrCorrupt)

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// scratch holds buffers reused across calls of one Encoder or decoder.
type scratch struct {
	ints      intScratch
	floatBuf  []byte
	decBuf    []byte
	singleBuf []byte
	mant      []int64
	ver       byte // version of the chunk being decoded
}

// Encoder compresses batches, reusing its buffers between calls. It is not safe for
// concurrent use; the zero value is ready.
type Encoder struct {
	s scratch
	// Quick makes int streams (timestamps, ints, decimal floats) try only the
	// uncentred modes (values, deltas, delta-of-deltas) instead of every mode, and
	// floats that are short decimals take the decimal encoding without trying the
	// others: a fraction of the encoding CPU, for a slightly larger chunk where a
	// skipped encoding would have won (BenchmarkEncodeBlock). For data that is soon re-encoded (the store's unsealed
	// blocks, merged into chunks at the seal). The chunk's format is the same.
	Quick bool
}

// Encode appends the chunk of p to dst. p must be valid, non-empty, hold at most
// MaxPoints points and have strictly ascending timestamps (series.Points.Normalize).
func (e *Encoder) Encode(dst []byte, p series.Points) ([]byte, error) {
	if err := p.Valid(); err != nil {
		return dst, err
	}
	n := p.Len()
	switch {
	case n == 0:
		return dst, errors.New("chunk: no points to encode")
	case n > MaxPoints:
		return dst, fmt.Errorf("chunk: %d points; at most %d per chunk", n, MaxPoints)
	case !p.Sorted():
		return dst, errors.New("chunk: timestamps must strictly ascend")
	}
	start := len(dst)
	e.s.ints.quick = e.Quick
	for _, constants := range []bool{true, false} {
		e.s.ints.noConstant = !constants
		dst = append(dst[:start], version, byte(p.Type))
		dst = binary.AppendUvarint(dst, uint64(n))
		head := len(dst)
		dst = appendInts(dst, p.T, &e.s.ints)
		switch p.Type {
		case series.Float:
			dst = appendFloats(dst, p.F, &e.s)
		case series.Int:
			dst = appendInts(dst, p.I, &e.s.ints)
		case series.String:
			dst = appendStrings(dst, p.S, &e.s)
		}
		// Constant streams can describe more points a byte than a decoder accepts
		// (maxPointsPerByte); such a chunk is written without them.
		if uint64(n) <= maxPointsPerByte*uint64(len(dst)-head)+2 {
			break
		}
	}
	return dst, nil
}

// maxPointsPerByte bounds the point count of a version-2 chunk by its size, so that
// a damaged count cannot make a decoder allocate more than 16 bytes × 256 per input
// byte. (Version 1 chunks, whose blocks cost at least 2 bytes per 64 points per
// column, are held to 32.)
const maxPointsPerByte = 256

// Encode appends the chunk of p to dst with a one-off Encoder.
func Encode(dst []byte, p series.Points) ([]byte, error) {
	var e Encoder
	return e.Encode(dst, p)
}

// header checks a chunk's version and returns its type, point count and the rest.
func header(b []byte) (series.Type, int, []byte, error) {
	if len(b) < 3 {
		return series.Unknown, 0, nil, errShort
	}
	if b[0] != 1 && b[0] != version {
		return series.Unknown, 0, nil, corrupt("version %d (this tsdht reads 1 and %d)", b[0], version)
	}
	t := series.Type(b[1])
	if t != series.Float && t != series.Int && t != series.String {
		return series.Unknown, 0, nil, corrupt("value type %d", b[1])
	}
	n, m := binary.Uvarint(b[2:])
	rest := b[2+max(m, 0):]
	// Each point costs at least 1/perByte byte; the bound keeps a forged count
	// from allocating more than the input could describe.
	perByte := uint64(maxPointsPerByte)
	if b[0] == 1 {
		perByte = 32
	}
	if m <= 0 || n == 0 || n > MaxPoints || n > perByte*uint64(len(rest))+2 {
		return series.Unknown, 0, nil, corrupt("point count")
	}
	return t, int(n), rest, nil
}

// Decode returns the points of a chunk. The result owns its memory.
func Decode(b []byte) (series.Points, error) {
	var p series.Points
	var d Decoder
	if err := d.Append(&p, b); err != nil {
		return series.Points{}, err
	}
	return p, nil
}

// Peek returns a chunk's type and point count from its header alone: what a reader of
// many chunks sizes its columns by before it decodes them.
func Peek(b []byte) (series.Type, int, error) {
	t, n, _, err := header(b)
	return t, n, err
}

// Decoder decodes chunks, reusing its scratch buffers from one chunk to the next: a
// read of many blocks appends them all to one series.Points with Append instead of
// allocating each block's columns and copying them again. The zero value is ready; it
// is not safe for concurrent use.
type Decoder struct {
	s    scratch
	ints []int64 // an int column decoded before it is appended
}

// Append appends the points of chunk b to p: its timestamps ascend within the chunk,
// not necessarily after p's last point. p must be empty or of the chunk's type. On
// an error p is as it was.
func (d *Decoder) Append(p *series.Points, b []byte) error {
	if len(b) == 0 {
		return errShort
	}
	ver := b[0]
	t, n, b, err := header(b)
	if err != nil {
		return err
	}
	base := p.Len()
	if base > 0 && p.Type != t {
		return corrupt("a %v chunk appended to %v points", t, p.Type)
	}
	old := *p
	// What Append writes goes past old's lengths (base == 0: p holds nothing), so
	// restoring old's headers undoes it.
	fail := func(err error) error {
		*p = old
		return err
	}
	d.s.ver = ver
	p.Type = t
	// An int stream decodes into a slice it resets: straight into p's column when p
	// is empty, else into d.ints and appended.
	ints := func(col []int64) ([]int64, error) {
		var vals []int64
		if base == 0 {
			vals, b, err = decodeInts(b, n, col[:0], ver)
			return vals, err
		}
		d.ints, b, err = decodeInts(b, n, d.ints, ver)
		return append(col, d.ints...), err
	}
	if p.T, err = ints(p.T); err != nil {
		return fail(err)
	}
	for i := base + 1; i < len(p.T); i++ {
		if p.T[i] <= p.T[i-1] {
			return fail(corrupt("timestamps do not ascend at point %d", i-base))
		}
	}
	switch t {
	case series.Float:
		p.F, b, err = decodeFloats(b, n, slices.Grow(p.F[:base], n), &d.s, ver)
	case series.Int:
		p.I, err = ints(p.I[:base])
	case series.String:
		p.S, b, err = decodeStrings(b, n, slices.Grow(p.S[:base], n), &d.s)
	}
	if err != nil {
		return fail(err)
	}
	if len(b) != 0 {
		return fail(corrupt("%d trailing bytes", len(b)))
	}
	return nil
}
