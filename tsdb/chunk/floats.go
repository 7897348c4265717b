package chunk

import (
	"math"
	"math/bits"
)

// A float column is stored in one of three modes, whichever is smallest:
//
//	floatXOR     byte 0, then Gorilla's XOR bit stream, padded to a byte
//	floatDecimal byte 1, exponent e (byte), then an int stream of mantissas m with
//	             value = float64(m) / 10^e, bit for bit
//	float32      byte 2 (chunk version 2 on), then an int stream of the values' float32
//	             bit patterns in monotone order (float32.go); every value is a float32
//	             widened to float64, bit for bit
//
// Measurements come from instruments of finite resolution: a PMU reports frequency to
// the mHz and magnitudes to 5 or 6 significant digits. Such values are decimals, and
// their noise lives in the low mantissa bits that Gorilla's XOR must spell out bit by
// bit (typically 6–7 bytes a point). As scaled integers the same noise is a delta of a
// few units: about one byte a point. Values that are not short decimals (NaN payloads,
// ±Inf, -0, full-precision results of arithmetic) fall back to XOR, which is exact for
// every bit pattern.
//
// Instruments that send float32 (IEEE C37.118's floating-point format) give values
// whose float64 image has 29 zero mantissa bits and no short decimal form: as float32
// patterns in monotone order, their noise is a delta of a few hundred units (float32.go).
const (
	floatXOR     = 0
	floatDecimal = 1
	floatSingle  = 2
)

// maxDecimalExp is the largest decimal exponent tried: 10^15 is exact as a float64.
const maxDecimalExp = 15

// maxMantissa bounds decimal mantissas to integers a float64 holds exactly.
const maxMantissa = 1 << 53

var pow10 = func() (p [maxDecimalExp + 1]float64) {
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// decimalOf returns the mantissa of v at exponent e, and whether v is exactly
// float64(m)/10^e — the decoder's formula, so a value that passes round-trips bit for bit.
func decimalOf(v float64, e int) (int64, bool) {
	m := math.Round(v * pow10[e])
	if !(m >= -maxMantissa && m <= maxMantissa) { // also false for NaN
		return 0, false
	}
	mi := int64(m)
	return mi, math.Float64bits(float64(mi)/pow10[e]) == math.Float64bits(v)
}

// decimalMantissas returns the common exponent and mantissas of vals, or ok=false if
// some value is not a short decimal.
func decimalMantissas(vals []float64, out []int64) (e int, m []int64, ok bool) {
	for _, v := range vals {
		for ; e <= maxDecimalExp; e++ {
			if _, ok := decimalOf(v, e); ok {
				break
			}
		}
		if e > maxDecimalExp {
			return 0, nil, false
		}
	}
	// A value exact at a smaller exponent is almost always exact at a larger one too;
	// check each at the common exponent, since the decoder will use only that one.
	m = out[:0]
	for _, v := range vals {
		mi, ok := decimalOf(v, e)
		if !ok {
			return 0, nil, false
		}
		m = append(m, mi)
	}
	return e, m, true
}

// appendFloats appends the smallest float column encoding of vals; a quick encoder
// (Encoder.Quick) takes the decimal one whenever the values are short decimals.
func appendFloats(dst []byte, vals []float64, s *scratch) []byte {
	if s.ints.quick {
		if e, m, ok := decimalMantissas(vals, s.mant); ok {
			s.mant = m
			return appendInts(append(dst, floatDecimal, byte(e)), m, &s.ints)
		}
	}
	best := appendXOR(append(s.floatBuf[:0], floatXOR), vals)
	s.floatBuf = best
	e, m, ok := decimalMantissas(vals, s.mant)
	s.mant = m
	if ok {
		dec := appendInts(append(s.decBuf[:0], floatDecimal, byte(e)), m, &s.ints)
		s.decBuf = dec
		if len(dec) < len(best) {
			best = dec
		}
	}
	if m, ok := singles(vals, s.mant); ok {
		s.mant = m
		single := appendInts(append(s.singleBuf[:0], floatSingle), m, &s.ints)
		s.singleBuf = single
		if len(single) < len(best) {
			best = single
		}
	}
	return append(dst, best...)
}

// appendXOR writes vals as Gorilla XOR: the first value's 64 bits; then per value a 0
// bit if it repeats the previous one, else a 1 bit and the XOR's meaningful bits,
// either inside the previous window ("0" + bits) or with a new window ("1" + 6 bits of
// leading zeros + 6 bits of length−1 + bits).
func appendXOR(dst []byte, vals []float64) []byte {
	w := bitWriter{buf: dst}
	prev := math.Float64bits(vals[0])
	w.write(prev, 64)
	prevLead, prevTrail := uint(65), uint(0) // no window yet
	for _, f := range vals[1:] {
		cur := math.Float64bits(f)
		x := cur ^ prev
		prev = cur
		if x == 0 {
			w.bit(false)
			continue
		}
		w.bit(true)
		lead, trail := uint(bits.LeadingZeros64(x)), uint(bits.TrailingZeros64(x))
		if prevLead <= 64 && lead >= prevLead && trail >= prevTrail {
			w.bit(false)
			w.write(x>>prevTrail, 64-prevLead-prevTrail)
			continue
		}
		sig := 64 - lead - trail
		w.bit(true)
		w.write(uint64(lead), 6)
		w.write(uint64(sig-1), 6)
		w.write(x>>trail, sig)
		prevLead, prevTrail = lead, trail
	}
	return w.flush()
}

// decodeFloats reads a float column of n values in chunk version ver and returns the
// rest of b.
func decodeFloats(b []byte, n int, out []float64, s *scratch, ver byte) ([]float64, []byte, error) {
	if len(b) < 1 {
		return out, nil, errShort
	}
	switch b[0] {
	case floatXOR:
		return decodeXOR(b[1:], n, out)
	case floatDecimal:
		if len(b) < 2 || b[1] > maxDecimalExp {
			return out, nil, corrupt("decimal exponent")
		}
		p := pow10[b[1]]
		m, rest, err := decodeInts(b[2:], n, s.mant, ver)
		s.mant = m
		if err != nil {
			return out, nil, err
		}
		for _, mi := range m {
			out = append(out, float64(mi)/p)
		}
		return out, rest, nil
	case floatSingle:
		if ver < 2 {
			break
		}
		m, rest, err := decodeInts(b[1:], n, s.mant, ver)
		s.mant = m
		if err != nil {
			return out, nil, err
		}
		for _, mi := range m {
			u, ok := fromMonotone(mi)
			if !ok {
				return out, nil, corrupt("float32 pattern out of range")
			}
			out = append(out, math.Float64frombits(widen(u)))
		}
		return out, rest, nil
	}
	return out, nil, corrupt("float mode %d", b[0])
}

// decodeXOR reads n XOR-encoded values; the bit stream ends at a byte boundary.
func decodeXOR(b []byte, n int, out []float64) ([]float64, []byte, error) {
	// Every value after the first takes at least one bit.
	if uint64(n-1) > uint64(len(b))*8 {
		return out, nil, errShort
	}
	r := bitReader{b: b}
	prev := r.read(64)
	out = append(out, math.Float64frombits(prev))
	lead, trail := uint(65), uint(0)
	for i := 1; i < n && !r.short; i++ {
		if r.read(1) == 1 {
			if r.read(1) == 1 {
				lead = uint(r.read(6))
				sig := uint(r.read(6)) + 1
				if lead+sig > 64 {
					return out, nil, corrupt("xor window")
				}
				trail = 64 - lead - sig
			} else if lead > 64 {
				return out, nil, corrupt("xor window reused before set")
			}
			prev ^= r.read(64-lead-trail) << trail
		}
		out = append(out, math.Float64frombits(prev))
	}
	if r.short {
		return out, nil, errShort
	}
	return out, b[r.bytesUsed():], nil
}
