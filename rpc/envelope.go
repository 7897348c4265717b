package rpc

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/tsdht/tsdht/internal/mp"
)

// An envelope is what every frame carries: a msgpack array whose layout
// depends on its kind.
//
//	request:  [version, 0, id, method, timeout, body]
//	response: [version, 1, id, code, message, body]
//
// timeout is how many nanoseconds the caller will wait (0: not said), so the
// handler stops when nobody waits for it any more. code is "" on success.
// Fields are only ever added at the end; a decoder skips the ones it does not
// know, and version tells a newer decoder which fields an older peer sent.
// Encoding and decoding are written by hand: the envelope is decoded for
// every frame from an untrusted peer, so every length is checked here, and
// it is faster than reflection.
const envelopeVersion = 1

type kind uint8

const (
	kindRequest  kind = 0
	kindResponse kind = 1
)

// envelopeFields is how many fields version 1 has, for either kind.
const envelopeFields = 6

type envelope struct {
	kind kind
	id   uint64

	method  string        // request
	timeout time.Duration // request; 0 when the caller did not say

	code string // response; "" on success
	msg  string // response; the error message when code != ""

	body []byte

	held    hold  // server side: what this request holds of the byte budgets; not sent
	arrived int64 // server side: when its bytes were read, in UNIX nanoseconds; not sent
}

// appendTo appends e's msgpack encoding to dst.
func (e *envelope) appendTo(dst []byte) []byte {
	dst = append(dst, 0x90|envelopeFields) // fixarray
	dst = mp.AppendUint(dst, envelopeVersion)
	dst = mp.AppendUint(dst, uint64(e.kind))
	dst = mp.AppendUint(dst, e.id)
	if e.kind == kindRequest {
		dst = mp.AppendStr(dst, e.method)
		dst = mp.AppendUint(dst, uint64(max(e.timeout, 0)))
	} else {
		dst = mp.AppendStr(dst, e.code)
		dst = mp.AppendStr(dst, e.msg)
	}
	return append(mp.AppendBinHeader(dst, len(e.body)), e.body...) // a nil body as an empty bin, as always
}

// decode fills e from b, which must hold exactly one envelope. e.body
// aliases b.
func (e *envelope) decode(b []byte) error {
	r := msgReader{b: b}
	n, err := r.arrayLen()
	if err != nil {
		return err
	}
	if n < envelopeFields {
		return malformed(0, fmt.Sprintf("envelope has %d fields, want at least %d", n, envelopeFields))
	}
	version, err := r.uint()
	if err != nil {
		return err
	}
	if version < 1 {
		return malformed(r.off-1, "envelope version 0")
	}
	kindAt := r.off
	k, err := r.uint()
	if err != nil {
		return err
	}
	*e = envelope{kind: kind(k)}
	if e.id, err = r.uint(); err != nil {
		return err
	}
	switch e.kind {
	case kindRequest:
		p, err := r.strBytes()
		if err != nil {
			return err
		}
		e.method = internMethod(p)
		timeout, err := r.uint()
		if err != nil {
			return err
		}
		e.timeout = time.Duration(min(timeout, math.MaxInt64))
	case kindResponse:
		if e.code, err = r.str(); err != nil {
			return err
		}
		if e.msg, err = r.str(); err != nil {
			return err
		}
	default:
		return malformed(kindAt, fmt.Sprintf("unknown envelope kind %d", k))
	}
	if e.body, err = r.bin(); err != nil {
		return err
	}
	for range n - envelopeFields { // fields of a newer version
		if r.off, err = skipValue(r.b, r.off, 1); err != nil {
			return err
		}
	}
	if r.off != len(b) {
		return malformed(r.off, fmt.Sprintf("%d trailing bytes after envelope", len(b)-r.off))
	}
	return nil
}

// msgReader reads the few msgpack types an envelope uses, checking every
// length against the bytes that remain.
type msgReader struct {
	b   []byte
	off int
}

// need returns the next n bytes and advances past them.
func (r *msgReader) need(n uint64, what string) ([]byte, error) {
	if n > uint64(len(r.b)-r.off) {
		return nil, malformed(r.off, fmt.Sprintf("%s needs %d bytes, %d remain", what, n, len(r.b)-r.off))
	}
	p := r.b[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	return p, nil
}

func (r *msgReader) code() (byte, error) {
	p, err := r.need(1, "type code")
	if err != nil {
		return 0, err
	}
	return p[0], nil
}

// length reads the length field of size bytes that follows a type code.
func (r *msgReader) length(size uint64) (uint64, error) {
	p, err := r.need(size, "length")
	if err != nil {
		return 0, err
	}
	switch size {
	case 1:
		return uint64(p[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(p)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(p)), nil
	default:
		return binary.BigEndian.Uint64(p), nil
	}
}

func (r *msgReader) arrayLen() (uint64, error) {
	start := r.off
	c, err := r.code()
	switch {
	case err != nil:
		return 0, err
	case c >= 0x90 && c <= 0x9f:
		return uint64(c & 0x0f), nil
	case c == 0xdc:
		return r.length(2)
	case c == 0xdd:
		return r.length(4)
	}
	return 0, malformed(start, fmt.Sprintf("code %#x: array expected", c))
}

func (r *msgReader) uint() (uint64, error) {
	start := r.off
	c, err := r.code()
	switch {
	case err != nil:
		return 0, err
	case c <= 0x7f:
		return uint64(c), nil
	case c >= 0xcc && c <= 0xcf: // uint8..uint64
		return r.length(1 << (c - 0xcc))
	}
	return 0, malformed(start, fmt.Sprintf("code %#x: unsigned integer expected", c))
}

func (r *msgReader) str() (string, error) {
	p, err := r.strBytes()
	return string(p), err
}

// strBytes reads a str and returns its bytes, aliasing r.b.
func (r *msgReader) strBytes() ([]byte, error) {
	start := r.off
	c, err := r.code()
	var n uint64
	switch {
	case err != nil:
		return nil, err
	case c >= 0xa0 && c <= 0xbf:
		n = uint64(c & 0x1f)
	case c >= 0xd9 && c <= 0xdb: // str8..str32
		n, err = r.length(1 << (c - 0xd9))
	default:
		return nil, malformed(start, fmt.Sprintf("code %#x: string expected", c))
	}
	if err != nil {
		return nil, err
	}
	return r.need(n, "string")
}

func (r *msgReader) bin() ([]byte, error) {
	start := r.off
	c, err := r.code()
	if err != nil {
		return nil, err
	}
	if c < 0xc4 || c > 0xc6 { // bin8..bin32
		return nil, malformed(start, fmt.Sprintf("code %#x: binary expected", c))
	}
	n, err := r.length(1 << (c - 0xc4))
	if err != nil {
		return nil, err
	}
	return r.need(n, "binary")
}

// requestHead reads the head of a request envelope from b, the first bytes of
// a frame: the request's ID and method, where its body starts in b and how
// long the body is. ok is false if b is not the start of a well-formed
// request or ends before the body does; the whole frame's decode then says
// what is wrong.
func requestHead(b []byte) (id uint64, method string, bodyAt, bodyLen int, ok bool) {
	r := msgReader{b: b}
	n, err := r.arrayLen()
	if err != nil || n < envelopeFields {
		return
	}
	if v, err := r.uint(); err != nil || v < 1 {
		return
	}
	if k, err := r.uint(); err != nil || kind(k) != kindRequest {
		return
	}
	if id, err = r.uint(); err != nil {
		return
	}
	if method, err = r.str(); err != nil {
		return
	}
	if _, err = r.uint(); err != nil { // timeout
		return
	}
	c, err := r.code()
	if err != nil || c < 0xc4 || c > 0xc6 { // bin8..bin32
		return
	}
	l, err := r.length(1 << (c - 0xc4))
	if err != nil || l > math.MaxInt32 {
		return
	}
	return id, method, r.off, int(l), true
}
