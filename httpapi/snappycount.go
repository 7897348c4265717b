package httpapi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// A remote write's body is a snappy block (its decoded length in its header, then
// literals and back-references) of a protobuf WriteRequest. Its samples are counted
// while the block is decoded (writeCounter, fed every snappyStep bytes decoded), so
// that a request past MaxSamplesPerRemoteWrite or MaxSeriesPerWrite is refused at the
// point where it passes the limit, without decoding the rest; the bytes decoded go into
// a buffer the next request reuses (rawBodies).

// errSnappyCorrupt is wrapped by the error of a block that does not decode.
var errSnappyCorrupt = errors.New("snappy: corrupt input")

// snappyStep is how many decoded bytes pass between two calls of decodeSnappy's step:
// one interval of a heavy request's pacer (yield.go), which the step spends.
const snappyStep = heavyYieldEvery

// decodeSnappy decodes the snappy block src into dst's capacity (grown as needed, up to
// the block's decoded length, which the caller has checked against its limits), calling
// step with the bytes decoded so far every snappyStep bytes and once more, with final
// set, at the end. It stops at step's first error, returning it with the bytes decoded
// so far (their buffer may be reused).
func decodeSnappy(dst, src []byte, step func(out []byte, final bool) error) ([]byte, error) {
	n, hdr := binary.Uvarint(src)
	if hdr <= 0 || n > math.MaxInt32 {
		return nil, fmt.Errorf("%w: bad length header", errSnappyCorrupt)
	}
	total := int(n)
	// dst grows as the output does (doubling, up to total), so a block refused part way
	// has allocated about what was decoded of it, not what it declares.
	dst = dst[:cap(dst)]
	s, d, next := hdr, 0, snappyStep
	room := func(k int) bool {
		if k > total-d {
			return false
		}
		if d+k > len(dst) {
			grown := make([]byte, min(total, max(2*len(dst), d+k, snappyStep)))
			copy(grown, dst[:d])
			dst = grown
		}
		return true
	}
	for s < len(src) {
		if d >= next {
			if err := step(dst[:d], false); err != nil {
				return dst[:d], err // the buffer, for the caller to reuse
			}
			next = d + snappyStep
		}
		tag := src[s]
		var length, offset int
		switch tag & 3 {
		case 0: // a literal
			x := int(tag >> 2)
			s++
			if x >= 60 {
				k := x - 59 // bytes of its length
				if s+k > len(src) {
					return nil, fmt.Errorf("%w: literal length past the end", errSnappyCorrupt)
				}
				x = 0
				for i := range k {
					x |= int(src[s+i]) << (8 * i)
				}
				s += k
			}
			length = x + 1
			if length <= 0 || length > len(src)-s || !room(length) {
				return nil, fmt.Errorf("%w: literal of %d bytes past the end", errSnappyCorrupt, length)
			}
			d += copy(dst[d:], src[s:s+length])
			s += length
			continue
		case 1:
			if s+2 > len(src) {
				return nil, fmt.Errorf("%w: copy past the end", errSnappyCorrupt)
			}
			length, offset = 4+int(tag>>2)&7, int(tag&0xe0)<<3|int(src[s+1])
			s += 2
		case 2:
			if s+3 > len(src) {
				return nil, fmt.Errorf("%w: copy past the end", errSnappyCorrupt)
			}
			length, offset = 1+int(tag>>2), int(binary.LittleEndian.Uint16(src[s+1:]))
			s += 3
		case 3:
			if s+5 > len(src) {
				return nil, fmt.Errorf("%w: copy past the end", errSnappyCorrupt)
			}
			length, offset = 1+int(tag>>2), int(binary.LittleEndian.Uint32(src[s+1:]))
			s += 5
		}
		if offset <= 0 || offset > d || !room(length) {
			return nil, fmt.Errorf("%w: copy of %d bytes from %d back, at %d", errSnappyCorrupt, length, offset, d)
		}
		if offset >= length {
			d += copy(dst[d:d+length], dst[d-offset:])
		} else { // overlapping: a run, byte by byte
			for end := d + length; d < end; d++ {
				dst[d] = dst[d-offset]
			}
		}
	}
	if d != total {
		return nil, fmt.Errorf("%w: %d bytes decoded, %d declared", errSnappyCorrupt, d, total)
	}
	if err := step(dst[:d], true); err != nil {
		return dst[:d], err
	}
	return dst[:d], nil
}

// errTooManySamples and errTooManySeriesRW are writeCounter's refusals.
var (
	errTooManySamples  = errors.New("too many samples")
	errTooManySeriesRW = errors.New("too many series")
)

// writeCounter counts the time series and samples of a WriteRequest as its bytes are
// decoded, without decoding or allocating any: a sample is counted once its tag and
// length are, before its bytes arrive. It fails with errTooManySamples or
// errTooManySeriesRW as soon as a count passes its limit, and with a protobuf error for
// a request that does not parse (a field cut off by the end of the bytes decoded so far
// is parsed when more are).
type writeCounter struct {
	maxSeries, maxSamples int
	total                 int // the request's decoded length
	series, samples       int

	pos   int  // offset of the next field not parsed yet
	inTS  bool // pos is inside a TimeSeries, which ends at tsEnd
	tsEnd int
}

// advance parses the fields of out (the bytes decoded so far) that are whole; final
// says out is the whole request.
func (c *writeCounter) advance(out []byte, final bool) error {
	for {
		if c.inTS && c.pos >= c.tsEnd {
			if c.pos > c.tsEnd {
				return errors.New("a time series' field runs past its end")
			}
			c.inTS = false
		}
		end := len(out)
		if c.inTS {
			end = min(end, c.tsEnd)
		}
		if c.pos >= end {
			if final && (c.inTS || c.pos > len(out)) {
				return protowire.ParseError(-1) // cut off: errCodeTruncated
			}
			return nil
		}
		// A field cut off at the end of what was decoded so far waits for more.
		more := !final && end == len(out)
		b := out[c.pos:end]
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			if more {
				return nil
			}
			return protowire.ParseError(n)
		}
		if typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, b[n:])
			if m < 0 {
				if more {
					return nil
				}
				return protowire.ParseError(m)
			}
			c.pos += n + m
			continue
		}
		l, m := protowire.ConsumeVarint(b[n:])
		if m < 0 {
			if more {
				return nil
			}
			return protowire.ParseError(m)
		}
		hdr := c.pos + n + m
		if l > uint64(c.total-hdr) {
			return fmt.Errorf("a field of %d bytes at offset %d of a request of %d", l, hdr, c.total)
		}
		switch {
		case !c.inTS && num == 1: // a TimeSeries: its fields next
			if c.series++; c.series > c.maxSeries {
				return errTooManySeriesRW
			}
			c.pos, c.inTS, c.tsEnd = hdr, true, hdr+int(l)
			continue
		case c.inTS && num == 2: // a Sample
			if c.samples++; c.samples > c.maxSamples {
				return errTooManySamples
			}
		}
		c.pos = hdr + int(l)
	}
}
