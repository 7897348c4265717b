package chunk

import "math"

// Float32 values in a float64 column. The conversions are integer arithmetic on bit
// patterns, not the CPU's: widening a float32 NaN in hardware may set its quiet bit
// (amd64 does, ARM depends on its FPSCR), and a chunk written on one machine must
// decode to the same bits on every other.

// narrow returns the float32 bit pattern whose widening is exactly the float64 bit
// pattern b, and whether there is one: b's mantissa must end in 29 zero bits (fewer
// for float32 subnormals) and its exponent fit float32's range. NaN payloads, ±Inf
// and -0 narrow too.
func narrow(b uint64) (uint32, bool) {
	sign := uint32(b>>63) << 31
	exp := int(b>>52) & 0x7ff
	mant := b & (1<<52 - 1)
	switch {
	case exp == 0x7ff: // ±Inf, NaN: the payload's top 23 bits
		if mant&(1<<29-1) != 0 {
			return 0, false
		}
		return sign | 0xff<<23 | uint32(mant>>29), true
	case exp == 0:
		return sign, mant == 0 // ±0; float64 subnormals are far below float32's range
	}
	e := exp - 1023
	switch {
	case e >= -126 && e <= 127: // a float32 normal
		if mant&(1<<29-1) != 0 {
			return 0, false
		}
		return sign | uint32(e+127)<<23 | uint32(mant>>29), true
	case e >= -149 && e < -126: // a float32 subnormal: m × 2^-149
		full := mant | 1<<52
		shift := uint(-e - 97) // 30..52
		if full&(1<<shift-1) != 0 {
			return 0, false
		}
		return sign | uint32(full>>shift), true
	}
	return 0, false
}

// widen returns the float64 bit pattern of float32 pattern u, exactly.
func widen(u uint32) uint64 {
	sign := uint64(u>>31) << 63
	exp := int(u>>23) & 0xff
	mant := uint64(u & (1<<23 - 1))
	switch {
	case exp == 0xff:
		return sign | 0x7ff<<52 | mant<<29
	case exp == 0 && mant == 0:
		return sign
	case exp == 0: // subnormal: normalise
		e := -126
		for mant&(1<<23) == 0 {
			mant <<= 1
			e--
		}
		return sign | uint64(e+1023)<<52 | (mant&(1<<23-1))<<29
	}
	return sign | uint64(exp-127+1023)<<52 | mant<<29
}

// toMonotone maps a float32 pattern to an integer in [-2^31, 2^31) that orders as the
// values do (+0 is 0, -0 is -1, NaNs at the ends): close values get close integers,
// so a noisy reading differences to small residuals whatever its sign.
func toMonotone(u uint32) int64 {
	if u>>31 == 0 {
		return int64(u)
	}
	return -int64(u&(1<<31-1)) - 1
}

// fromMonotone inverts toMonotone; false if m is out of its range.
func fromMonotone(m int64) (uint32, bool) {
	switch {
	case m >= 0 && m < 1<<31:
		return uint32(m), true
	case m < 0 && m >= -1<<31:
		return uint32(-(m + 1)) | 1<<31, true
	}
	return 0, false
}

// singles returns the monotone float32 integers of vals, or false if some value is not
// a widened float32.
func singles(vals []float64, out []int64) ([]int64, bool) {
	out = out[:0]
	for _, v := range vals {
		u, ok := narrow(math.Float64bits(v))
		if !ok {
			return out, false
		}
		out = append(out, toMonotone(u))
	}
	return out, true
}
