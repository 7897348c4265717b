package agg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/tsdht/tsdht/tsdb/series"
)

// Wire form of partials and windows: what a replica sends instead of points, and what
// a store keeps as a pair's statistics.
//
//	partial: version byte (2) ‖ type byte ‖ body
//	windows: version byte (2) ‖ type byte ‖ uvarint n ‖ varint start₀ ‖ body₀
//	         ‖ (uvarint startᵢ − startᵢ₋₁ ‖ bodyᵢ) for i = 1..n−1  (strictly ascending)
//	body:    uvarint count; if count > 0:
//	         varint firstT ‖ uvarint lastT − firstT ‖ 8 bytes hash (little-endian)
//	         Float:  min, max, sum, comp, m2, first, last: 8 bytes each (IEEE 754, LE)
//	         Int:    varint min, max, first, last ‖ varint sum.Hi ‖ uvarint sum.Lo ‖ 8 bytes m2
//	         String: uvarint len ‖ bytes (first), uvarint len ‖ bytes (last)
//	         Float and Int, version 2 only: uvarint minT′ ‖ uvarint maxT′, where
//	         x′ = x − firstT + 1, or 0 when the partial lacks the time (HasExtremaT)
//
// Version 1 is version 2 without minT′ and maxT′: it still decodes (stores keep
// partials as pairs' statistics), as partials without HasExtremaT. Encoding always
// writes version 2, which a tsdht that reads only version 1 refuses as corrupt.
//
// Decoding checks every count and length against the bytes that remain before it
// allocates (a window takes at least minWindowBytes), so hostile input costs its sender
// and never panics.
const codecVersion = 2

// codecVersion1 is the version without the times of the extremes.
const codecVersion1 = 1

// minWindowBytes is the least a window takes: a start delta and a non-empty body
// (a string window of version 2 has no extremes' times).
const minWindowBytes = 1 + 1 + 1 + 1 + 8

// ErrCorrupt is wrapped by every decoding error.
var ErrCorrupt = errors.New("corrupt aggregate")

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// AppendPartial appends the wire form of p to dst.
func AppendPartial(dst []byte, p *Partial) []byte {
	dst = append(dst, codecVersion, byte(p.Type))
	return appendBody(dst, p, codecVersion)
}

// AppendPartialV1 appends p in the version 1 wire form, which lacks MinT and MaxT:
// what older tsdht wrote, for tests of the upgrade path.
func AppendPartialV1(dst []byte, p *Partial) []byte {
	dst = append(dst, codecVersion1, byte(p.Type))
	return appendBody(dst, p, codecVersion1)
}

func appendBody(dst []byte, p *Partial, version byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(p.Count))
	if p.Count == 0 {
		return dst
	}
	dst = binary.AppendVarint(dst, p.FirstT)
	dst = binary.AppendUvarint(dst, uint64(p.LastT)-uint64(p.FirstT))
	dst = binary.LittleEndian.AppendUint64(dst, p.Hash)
	switch p.Type {
	case series.Float:
		for _, f := range [...]float64{p.Min, p.Max, p.Sum, p.Comp, p.M2, p.First, p.Last} {
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(f))
		}
	case series.Int:
		for _, v := range [...]int64{p.IMin, p.IMax, p.IFirst, p.ILast, p.ISum.Hi} {
			dst = binary.AppendVarint(dst, v)
		}
		dst = binary.AppendUvarint(dst, p.ISum.Lo)
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(p.M2))
	case series.String:
		dst = binary.AppendUvarint(dst, uint64(len(p.SFirst)))
		dst = append(dst, p.SFirst...)
		dst = binary.AppendUvarint(dst, uint64(len(p.SLast)))
		dst = append(dst, p.SLast...)
	}
	if version >= 2 && (p.Type == series.Float || p.Type == series.Int) {
		for _, t := range [...]int64{p.MinT, p.MaxT} {
			var x uint64
			if p.HasExtremaT {
				x = uint64(t) - uint64(p.FirstT) + 1
			}
			dst = binary.AppendUvarint(dst, x)
		}
	}
	return dst
}

// DecodePartial decodes a partial from the front of b and returns the bytes after it.
func DecodePartial(b []byte) (Partial, []byte, error) {
	v, t, b, err := header(b)
	if err != nil {
		return Partial{}, nil, err
	}
	d := decoder{b: b, version: v}
	p := d.body(t)
	if d.err != nil {
		return Partial{}, nil, d.err
	}
	p.Type = t
	return p, d.b, nil
}

// appendStart appends the start of ws[i] as decoder.start reads it: the first as a
// varint, each later one as its delta from the one before.
func appendStart(dst []byte, ws []Window, i int) []byte {
	if i == 0 {
		return binary.AppendVarint(dst, ws[0].Start)
	}
	return binary.AppendUvarint(dst, uint64(ws[i].Start)-uint64(ws[i-1].Start))
}

// AppendWindowsWire appends the wire form of ws, which must be strictly ascending by Start
// and hold partials of type t (empty partials included), to dst.
func AppendWindowsWire(dst []byte, t series.Type, ws []Window) []byte {
	dst = append(dst, codecVersion, byte(t))
	dst = binary.AppendUvarint(dst, uint64(len(ws)))
	for i := range ws {
		dst = appendStart(dst, ws, i)
		dst = appendBody(dst, &ws[i].Partial, codecVersion)
	}
	return dst
}

// DecodeWindowsWire decodes what AppendWindowsWire wrote, the whole of b.
func DecodeWindowsWire(b []byte) (series.Type, []Window, error) {
	return AppendDecodedWindows(nil, b)
}

// AppendDecodedWindows decodes what AppendWindowsWire wrote, the whole of b, appends
// the windows to dst and returns the extended slice: many answers' windows in one
// backing array.
func AppendDecodedWindows(dst []Window, b []byte) (series.Type, []Window, error) {
	v, t, b, err := header(b)
	if err != nil {
		return 0, nil, err
	}
	d := decoder{b: b, version: v}
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b))/minWindowBytes+1 {
		return 0, nil, corrupt("%d windows in %d bytes", n, len(d.b))
	}
	ws := slices.Grow(dst, int(n))
	var prev int64
	for i := uint64(0); i < n && d.err == nil; i++ {
		start := d.start(i, prev, "window")
		p := d.body(t)
		ws = append(ws, Window{Start: start, Partial: p})
		prev = start
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return 0, nil, d.err
	}
	return t, ws, nil
}

func header(b []byte) (byte, series.Type, []byte, error) {
	if len(b) < 2 {
		return 0, 0, nil, corrupt("truncated header")
	}
	if b[0] != codecVersion && b[0] != codecVersion1 {
		return 0, 0, nil, corrupt("version %d, this tsdht reads %d and %d", b[0], codecVersion1, codecVersion)
	}
	t := series.Type(b[1])
	if t > series.String {
		return 0, 0, nil, corrupt("value type %d", b[1])
	}
	return b[0], t, b[2:], nil
}

// decoder reads from b; the first error sticks and every later read returns zero.
type decoder struct {
	b       []byte
	err     error
	version byte
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = corrupt(format, args...)
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) u64() uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.fail("truncated")
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

// start reads the start of the i-th of a list of ascending windows (or digests): the
// first as a varint, each later one as a non-zero delta from prev.
func (d *decoder) start(i uint64, prev int64, what string) int64 {
	if i == 0 {
		return d.varint()
	}
	delta := d.uvarint()
	start := int64(uint64(prev) + delta)
	if d.err == nil && (delta == 0 || delta > math.MaxInt64 || start <= prev) {
		d.fail("%s starts do not ascend", what)
	}
	return start
}

func (d *decoder) f64() float64 { return math.Float64frombits(d.u64()) }

func (d *decoder) str() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > series.MaxStringValueLen || n > uint64(len(d.b)) {
		d.fail("string of %d bytes in %d", n, len(d.b))
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) body(t series.Type) Partial {
	var p Partial
	c := d.uvarint()
	if d.err != nil || c == 0 {
		return p
	}
	if c > math.MaxInt64 || t == series.Unknown {
		d.fail("count %d of type %s", c, t)
		return p
	}
	p.Type, p.Count = t, int64(c)
	p.FirstT = d.varint()
	span := d.uvarint()
	if d.err == nil && span > uint64(math.MaxInt64)-uint64(p.FirstT) {
		d.fail("last time past the end of time")
	}
	p.LastT = p.FirstT + int64(span)
	p.Hash = d.u64()
	switch t {
	case series.Float:
		p.Min, p.Max, p.Sum, p.Comp = d.f64(), d.f64(), d.f64(), d.f64()
		p.M2, p.First, p.Last = d.f64(), d.f64(), d.f64()
	case series.Int:
		p.IMin, p.IMax, p.IFirst, p.ILast = d.varint(), d.varint(), d.varint(), d.varint()
		p.ISum.Hi = d.varint()
		p.ISum.Lo = d.uvarint()
		p.M2 = d.f64()
	case series.String:
		p.SFirst = d.str()
		p.SLast = d.str()
	}
	if d.version >= 2 && (t == series.Float || t == series.Int) {
		mn, mx := d.uvarint(), d.uvarint()
		switch {
		case d.err != nil:
		case mn == 0 && mx == 0:
		case mn == 0 || mx == 0 || mn-1 > span || mx-1 > span:
			d.fail("times of the extremes outside the partial's span")
		default:
			p.MinT, p.MaxT = p.FirstT+int64(mn-1), p.FirstT+int64(mx-1)
			p.HasExtremaT = true
		}
	}
	if d.err != nil {
		return Partial{}
	}
	return p
}

// Wire form of window digests: what a rollup home sends when asked only to vouch for
// windows another home sends in full (wire.RollupReadReq.Digests):
//
//	digests: uvarint n ‖ varint start₀ ‖ uvarint count₀ ‖ 8 bytes hash₀ (LE)
//	         ‖ (uvarint startᵢ − startᵢ₋₁ ‖ uvarint countᵢ ‖ 8 bytes hashᵢ) for i = 1..n−1
//
// Starts strictly ascend and counts are positive (only non-empty windows are listed).

// minDigestBytes is the least a digest takes: a start delta, a count and a hash.
const minDigestBytes = 1 + 1 + 8

// AppendDigestsWire appends the digests (Start, Count, Hash) of ws, strictly ascending
// by Start and non-empty, to dst.
func AppendDigestsWire(dst []byte, ws []Window) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(ws)))
	for i := range ws {
		dst = appendStart(dst, ws, i)
		dst = binary.AppendUvarint(dst, uint64(ws[i].Count))
		dst = binary.LittleEndian.AppendUint64(dst, ws[i].Hash)
	}
	return dst
}

// DecodeDigestsWire decodes what AppendDigestsWire wrote, the whole of b: windows
// whose Partial holds only Count and Hash.
func DecodeDigestsWire(b []byte) ([]Window, error) {
	d := decoder{b: b, version: codecVersion}
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b))/minDigestBytes+1 {
		return nil, corrupt("%d digests in %d bytes", n, len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	ws := make([]Window, 0, n)
	var prev int64
	for i := uint64(0); i < n && d.err == nil; i++ {
		start := d.start(i, prev, "digest")
		c := d.uvarint()
		if d.err == nil && (c == 0 || c > math.MaxInt64) {
			d.fail("digest count %d", c)
		}
		h := d.u64()
		ws = append(ws, Window{Start: start, Partial: Partial{Count: int64(c), Hash: h}})
		prev = start
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return ws, nil
}
