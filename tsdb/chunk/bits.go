package chunk

import "encoding/binary"

// bitWriter packs values least-significant bit first into a byte slice. After every
// write fewer than 8 bits stay pending, so one write of up to 56 bits fits the
// accumulator; wider values are written in two halves.
type bitWriter struct {
	buf []byte
	acc uint64 // pending bits, low-aligned
	n   uint   // number of pending bits, < 8 between calls
}

// write appends the low n bits of v (n <= 64).
func (w *bitWriter) write(v uint64, n uint) {
	if n > 56 {
		w.write(v&(1<<32-1), 32)
		v >>= 32
		n -= 32
	}
	if n < 64 {
		v &= 1<<n - 1
	}
	w.acc |= v << w.n
	w.n += n
	for w.n >= 8 {
		w.buf = append(w.buf, byte(w.acc))
		w.acc >>= 8
		w.n -= 8
	}
}

// bit appends one bit.
func (w *bitWriter) bit(b bool) {
	if b {
		w.write(1, 1)
	} else {
		w.write(0, 1)
	}
}

// flush pads the pending bits with zeros to a whole byte and returns the buffer.
func (w *bitWriter) flush() []byte {
	if w.n > 0 {
		w.buf = append(w.buf, byte(w.acc))
		w.acc, w.n = 0, 0
	}
	return w.buf
}

// bitReader reads what bitWriter wrote. Reading past the end sets short instead of
// panicking: callers check it once after a run of reads, which keeps hot loops free of
// error plumbing while hostile input still cannot index out of range.
type bitReader struct {
	b     []byte
	pos   uint64 // next bit to read
	short bool   // a read ran past the end of b
}

// read returns the next n bits (n <= 64).
func (r *bitReader) read(n uint) uint64 {
	if n > 56 {
		lo := r.read(32)
		return lo | r.read(n-32)<<32
	}
	if r.short || r.pos+uint64(n) > uint64(len(r.b))*8 {
		r.short = true
		return 0
	}
	i := r.pos >> 3
	var acc uint64
	if i+8 <= uint64(len(r.b)) {
		acc = binary.LittleEndian.Uint64(r.b[i:])
	} else {
		for k := uint64(0); i+k < uint64(len(r.b)); k++ {
			acc |= uint64(r.b[i+k]) << (8 * k)
		}
	}
	v := acc >> (r.pos & 7)
	r.pos += uint64(n)
	if n == 0 {
		return 0
	}
	return v & (1<<n - 1)
}

// bytesUsed is the number of whole bytes the reads so far have touched.
func (r *bitReader) bytesUsed() int { return int((r.pos + 7) >> 3) }
