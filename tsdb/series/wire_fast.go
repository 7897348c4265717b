package series

import (
	"encoding/binary"
	"math"

	"github.com/tsdht/tsdht/internal/mp"
)

// AppendWire appends p's wire form (EncodeMsgpack's, byte for byte) to dst, without
// an encoder: the hand-written messages of the write path (wire.AppendWriteReq) embed
// it.
func AppendWire(dst []byte, p *Points) []byte {
	dst = mp.AppendArrayLen(dst, 4)
	dst = mp.AppendUint8(dst, wireVersion)
	dst = mp.AppendUint8(dst, uint8(p.Type))
	dst = appendDeltasBin(dst, p.T)
	switch p.Type {
	case Float:
		dst = mp.AppendBinHeader(dst, 8*len(p.F))
		for _, f := range p.F {
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(f))
		}
		return dst
	case Int:
		return appendDeltasBin(dst, p.I)
	case String:
		dst = mp.AppendArrayLen(dst, len(p.S))
		for _, s := range p.S {
			dst = mp.AppendStr(dst, s)
		}
		return dst
	}
	return append(dst, 0xc0) // nil
}

// appendDeltasBin appends xs as a bin of varint deltas, its header sized exactly.
func appendDeltasBin(dst []byte, xs []int64) []byte {
	n := 0
	var prev int64
	for _, x := range xs {
		n += varintLen(x - prev)
		prev = x
	}
	return appendDeltas(mp.AppendBinHeader(dst, n), xs)
}

func varintLen(v int64) int {
	u := uint64(v) << 1
	if v < 0 {
		u = ^u
	}
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}

// ReadWire reads points in the wire form from r, as DecodeMsgpack does, for the
// forms AppendWire writes (float and int points, or none, of wire version 1, no
// fields added). It answers false, r then anywhere, for anything else — another form, a
// newer version, malformed or invalid points — and the caller decodes the message
// the general way, which says what is wrong. Allocations are bounded by the bytes
// read: at most 4 bytes of timestamps per timestamp byte, 1 per value byte.
func ReadWire(r *mp.Reader, p *Points) bool {
	n, ok := r.ArrayLen()
	if !ok || n != 4 {
		return false
	}
	if v, ok := r.Int(); !ok || v != wireVersion {
		return false
	}
	t, ok := r.Int()
	if !ok || (Type(t) != Float && Type(t) != Int && Type(t) != Unknown) {
		return false
	}
	tb, ok := r.Bin()
	if !ok {
		return false
	}
	vb, ok := r.Bin()
	if !ok {
		return false
	}
	ts, err := readDeltas(tb)
	if err != nil {
		return false
	}
	*p = Points{Type: Type(t), T: ts}
	switch p.Type {
	case Float:
		if len(vb) != 8*len(ts) {
			return false
		}
		p.F = make([]float64, len(ts))
		for i := range p.F {
			p.F[i] = math.Float64frombits(binary.LittleEndian.Uint64(vb[8*i:]))
		}
	case Int:
		if p.I, err = readDeltas(vb); err != nil {
			return false
		}
	}
	return p.Valid() == nil
}
