package series

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
)

// The packed form of Points is what reads send over the network when the reader asks for
// it: a 60 Hz PMU channel costs about 2 bytes a point instead of the 12 of the msgpack
// form (4 for a timestamp delta, 8 for a float), which is what bounds a long read on a
// 100 Mbit LAN. It is cheap to make — one pass, no search over encodings — because a
// replica makes it for every read, unlike the sealed-chunk codec (package chunk), which
// compresses harder at ~10× the CPU.
//
//	version byte (1) ‖ type byte ‖ uvarint n
//	timestamps: varint t0, then n-1 zig-zag varint delta-of-deltas
//	Float: byte k; k <= maxDecimals: the values are v·10^k exactly, sent as zig-zag
//	       varint deltas of those integers; k = rawFloats: 8 little-endian bytes each;
//	       k = bitDeltas (version 2 only): byte s, then zig-zag varint deltas of each
//	       value's bits read as a signed magnitude (sign bit → sign) shifted right by s,
//	       the trailing zero bits every value has: a float32 reading (what C37.118 PMUs
//	       send) has 29 of them, and neighbouring readings share their high bits
//	Int:   zig-zag varint deltas
//	String: uvarint length ‖ bytes, each
//
// Every count is checked against the bytes that remain before anything is allocated,
// so a hostile or corrupt input cannot make the decoder allocate more than a small
// multiple of its size; decoding never panics.
//
// Version 2 differs from version 1 only by the bitDeltas float form. A writer uses it
// only for a reader that said it decodes version 2 (AppendPackedFor); the decoder reads
// both.
const packedVersion = 1

// PackedVersion is the newest packed form this package writes and reads. A reader
// sends it with its request (wire.ShardRead.PackedVersion) so that a replica answers in
// a form the reader decodes, whichever of them was upgraded first.
const PackedVersion = 2

const (
	maxDecimals = 9    // 10^9 · |v| must stay below 2^53 for the integers to be exact
	rawFloats   = 0xff // the values had no common decimal scale
	bitDeltas   = 0xfe // version 2: deltas of the values' bits as signed magnitudes
)

var pow10 = [maxDecimals + 1]float64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9}

// AppendPacked appends the packed form of p to dst, in version 1, which every reader
// decodes. p must be valid.
func AppendPacked(dst []byte, p *Points) []byte { return AppendPackedFor(dst, p, packedVersion) }

// AppendPackedFor appends the packed form of p to dst for a reader that decodes packed
// versions up to v (below 1 counts as 1, above PackedVersion as PackedVersion): the
// smallest form that reader decodes. p must be valid.
func AppendPackedFor(dst []byte, p *Points, v int) []byte {
	v = min(max(v, packedVersion), PackedVersion)
	n := p.Len()
	head := len(dst)
	dst = append(dst, packedVersion, byte(p.Type))
	dst = binary.AppendUvarint(dst, uint64(n))
	if n == 0 {
		return dst
	}
	dst = binary.AppendVarint(dst, p.T[0])
	var prev, delta int64 = p.T[0], 0
	for _, t := range p.T[1:] {
		d := t - prev
		dst = binary.AppendVarint(dst, d-delta) // wraps on overflow, and unwraps the same way
		prev, delta = t, d
	}
	switch p.Type {
	case Float:
		if k, ok := decimalScale(p.F); ok {
			dst = append(dst, byte(k))
			var prev int64
			for _, v := range p.F {
				m := int64(math.Round(v * pow10[k]))
				dst = binary.AppendVarint(dst, m-prev)
				prev = m
			}
		} else {
			mark := len(dst)
			if v >= 2 {
				if d, ok := appendBitDeltas(dst, p.F); ok && len(d)-mark < 1+8*n {
					d[head] = 2 // the one form version 1 lacks
					return d
				}
				dst = dst[:mark]
			}
			dst = append(dst, rawFloats)
			for _, v := range p.F {
				dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(v))
			}
		}
	case Int:
		dst = appendDeltas(dst, p.I)
	case String:
		for _, s := range p.S {
			dst = binary.AppendUvarint(dst, uint64(len(s)))
			dst = append(dst, s...)
		}
	}
	return dst
}

// signedBits returns the bits of v as a signed magnitude: the sign bit gives the sign
// of the rest, so that values either side of zero are near each other, and a value's
// trailing zero bits stay trailing zeros. -0 has none of its own (it is 0): the caller
// sends such values otherwise.
func signedBits(v float64) int64 {
	b := math.Float64bits(v)
	m := int64(b &^ (1 << 63))
	if b>>63 != 0 {
		return -m
	}
	return m
}

// fromSignedBits inverts signedBits.
func fromSignedBits(m int64) float64 {
	if m < 0 {
		return math.Float64frombits(uint64(-m) | 1<<63)
	}
	return math.Float64frombits(uint64(m))
}

// appendBitDeltas appends the bitDeltas form of vs (the form byte, the shift, the
// deltas); false if some value is -0, which it cannot carry.
func appendBitDeltas(dst []byte, vs []float64) ([]byte, bool) {
	// The trailing zeros every value has are those of all their bits or-ed (a
	// magnitude's trailing zeros are its negation's).
	var all uint64
	for _, v := range vs {
		b := math.Float64bits(v)
		if b == 1<<63 { // -0
			return dst, false
		}
		all |= b &^ (1 << 63)
	}
	shift := min(63, bits.TrailingZeros64(all))
	dst = append(dst, bitDeltas, byte(shift))
	var prev int64
	for _, v := range vs {
		m := signedBits(v) >> shift
		dst = binary.AppendVarint(dst, m-prev) // wraps on overflow, and unwraps the same way
		prev = m
	}
	return dst, true
}

// decimalScale returns the smallest k <= maxDecimals such that every value is exactly
// an integer times 10^-k: float64(round(v·10^k)) / 10^k has v's bits, and the integer is
// below 2^53. The scale only grows along the batch, so a value usually costs one check.
func decimalScale(vs []float64) (int, bool) {
	k := 0
	for _, v := range vs {
		for !exactAt(v, k) {
			if k++; k > maxDecimals {
				return 0, false
			}
		}
	}
	return k, true
}

// exactAt reports whether v survives the trip through an integer at scale k, bit for
// bit: the decoder computes float64(m) / 10^k. (-0 does not: the integer has no sign.)
func exactAt(v float64, k int) bool {
	m := math.Round(v * pow10[k])
	return math.Abs(m) < 1<<53 && math.Float64bits(float64(int64(m))/pow10[k]) == math.Float64bits(v)
}

// DecodePacked returns the points of a packed buffer; the result owns its memory.
func DecodePacked(b []byte) (Points, error) {
	bad := func(what string) (Points, error) {
		return Points{}, fmt.Errorf("%w: packed points: %s", errWire, what)
	}
	if len(b) < 2 {
		return bad("truncated header")
	}
	version := b[0]
	if version < packedVersion || version > PackedVersion {
		return bad(fmt.Sprintf("version %d (this build reads 1 to %d)", version, PackedVersion))
	}
	p := Points{Type: Type(b[1])}
	b = b[2:]
	n, k := binary.Uvarint(b)
	// Every point takes at least one byte for its timestamp and one for its value
	// (except a float column sent raw, which takes 8): n is bounded by the input.
	if k <= 0 || n > uint64(len(b)) {
		return bad("point count")
	}
	// No points need not have a type (a replica that holds nothing sends Unknown).
	if p.Type != Float && p.Type != Int && p.Type != String && (p.Type != Unknown || n != 0) {
		return bad(fmt.Sprintf("type %d", p.Type))
	}
	b = b[k:]
	if n == 0 {
		if len(b) != 0 {
			return bad("trailing bytes")
		}
		return p, nil
	}
	p.T = make([]int64, n)
	var prev, delta int64
	for i := range p.T {
		v, k := binary.Varint(b)
		if k <= 0 {
			return bad("timestamp")
		}
		b = b[k:]
		switch i {
		case 0:
			prev = v
		default:
			delta += v
			prev += delta
		}
		p.T[i] = prev
	}
	switch p.Type {
	case Float:
		if len(b) < 1 {
			return bad("float scale")
		}
		scale := b[0]
		b = b[1:]
		p.F = make([]float64, n)
		switch {
		case scale == rawFloats:
			if uint64(len(b)) < 8*n {
				return bad("raw floats")
			}
			for i := range p.F {
				p.F[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
			}
			b = b[8*n:]
		case scale == bitDeltas && version >= 2:
			if len(b) < 1 || b[0] > 63 {
				return bad("bit deltas shift")
			}
			shift := b[0]
			b = b[1:]
			var m int64
			for i := range p.F {
				d, k := binary.Varint(b)
				if k <= 0 {
					return bad("bit delta")
				}
				b = b[k:]
				m += d
				p.F[i] = fromSignedBits(m << shift)
			}
		case scale <= maxDecimals:
			// takeDeltas's loop, converting as it goes: no int slice to allocate.
			var m int64
			for i := range p.F {
				d, k := binary.Varint(b)
				if k <= 0 {
					return bad("scaled float")
				}
				b = b[k:]
				m += d
				p.F[i] = float64(m) / pow10[scale]
			}
		default:
			return bad(fmt.Sprintf("float scale %d", scale))
		}
	case Int:
		p.I = make([]int64, n)
		var ok bool
		if b, ok = takeDeltas(b, p.I); !ok {
			return bad("int")
		}
	case String:
		p.S = make([]string, n)
		for i := range p.S {
			l, k := binary.Uvarint(b)
			if k <= 0 || l > uint64(len(b)-k) {
				return bad("string")
			}
			p.S[i] = string(b[k : k+int(l)])
			b = b[k+int(l):]
		}
	}
	if len(b) != 0 {
		return bad("trailing bytes")
	}
	if err := p.Valid(); err != nil {
		return Points{}, err
	}
	return p, nil
}

// takeDeltas fills out with the running sums of len(out) varint deltas from b, as
// appendDeltas wrote them, and returns the rest of b; false if b runs short.
func takeDeltas(b []byte, out []int64) ([]byte, bool) {
	var v int64
	for i := range out {
		d, k := binary.Varint(b)
		if k <= 0 {
			return b, false
		}
		b = b[k:]
		v += d
		out[i] = v
	}
	return b, true
}
