package rpc

import (
	"encoding/binary"
	"fmt"
)

// maxDepth is how deeply arrays and maps may nest in a message.
const maxDepth = 64

// Validate checks that b holds exactly one well-formed msgpack value whose
// declared lengths are all honest: every str, bin and ext length fits in the
// bytes that remain, an array of n elements has at least n bytes left (a map
// of n pairs, 2n) since each element takes at least one, and arrays and maps
// nest at most 64 deep. After it passes, nothing msgpack/v5 allocates from a
// declared length can exceed len(b) elements, and no length can overflow an
// int on 32-bit platforms. The error names the offending offset.
func Validate(b []byte) error {
	end, err := skipValue(b, 0, 0)
	if err != nil {
		return err
	}
	if end != len(b) {
		return fmt.Errorf("rpc: msgpack: %d trailing bytes after the value at offset %d", len(b)-end, end)
	}
	return nil
}

// skipValue checks the msgpack value at b[off:], which sits inside depth
// arrays or maps, and returns the offset just past it.
func skipValue(b []byte, off, depth int) (int, error) {
	if off >= len(b) {
		return 0, malformed(off, "value expected, input ends")
	}
	start := off
	c := b[off]
	off++

	var (
		size    int    // bytes of the length field that follows c
		payload uint64 // bytes of data (str, bin, ext)
		elems   uint64 // values that follow (array, map)
		nested  bool   // c starts an array or a map
		fixed   int    // bytes of data for fixed-size types
	)
	switch {
	case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3: // fixints, nil, bools
		return off, nil
	case c <= 0x8f: // fixmap
		elems, nested = 2*uint64(c&0x0f), true
	case c <= 0x9f: // fixarray
		elems, nested = uint64(c&0x0f), true
	case c <= 0xbf: // fixstr
		payload = uint64(c & 0x1f)
	case c == 0xc4, c == 0xd9: // bin8, str8
		size = 1
	case c == 0xc5, c == 0xda: // bin16, str16
		size = 2
	case c == 0xc6, c == 0xdb: // bin32, str32
		size = 4
	case c == 0xc7, c == 0xc8, c == 0xc9: // ext8/16/32: length, then a type byte
		size = 1 << (c - 0xc7)
		fixed = 1
	case c == 0xca, c == 0xce, c == 0xd2: // float32, uint32, int32
		fixed = 4
	case c == 0xcb, c == 0xcf, c == 0xd3: // float64, uint64, int64
		fixed = 8
	case c == 0xcc, c == 0xd0: // uint8, int8
		fixed = 1
	case c == 0xcd, c == 0xd1: // uint16, int16
		fixed = 2
	case c >= 0xd4 && c <= 0xd8: // fixext1..16: a type byte and 1<<k bytes
		fixed = 1 + 1<<(c-0xd4)
	case c == 0xdc, c == 0xde: // array16, map16
		size, nested = 2, true
	case c == 0xdd, c == 0xdf: // array32, map32
		size, nested = 4, true
	default: // 0xc1 is never used
		return 0, malformed(start, fmt.Sprintf("invalid code %#x", c))
	}

	if size > 0 {
		if len(b)-off < size {
			return 0, malformed(start, fmt.Sprintf("code %#x: length field needs %d bytes, %d remain", c, size, len(b)-off))
		}
		var n uint64
		switch size {
		case 1:
			n = uint64(b[off])
		case 2:
			n = uint64(binary.BigEndian.Uint16(b[off:]))
		case 4:
			n = uint64(binary.BigEndian.Uint32(b[off:]))
		}
		off += size
		switch c {
		case 0xdc, 0xdd:
			elems = n
		case 0xde, 0xdf:
			elems = 2 * n
		default:
			payload = n
		}
	}

	remain := uint64(len(b) - off)
	if want := payload + uint64(fixed); want > remain {
		return 0, malformed(start, fmt.Sprintf("code %#x declares %d bytes, %d remain", c, want, remain))
	}
	off += int(payload) + fixed // fits: at most len(b)
	if nested && depth >= maxDepth {
		return 0, malformed(start, fmt.Sprintf("nested deeper than %d", maxDepth))
	}
	if elems > remain {
		return 0, malformed(start, fmt.Sprintf("code %#x declares %d values, only %d bytes remain", c, elems, remain))
	}
	for ; elems > 0; elems-- {
		var err error
		if off, err = skipValue(b, off, depth+1); err != nil {
			return 0, err
		}
	}
	return off, nil
}

func malformed(off int, what string) error {
	return fmt.Errorf("rpc: msgpack at offset %d: %s", off, what)
}
