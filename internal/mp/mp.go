// Package mp writes and reads the few msgpack forms of tsdht's hot messages by hand:
// a single-point write crosses seven replicas, and msgpack/v5's reflection cost more
// CPU per write than the replicas' stores. Writers produce exactly what msgpack/v5
// produces with compact integers, so a peer decoding by reflection reads the same
// values. Readers check every length against the bytes that remain before they
// slice or allocate, and answer false on anything unexpected: their callers then
// decode the message the general way (rpc.Decode), which validates it and says what
// is wrong.
package mp

import (
	"encoding/binary"
	"math"
)

// AppendUint appends v in its most compact unsigned form.
func AppendUint(dst []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(dst, byte(v))
	case v <= math.MaxUint8:
		return append(dst, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(dst, 0xce), uint32(v))
	default:
		return binary.BigEndian.AppendUint64(append(dst, 0xcf), v)
	}
}

// AppendInt appends v in its most compact form, as msgpack/v5's EncodeInt with
// compact integers: unsigned forms for v ≥ 0.
func AppendInt(dst []byte, v int64) []byte {
	switch {
	case v >= 0:
		return AppendUint(dst, uint64(v))
	case v >= -32:
		return append(dst, byte(v))
	case v >= math.MinInt8:
		return append(dst, 0xd0, byte(v))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(dst, 0xd1), uint16(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(dst, 0xd2), uint32(v))
	default:
		return binary.BigEndian.AppendUint64(append(dst, 0xd3), uint64(v))
	}
}

// AppendUint8 appends v as a uint8 (msgpack/v5's EncodeUint8: always two bytes).
func AppendUint8(dst []byte, v uint8) []byte { return append(dst, 0xcc, v) }

// AppendStr appends s as a str.
func AppendStr(dst []byte, s string) []byte {
	n := len(s)
	switch {
	case n <= 31:
		dst = append(dst, 0xa0|byte(n))
	case n <= math.MaxUint8:
		dst = append(dst, 0xd9, byte(n))
	case n <= math.MaxUint16:
		dst = binary.BigEndian.AppendUint16(append(dst, 0xda), uint16(n))
	default:
		dst = binary.BigEndian.AppendUint32(append(dst, 0xdb), uint32(n))
	}
	return append(dst, s...)
}

// AppendBinHeader appends the header of a bin of n bytes.
func AppendBinHeader(dst []byte, n int) []byte {
	switch {
	case n <= math.MaxUint8:
		return append(dst, 0xc4, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xc5), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(dst, 0xc6), uint32(n))
	}
}

// AppendBin appends p as a bin; a nil p as nil, as msgpack/v5 encodes a nil []byte.
func AppendBin(dst []byte, p []byte) []byte {
	if p == nil {
		return append(dst, 0xc0)
	}
	return append(AppendBinHeader(dst, len(p)), p...)
}

// AppendArrayLen appends the header of an array of n elements.
func AppendArrayLen(dst []byte, n int) []byte {
	switch {
	case n <= 15:
		return append(dst, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xdc), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(dst, 0xdd), uint32(n))
	}
}

// AppendMapLen appends the header of a map of n pairs.
func AppendMapLen(dst []byte, n int) []byte {
	switch {
	case n <= 15:
		return append(dst, 0x80|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xde), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(dst, 0xdf), uint32(n))
	}
}

// Reader reads msgpack values from B at Off. Each method answers false, and
// leaves Off anywhere, when the next value is not of the form asked or its
// declared length does not fit in what remains.
type Reader struct {
	B   []byte
	Off int
}

// Left returns how many bytes remain.
func (r *Reader) Left() int { return len(r.B) - r.Off }

func (r *Reader) next() (byte, bool) {
	if r.Off >= len(r.B) {
		return 0, false
	}
	c := r.B[r.Off]
	r.Off++
	return c, true
}

// take returns the next n bytes (aliasing B) and moves past them.
func (r *Reader) take(n uint64) ([]byte, bool) {
	if n > uint64(r.Left()) {
		return nil, false
	}
	p := r.B[r.Off : r.Off+int(n) : r.Off+int(n)]
	r.Off += int(n)
	return p, true
}

func (r *Reader) length(size int) (uint64, bool) {
	p, ok := r.take(uint64(size))
	if !ok {
		return 0, false
	}
	switch size {
	case 1:
		return uint64(p[0]), true
	case 2:
		return uint64(binary.BigEndian.Uint16(p)), true
	case 4:
		return uint64(binary.BigEndian.Uint32(p)), true
	}
	return binary.BigEndian.Uint64(p), true
}

// MapLen reads a map header. Each pair takes at least two bytes, so a length
// that the bytes left cannot hold is refused.
func (r *Reader) MapLen() (int, bool) {
	c, ok := r.next()
	var n uint64
	switch {
	case !ok:
		return 0, false
	case c >= 0x80 && c <= 0x8f:
		n = uint64(c & 0x0f)
	case c == 0xde:
		n, ok = r.length(2)
	case c == 0xdf:
		n, ok = r.length(4)
	default:
		return 0, false
	}
	if !ok || n > uint64(r.Left())/2 {
		return 0, false
	}
	return int(n), true
}

// ArrayLen reads an array header. Each element takes at least one byte, so a
// length that the bytes left cannot hold is refused.
func (r *Reader) ArrayLen() (int, bool) {
	c, ok := r.next()
	var n uint64
	switch {
	case !ok:
		return 0, false
	case c >= 0x90 && c <= 0x9f:
		n = uint64(c & 0x0f)
	case c == 0xdc:
		n, ok = r.length(2)
	case c == 0xdd:
		n, ok = r.length(4)
	default:
		return 0, false
	}
	if !ok || n > uint64(r.Left()) {
		return 0, false
	}
	return int(n), true
}

// StrBytes reads a str and returns its bytes, aliasing B.
func (r *Reader) StrBytes() ([]byte, bool) {
	c, ok := r.next()
	var n uint64
	switch {
	case !ok:
		return nil, false
	case c >= 0xa0 && c <= 0xbf:
		n = uint64(c & 0x1f)
	case c >= 0xd9 && c <= 0xdb:
		n, ok = r.length(1 << (c - 0xd9))
	default:
		return nil, false
	}
	if !ok {
		return nil, false
	}
	return r.take(n)
}

// Bin reads a bin and returns its bytes, aliasing B; nil reads as a nil slice.
func (r *Reader) Bin() ([]byte, bool) {
	c, ok := r.next()
	switch {
	case !ok:
		return nil, false
	case c == 0xc0:
		return nil, true
	case c >= 0xc4 && c <= 0xc6:
		n, ok := r.length(1 << (c - 0xc4))
		if !ok {
			return nil, false
		}
		return r.take(n)
	}
	return nil, false
}

// Int reads any integer form that fits an int64.
func (r *Reader) Int() (int64, bool) {
	c, ok := r.next()
	switch {
	case !ok:
		return 0, false
	case c <= 0x7f:
		return int64(c), true
	case c >= 0xe0:
		return int64(int8(c)), true
	case c >= 0xcc && c <= 0xcf: // uint8..uint64
		v, ok := r.length(1 << (c - 0xcc))
		if !ok || v > math.MaxInt64 {
			return 0, false
		}
		return int64(v), true
	case c >= 0xd0 && c <= 0xd3: // int8..int64
		size := 1 << (c - 0xd0)
		v, ok := r.length(size)
		if !ok {
			return 0, false
		}
		switch size {
		case 1:
			return int64(int8(v)), true
		case 2:
			return int64(int16(v)), true
		case 4:
			return int64(int32(v)), true
		}
		return int64(v), true
	}
	return 0, false
}

// Bool reads a bool.
func (r *Reader) Bool() (bool, bool) {
	c, ok := r.next()
	switch {
	case !ok:
		return false, false
	case c == 0xc2:
		return false, true
	case c == 0xc3:
		return true, true
	}
	return false, false
}

// Uint reads any integer form of a value ≥ 0: what AppendUint writes, and the signed
// forms of non-negative values.
func (r *Reader) Uint() (uint64, bool) {
	if r.Off < len(r.B) && r.B[r.Off] == 0xcf { // uint64: may exceed an int64
		r.Off++
		return r.length(8)
	}
	v, ok := r.Int()
	if !ok || v < 0 {
		return 0, false
	}
	return uint64(v), true
}
