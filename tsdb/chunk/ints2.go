package chunk

import (
	"encoding/binary"
	"slices"
)

// A version-2 int stream (what chunks of version 2 hold) extends version 1 (ints.go)
// with differencing at a lag and with centred blocks:
//
//	mode    byte     bits 0-1: order (0 values, 1 deltas, 2 delta-of-deltas)
//	                 bit 2: centred blocks; bits 3-5: lag−1 (lag 1..8)
//	                 bit 6: constant: every residual is the same
//	heads   varint × order·lag  the values the differencing leaves undifferenced, each
//	                 but the first as its difference from the one before
//	scale   uvarint  every residual is a multiple of scale (>= 1); residual/scale is stored
//	constant streams: varint residual/scale, and nothing more
//	other streams: blocks of up to blockLen2 residuals each:
//	          centre varint   only in centred streams: this block's centre minus the
//	                          previous block's (the first block's minus 0)
//	          width, exc, packed, exceptions as in version 1, of zig-zag(residual − centre)
//
// Differencing at lag L subtracts the value L places back, order times. Lag 3 turns a
// 60 Hz clock stamped to the µs (deltas 16667, 16666, 16667 µs, repeating) into a
// constant 50 ms, which a centred block stores in zero bits. Centring subtracts each
// block's median before zig-zag: a noisy reading around a level (order 0) or drifting
// at a steady rate (order 1) then costs the bits of its noise, not of its level or of
// its rate. The encoder tries a handful of (order, centred, lag) modes and keeps the
// smallest output.
const (
	modeOrderMask = 0x03
	modeCentred   = 0x04
	modeLagShift  = 3
	modeLagMask   = 0x38
	modeConstant  = 0x40
	maxLag        = 8
)

// blockLen2 is the number of residuals per block in a version-2 stream: a block's
// header (width, exceptions, centre) is 3 bytes, 0.19 bits a residual.
const blockLen2 = 128

// intModes are the (order, centred, lag) combinations the encoder tries.
var intModes = []struct {
	order, lag int
	centred    bool
}{
	{0, 1, false}, {1, 1, false}, {2, 1, false},
	{0, 1, true}, {1, 1, true}, {2, 1, true},
	{1, 3, true},
}

// intScratch holds the buffers appendInts reuses.
type intScratch struct {
	out  [7][]byte
	prep [4]prepared // one per (order, lag) the modes use
	u    []uint64
	sort []int64
	// noConstant: write no constant streams (Encode's fallback, see maxPointsPerByte).
	noConstant bool
	// quick: try only quickModes of intModes (Encoder.Quick).
	quick bool
}

// quickModes is how many of intModes, from the first, a quick encoder tries.
const quickModes = 3

// prepared is a column differenced at one (order, lag), shared by the modes that
// differ only in centring and by the stream finally written.
type prepared struct {
	order, lag int
	head       []byte  // the heads and the scale, as the stream holds them
	buf        []int64 // r's backing array, heads included
	r          []int64 // the residuals, divided by the scale
	raw        uint64  // gcdRaw of the residuals before division
}

// derivable bounds the values whose residuals' scales are derived from the next
// order's (prepare): below it in magnitude, no difference up to order 2 wraps.
const derivable = 1 << 61

// appendInts appends the smallest version-2 int stream of vals to dst: it sizes each
// mode without writing it, then writes the smallest. Each (order, lag) is
// differenced once, the highest order first, so that a lower order's scale is
// derived from it.
func appendInts(dst []byte, vals []int64, s *intScratch) []byte {
	modes := intModes
	if s.quick {
		modes = intModes[:quickModes]
	}
	small := true
	for _, v := range vals {
		if v >= derivable || v <= -derivable {
			small = false
			break
		}
	}
	// The (order, lag) pairs in use, lag 1 from order 2 down.
	np := 0
	for _, ol := range [...][2]int{{2, 1}, {1, 1}, {0, 1}, {1, 3}} {
		if ol[0]*ol[1] > len(vals) {
			continue
		}
		for _, m := range modes {
			if m.order == ol[0] && m.lag == ol[1] {
				p := &s.prep[np]
				var next *prepared
				if small && ol[1] == 1 && np > 0 && s.prep[np-1].lag == 1 && s.prep[np-1].order == ol[0]+1 {
					next = &s.prep[np-1]
				}
				p.prepare(vals, ol[0], ol[1], next)
				np++
				break
			}
		}
	}
	find := func(order, lag int) *prepared {
		for i := range s.prep[:np] {
			if p := &s.prep[i]; p.order == order && p.lag == lag {
				return p
			}
		}
		return nil
	}
	best, bestSize := -1, 0
	for i, m := range modes {
		p := find(m.order, m.lag)
		if p == nil {
			continue
		}
		var size int
		s.out[0], size = encodeInts(s.out[0][:0], p, m.centred, s, true)
		if best < 0 || size < bestSize {
			best, bestSize = i, size
		}
	}
	m := intModes[best]
	dst, _ = encodeInts(dst, find(m.order, m.lag), m.centred, s, false)
	return dst
}

// prepare differences vals at (order, lag) into p: the heads the differencing leaves,
// the scale (every residual is a multiple of it) and the residuals divided by it.
// next, if not nil, holds the same values at order+1 and lag 1, none of whose
// differences wrapped: the residuals' gcd is then their first's with next's (the
// differences of a sequence and its first element generate the same multiples as the
// sequence), which spares a gcd per value.
func (p *prepared) prepare(vals []int64, order, lag int, next *prepared) {
	p.order, p.lag = order, lag
	head := p.head[:0]
	// Residuals by wrapping subtraction: the decoder's wrapping addition undoes them.
	r := append(p.buf[:0], vals...)
	var prevHead int64
	for k := 0; k < order; k++ {
		for _, h := range r[k*lag : (k+1)*lag] {
			head = binary.AppendVarint(head, h-prevHead)
			prevHead = h
		}
		for i := len(r) - 1; i >= (k+1)*lag; i-- {
			r[i] -= r[i-lag]
		}
	}
	p.buf = r
	r = r[order*lag:]
	switch {
	case next == nil:
		p.raw = gcdRaw(r)
	case len(r) == 0:
		p.raw = 0
	default:
		p.raw = gcd(magnitude(r[0]), next.raw)
	}
	scale := p.raw
	if scale == 0 || scale > 1<<63-1 {
		scale = 1 // as gcdAll
	}
	head = binary.AppendUvarint(head, scale)
	if scale > 1 {
		for i := range r {
			r[i] /= int64(scale)
		}
	}
	p.head, p.r = head, r
}

// encodeInts writes p's residuals as a version-2 int stream, centred or not, and
// returns its size; with dry set it writes only the stream's head and computes the
// size of its blocks without packing them.
func encodeInts(dst []byte, p *prepared, centred bool, s *intScratch, dry bool) ([]byte, int) {
	mode := byte(p.order) | byte(p.lag-1)<<modeLagShift
	if centred {
		mode |= modeCentred
	}
	at := len(dst)
	dst = append(dst, mode)
	dst = append(dst, p.head...)
	r := p.r
	if constant(r) && !s.noConstant {
		dst[at] |= modeConstant
		dst = binary.AppendVarint(dst, r[0])
		return dst, len(dst) - at
	}
	size := len(dst) - at
	var prevCentre int64
	for len(r) > 0 {
		n := min(len(r), blockLen2)
		block := r[:n]
		var c int64
		if centred {
			c = median(block, &s.sort)
			if dry {
				size += varintLen(c - prevCentre)
			} else {
				dst = binary.AppendVarint(dst, c-prevCentre)
			}
			prevCentre = c
		}
		u := s.u[:0]
		for _, v := range block {
			u = append(u, zigzag(v-c))
		}
		s.u = u
		if dry {
			size += blockBytes(u, chooseWidth(u))
		} else {
			dst = packBlock(dst, u)
		}
		r = r[n:]
	}
	if !dry {
		size = len(dst) - at
	}
	return dst, size
}

func varintLen(v int64) int { return uvarintLen(zigzag(v)) }

// constant reports whether r holds at least one value and all its values are equal.
func constant(r []int64) bool {
	for _, v := range r {
		if v != r[0] {
			return false
		}
	}
	return len(r) > 0
}

// medianSample is how many residuals of a block the centre is estimated from.
const medianSample = 16

// median returns the median of up to medianSample residuals spread evenly over r: a
// centre as good as the exact median for noise, at an eighth of the sorting.
func median(r []int64, buf *[]int64) int64 {
	s := (*buf)[:0]
	if len(r) <= medianSample {
		s = append(s, r...)
	} else {
		for i := range medianSample {
			s = append(s, r[i*len(r)/medianSample])
		}
	}
	slices.Sort(s)
	*buf = s
	return s[len(s)/2]
}

// decodeInts reads an int stream of n values in the given chunk version from b into
// out (which it resets) and returns the rest of b. It never reads outside b nor
// allocates more than n values; the caller has bounded n by the input size.
func decodeInts(b []byte, n int, out []int64, ver byte) ([]int64, []byte, error) {
	if ver == 1 {
		return decodeIntsV1(b, n, out)
	}
	out = out[:0]
	if len(b) < 1 {
		return out, nil, errShort
	}
	mode := b[0]
	b = b[1:]
	order, lag, centred := int(mode&modeOrderMask), int(mode&modeLagMask>>modeLagShift)+1, mode&modeCentred != 0
	if order > 2 || mode&^(modeOrderMask|modeCentred|modeLagMask|modeConstant) != 0 || order*lag > n ||
		(mode&modeConstant != 0 && order*lag == n) {
		return out, nil, corrupt("int stream mode %#x for %d values", mode, n)
	}
	heads := order * lag
	if heads > len(b) { // a varint takes at least a byte
		return out, nil, errShort
	}
	if cap(out) < n {
		out = make([]int64, 0, n)
	}
	var head int64
	for range heads {
		v, m := binary.Varint(b)
		if m <= 0 {
			return out, nil, errShort
		}
		head += v
		out = append(out, head)
		b = b[m:]
	}
	scale, m := binary.Uvarint(b)
	if m <= 0 || scale == 0 || scale > 1<<63-1 {
		return out, nil, corrupt("int stream scale")
	}
	b = b[m:]

	res := n - heads
	if mode&modeConstant != 0 {
		c, m := binary.Varint(b)
		if m <= 0 {
			return out, nil, errShort
		}
		b = b[m:]
		for range res {
			out = append(out, c*int64(scale))
		}
		res = 0
	}
	if (res+blockLen2-1)/blockLen2*minBlockBytes > len(b) {
		return out, nil, errShort
	}
	var centre int64
	for res > 0 {
		cnt := min(res, blockLen2)
		if centred {
			d, m := binary.Varint(b)
			if m <= 0 {
				return out, nil, errShort
			}
			centre += d
			b = b[m:]
		}
		base := len(out)
		var err error
		if out, b, err = unpackBlock(b, cnt, out); err != nil {
			return out, nil, err
		}
		for i := base; i < len(out); i++ {
			out[i] = (unzigzag(uint64(out[i])) + centre) * int64(scale)
		}
		res -= cnt
	}
	// Undo the differencing, innermost first.
	for k := order - 1; k >= 0; k-- {
		for i := (k + 1) * lag; i < len(out); i++ {
			out[i] += out[i-lag]
		}
	}
	return out, b, nil
}
