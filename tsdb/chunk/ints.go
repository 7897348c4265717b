package chunk

import (
	"encoding/binary"
	"math/bits"
)

// A version-1 int stream (chunks of version 1; version 2 is in ints2.go) holds a column of n int64 values (timestamps, int values, decimal
// mantissas, string lengths or dictionary indices):
//
//	order   byte     0 = values, 1 = deltas, 2 = delta-of-deltas
//	heads   varint×order  the first value, then the first delta (order 2)
//	scale   uvarint  every residual is a multiple of scale (>= 1); residual/scale is stored
//	blocks  of up to blockLen residuals each:
//	          width  byte     bits per packed residual (0..64)
//	          exc    uvarint  number of exceptions (absent when width is 64)
//	          packed ceil(count*width/8) bytes: low width bits of each zig-zagged residual
//	          exc × (index byte, uvarint high bits) for residuals wider than width
//
// The encoder tried each order and kept the smallest output: deltas suit counters
// and noisy readings, delta-of-deltas suit regular timestamps (a steady 60 Hz clock
// yields all-zero residuals: a block costs two bytes for 64 points), raw values suit
// small codes such as dictionary indices. The scale absorbs a timestamp resolution
// coarser than 1 ns (µs-stamped PMU frames make residuals multiples of 1000), so
// a few µs of jitter costs a few bits. Patched blocks (exceptions) keep one outlier, a
// gap in the data say, from widening a whole block. Arithmetic wraps modulo 2⁶⁴, so
// every int64 sequence, extremes included, round-trips exactly.

// blockLen is the number of residuals per packed block.
const blockLen = 64

// minBlockBytes is the fewest bytes an encoded block can take (width and exception
// count); the decoder bounds its allocations with it.
const minBlockBytes = 2

func zigzag(v int64) uint64   { return uint64(v<<1) ^ uint64(v>>63) }
func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

// gcdAll returns the greatest common divisor of the residuals' magnitudes, or 1 if it
// would not fit an int64 (only all-zero or all-MinInt64 columns get there).
func gcdAll(r []int64) uint64 {
	if g := gcdRaw(r); g != 0 && g <= 1<<63-1 {
		return g
	}
	return 1
}

// gcdRaw returns the greatest common divisor of the residuals' magnitudes: 0 when they
// are all 0 (or there are none), 1<<63 for MinInt64s alone.
func gcdRaw(r []int64) uint64 {
	var g uint64
	for _, v := range r {
		if a := magnitude(v); a != g { // a steady clock's deltas are all the same
			if g = gcd(g, a); g == 1 {
				return 1
			}
		}
	}
	return g
}

// magnitude is |v|, MinInt64's being 1<<63.
func magnitude(v int64) uint64 {
	if v < 0 {
		return -uint64(v)
	}
	return uint64(v)
}

// gcd is the binary (Stein's) greatest common divisor, gcd(0, b) = b: shifts and
// subtractions only. Every block of every chunk goes through it, and a 32-bit ARM
// core has no 64-bit divide instruction (a Cortex-A8 has no divide instruction at
// all), so Euclid's remainders would each be a call into the runtime's software
// division.
func gcd(a, b uint64) uint64 {
	if a == 0 {
		return b
	}
	if b == 0 {
		return a
	}
	shift := bits.TrailingZeros64(a | b)
	a >>= bits.TrailingZeros64(a)
	for b != 0 {
		b >>= bits.TrailingZeros64(b)
		if a > b {
			a, b = b, a
		}
		b -= a
	}
	return a << shift
}

// chooseWidth returns the packing width that minimises the block of unsigned
// residuals u: every residual wider than it becomes an exception.
func chooseWidth(u []uint64) int {
	var hist [65]int // residuals by bit length
	maxLen := 0
	for _, v := range u {
		l := bits.Len64(v)
		hist[l]++
		maxLen = max(maxLen, l)
	}
	var lensBuf [65]int
	lens := lensBuf[:0] // the bit lengths that occur, usually a handful
	for l := 0; l <= maxLen; l++ {
		if hist[l] > 0 {
			lens = append(lens, l)
		}
	}
	width, bestCost := maxLen, len(u)*maxLen
	for w := 0; w < maxLen; w++ {
		// Every residual wider than w becomes an exception: an index byte and its high
		// b-w bits as a uvarint, 7 bits a byte.
		cost, wider := len(u)*w, 0
		for _, b := range lens {
			if b > w {
				cost += hist[b] * 8 * (1 + (b-w+6)/7)
				wider += hist[b]
			}
		}
		cost += 8 * uvarintLen(uint64(wider))
		if cost < bestCost {
			width, bestCost = w, cost
		}
	}
	return width
}

// blockBytes returns the size packBlock gives the block u at width.
func blockBytes(u []uint64, width int) int {
	n := 1 + (len(u)*width+7)/8
	if width < 64 {
		exc := 0
		for _, v := range u {
			if bits.Len64(v) > width {
				exc++
				n += 1 + uvarintLen(v>>uint(width))
			}
		}
		n += uvarintLen(uint64(exc))
	}
	return n
}

// packBlock writes width, exception count, packed bits and exceptions of the unsigned
// residuals u, at the width that minimises the block's size.
func packBlock(dst []byte, u []uint64) []byte {
	width := chooseWidth(u)
	dst = append(dst, byte(width))
	if width < 64 {
		exc := 0
		for _, v := range u {
			if bits.Len64(v) > width {
				exc++
			}
		}
		dst = binary.AppendUvarint(dst, uint64(exc))
	}
	bw := bitWriter{buf: dst}
	for _, v := range u {
		bw.write(v, uint(width))
	}
	dst = bw.flush()
	if width < 64 {
		for i, v := range u {
			if bits.Len64(v) > width {
				dst = append(dst, byte(i))
				dst = binary.AppendUvarint(dst, v>>uint(width))
			}
		}
	}
	return dst
}

func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

// decodeIntsV1 reads a version-1 int stream of n values from b into out (which it
// resets) and returns the rest of b. It never reads outside b nor allocates more than n
// values; the caller has bounded n by the input size.
func decodeIntsV1(b []byte, n int, out []int64) ([]int64, []byte, error) {
	out = out[:0]
	if len(b) < 1 {
		return out, nil, errShort
	}
	order := int(b[0])
	b = b[1:]
	if order > 2 || order > n {
		return out, nil, corrupt("int stream order %d for %d values", order, n)
	}
	var heads [2]int64
	for k := 0; k < order; k++ {
		v, m := binary.Varint(b)
		if m <= 0 {
			return out, nil, errShort
		}
		heads[k] = v
		b = b[m:]
	}
	scale, m := binary.Uvarint(b)
	if m <= 0 || scale == 0 || scale > 1<<63-1 {
		return out, nil, corrupt("int stream scale")
	}
	b = b[m:]

	res := n - order
	if (res+blockLen-1)/blockLen*minBlockBytes > len(b) {
		return out, nil, errShort
	}
	if cap(out) < n {
		out = make([]int64, 0, n)
	}
	out = append(out, heads[:order]...)
	for res > 0 {
		cnt := min(res, blockLen)
		var err error
		if out, b, err = decodeBlock(b, cnt, int64(scale), out); err != nil {
			return out, nil, err
		}
		res -= cnt
	}
	// Undo the differencing, innermost first: delta-of-deltas become deltas, then values.
	for k := order - 1; k >= 0; k-- {
		for i := k + 1; i < len(out); i++ {
			out[i] += out[i-1]
		}
	}
	return out, b, nil
}

// decodeBlock appends cnt residuals of a version-1 stream (times scale) to out.
func decodeBlock(b []byte, cnt int, scale int64, out []int64) ([]int64, []byte, error) {
	base := len(out)
	out, b, err := unpackBlock(b, cnt, out)
	if err != nil {
		return out, nil, err
	}
	for i := base; i < len(out); i++ {
		out[i] = unzigzag(uint64(out[i])) * scale
	}
	return out, b, nil
}

// unpackBlock reads what packBlock wrote: it appends cnt unsigned residuals to out
// (as int64 bit patterns) and returns the rest of b.
func unpackBlock(b []byte, cnt int, out []int64) ([]int64, []byte, error) {
	if len(b) < 1 {
		return out, nil, errShort
	}
	width := uint(b[0])
	b = b[1:]
	if width > 64 {
		return out, nil, corrupt("block width %d", width)
	}
	var nexc uint64
	if width < 64 {
		var m int
		nexc, m = binary.Uvarint(b)
		if m <= 0 || nexc > uint64(cnt) {
			return out, nil, corrupt("block exception count")
		}
		b = b[m:]
	}
	packed := (cnt*int(width) + 7) / 8
	if packed > len(b) {
		return out, nil, errShort
	}
	br := bitReader{b: b[:packed]}
	base := len(out)
	for i := 0; i < cnt; i++ {
		out = append(out, int64(br.read(width)))
	}
	b = b[packed:]
	prev := -1
	for k := uint64(0); k < nexc; k++ {
		if len(b) < 1 {
			return out, nil, errShort
		}
		i := int(b[0])
		hi, m := binary.Uvarint(b[1:])
		if m <= 0 || i >= cnt || i <= prev || hi == 0 || bits.Len64(hi)+int(width) > 64 {
			return out, nil, corrupt("block exception")
		}
		prev = i
		out[base+i] |= int64(hi << width)
		b = b[1+m:]
	}
	return out, b, nil
}
