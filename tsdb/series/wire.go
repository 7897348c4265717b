package series

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"
)

// The wire form of Points is hand-written rather than reflected: it is on every hot path,
// and its decoder must never trust a declared count. A batch travels as a msgpack array
// [version, type, times, values]: times are zig-zag varint deltas packed in one bin (a
// 60 Hz stream costs ~4 bytes per timestamp), floats are 8 little-endian bytes each in one
// bin, ints are zig-zag varint deltas in one bin, strings a msgpack array of str. Every
// column's length is implied by bytes actually present, so a hostile frame cannot make
// the decoder allocate more than a small multiple of its own size.
const wireVersion = 1

var errWire = errors.New("malformed points")

// EncodeMsgpack implements msgpack.CustomEncoder.
func (p *Points) EncodeMsgpack(enc *msgpack.Encoder) error {
	if err := enc.EncodeArrayLen(4); err != nil {
		return err
	}
	if err := enc.EncodeUint8(wireVersion); err != nil {
		return err
	}
	if err := enc.EncodeUint8(uint8(p.Type)); err != nil {
		return err
	}
	if err := enc.EncodeBytes(appendDeltas(make([]byte, 0, 4*len(p.T)+8), p.T)); err != nil {
		return err
	}
	switch p.Type {
	case Float:
		b := make([]byte, 8*len(p.F))
		for i, f := range p.F {
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(f))
		}
		return enc.EncodeBytes(b)
	case Int:
		return enc.EncodeBytes(appendDeltas(make([]byte, 0, 2*len(p.I)+8), p.I))
	case String:
		if err := enc.EncodeArrayLen(len(p.S)); err != nil {
			return err
		}
		for _, s := range p.S {
			if err := enc.EncodeString(s); err != nil {
				return err
			}
		}
		return nil
	default:
		return enc.EncodeNil()
	}
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (p *Points) DecodeMsgpack(dec *msgpack.Decoder) error {
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return err
	}
	if n < 4 {
		return fmt.Errorf("%w: %d fields", errWire, n)
	}
	if _, err := dec.DecodeUint8(); err != nil { // version: newer writers append fields
		return err
	}
	t, err := dec.DecodeUint8()
	if err != nil {
		return err
	}
	*p = Points{Type: Type(t)}
	tb, err := dec.DecodeBytes()
	if err != nil {
		return err
	}
	if p.T, err = readDeltas(tb); err != nil {
		return err
	}
	switch p.Type {
	case Float:
		vb, err := dec.DecodeBytes()
		if err != nil {
			return err
		}
		if len(vb) != 8*len(p.T) {
			return fmt.Errorf("%w: %d timestamps but %d bytes of floats", errWire, len(p.T), len(vb))
		}
		p.F = make([]float64, len(p.T))
		for i := range p.F {
			p.F[i] = math.Float64frombits(binary.LittleEndian.Uint64(vb[8*i:]))
		}
	case Int:
		vb, err := dec.DecodeBytes()
		if err != nil {
			return err
		}
		if p.I, err = readDeltas(vb); err != nil {
			return err
		}
	case String:
		m, err := dec.DecodeArrayLen()
		if err != nil {
			return err
		}
		if m != len(p.T) {
			return fmt.Errorf("%w: %d timestamps but %d strings", errWire, len(p.T), m)
		}
		p.S = make([]string, m) // m equals a count already backed by bytes
		for i := range p.S {
			if p.S[i], err = dec.DecodeString(); err != nil {
				return err
			}
		}
	default:
		if err := dec.Skip(); err != nil {
			return err
		}
	}
	for i := 4; i < n; i++ {
		if err := dec.Skip(); err != nil {
			return err
		}
	}
	return p.Valid()
}

func appendDeltas(b []byte, xs []int64) []byte {
	var prev int64
	for _, x := range xs {
		b = binary.AppendVarint(b, x-prev) // wraps on overflow, and unwraps the same way
		prev = x
	}
	return b
}

func readDeltas(b []byte) ([]int64, error) {
	var out []int64
	if len(b) > 0 {
		out = make([]int64, 0, min(len(b)/2+1, 1<<16))
	}
	var prev int64
	for len(b) > 0 {
		d, k := binary.Varint(b)
		if k <= 0 {
			return nil, fmt.Errorf("%w: bad varint", errWire)
		}
		prev += d
		out = append(out, prev)
		b = b[k:]
	}
	return out, nil
}

// WireSize returns an upper bound of the bytes EncodeMsgpack writes for p: a varint
// delta of at most 10 bytes per timestamp, 8 bytes per float, 10 per int, and a string's
// bytes plus a 5-byte header. Senders cut batches by it so that a request stays inside
// an RPC frame whatever the points are.
func (p *Points) WireSize() int {
	n := 32 + 10*len(p.T)
	switch p.Type {
	case Float:
		n += 8 * len(p.F)
	case Int:
		n += 10 * len(p.I)
	case String:
		for _, s := range p.S {
			n += 5 + len(s)
		}
	}
	return n
}

// pointWireSize bounds the bytes point i adds to the encoding (see WireSize).
func (p *Points) pointWireSize(i int) int {
	switch p.Type {
	case Float:
		return 18
	case String:
		return 15 + len(p.S[i])
	}
	return 20
}

// Batches cuts p, in order, into batches of at most maxPoints points (0: no limit) whose
// WireSize stays under maxBytes (a single point larger than that makes a batch alone).
func (p *Points) Batches(maxPoints, maxBytes int) []Points {
	var out []Points
	lo, size := 0, 32
	for i := 0; i < p.Len(); i++ {
		s := p.pointWireSize(i)
		if i > lo && (maxPoints > 0 && i-lo == maxPoints || size+s > maxBytes) {
			out = append(out, p.Slice(lo, i))
			lo, size = i, 32
		}
		size += s
	}
	if lo < p.Len() {
		out = append(out, p.Slice(lo, p.Len()))
	}
	return out
}
