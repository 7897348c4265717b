package catalog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/tsdht/tsdht/tsdb/series"
)

// entryVersion is the first byte of an encoded entry.
const entryVersion = 1

// MaxEntryLen bounds an encoded entry: what a decoder accepts at most.
const MaxEntryLen = 1 + 2 + series.MaxKeyLen + 1 + 3*10 + 2 + MaxUnitLen + 2 + MaxDescriptionLen + 8 +
	1 + MaxTags*(2+MaxTagKeyLen+2+MaxTagValueLen) + 1 + 5*10 + 10

// knownBoundsFlags are the bounds flag bits this build decodes (see Encode).
const knownBoundsFlags = 1 | 2 | 4 | 8

// ErrCorrupt is wrapped by decoding errors.
var ErrCorrupt = errors.New("catalog: corrupt encoding")

// Encode appends the entry's binary encoding to dst:
//
//	version 1 ‖ str key ‖ type byte ‖ varint Created ‖ varint MetaVersion ‖ varint Deleted
//	‖ str unit ‖ str description ‖ float64 nominal rate (8 bytes, big-endian bits)
//	‖ uvarint tag count ‖ (str k ‖ str v)… ‖ bounds flag byte [‖ varint First ‖ varint Last
//	[‖ varint Tail] [‖ varint Ahead] [‖ varint Newest]]
//
// where str is uvarint length ‖ bytes. The bounds flag is 0 (no bounds) or 1 (bounds),
// plus 2 with a tail, 4 with an ahead and 8 with a newest, so an entry without them
// encodes as it always has. A flag with higher bits set says that a later build's
// fields follow; this build decodes what it knows and skips them, so a later build
// can add fields without its entries being refused by this one during a rolling
// upgrade (builds before this one refuse any bit they do not know).
func (e *Entry) Encode(dst []byte) []byte {
	w := writer{b: dst}
	w.b = append(w.b, entryVersion)
	w.str(e.Key)
	w.b = append(w.b, byte(e.Type))
	w.varint(e.Created)
	w.varint(e.MetaVersion)
	w.varint(e.Deleted)
	w.str(e.Unit)
	w.str(e.Description)
	w.f64(e.NominalRate)
	w.tags(e.Tags)
	if e.HasBounds {
		flag := byte(1)
		if e.HasTail {
			flag |= 2
		}
		if e.HasAhead {
			flag |= 4
		}
		if e.HasNewest {
			flag |= 8
		}
		w.b = append(w.b, flag)
		w.varint(e.First)
		w.varint(e.Last)
		if e.HasTail {
			w.varint(e.Tail)
		}
		if e.HasAhead {
			w.varint(e.Ahead)
		}
		if e.HasNewest {
			w.varint(e.Newest)
		}
	} else {
		w.b = append(w.b, 0)
	}
	return w.b
}

// DecodeEntry decodes an entry and validates it. Every declared length is checked
// against the bytes that remain (and its limit) before anything is allocated.
func DecodeEntry(b []byte) (Entry, error) {
	var e Entry
	if len(b) > MaxEntryLen {
		return e, fmt.Errorf("%w: entry of %d bytes; at most %d", ErrCorrupt, len(b), MaxEntryLen)
	}
	r := reader{b: b}
	if v := r.byte(); v != entryVersion {
		if r.err != nil {
			return e, r.err
		}
		return e, fmt.Errorf("%w: entry version %d, want %d", ErrCorrupt, v, entryVersion)
	}
	e.Key = r.str(series.MaxKeyLen)
	e.Type = series.Type(r.byte())
	e.Created = r.varint()
	e.MetaVersion = r.varint()
	e.Deleted = r.varint()
	e.Unit = r.str(MaxUnitLen)
	e.Description = r.str(MaxDescriptionLen)
	e.NominalRate = r.f64()
	e.Tags = r.tags()
	switch flag := r.byte(); {
	case flag == 0:
	case flag&1 == 1:
		e.HasBounds, e.HasTail, e.HasAhead, e.HasNewest = true, flag&2 != 0, flag&4 != 0, flag&8 != 0
		e.First = r.varint()
		e.Last = r.varint()
		if e.HasTail {
			e.Tail = r.varint()
		}
		if e.HasAhead {
			e.Ahead = r.varint()
		}
		if e.HasNewest {
			e.Newest = r.varint()
		}
		if flag&^knownBoundsFlags != 0 {
			// A later build's fields follow: this one keeps what it knows.
			r.b = nil
		}
	default:
		r.fail("bounds flag")
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	if r.err != nil {
		return Entry{}, r.err
	}
	if err := e.Validate(); err != nil {
		return Entry{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return e, nil
}

type writer struct{ b []byte }

func (w *writer) str(s string) {
	w.b = binary.AppendUvarint(w.b, uint64(len(s)))
	w.b = append(w.b, s...)
}
func (w *writer) varint(v int64) { w.b = binary.AppendVarint(w.b, v) }
func (w *writer) f64(f float64)  { w.b = binary.BigEndian.AppendUint64(w.b, math.Float64bits(f)) }
func (w *writer) tags(tags []Tag) {
	w.b = binary.AppendUvarint(w.b, uint64(len(tags)))
	for _, t := range tags {
		w.str(t.K)
		w.str(t.V)
	}
}

// reader decodes with a sticky error: after the first failure every read returns zero.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: bad %s", ErrCorrupt, what)
	}
	r.b = nil
}

func (r *reader) byte() byte {
	if r.err != nil || len(r.b) < 1 {
		r.fail("length")
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) uvarint(limit uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 || v > limit {
		r.fail("length")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// str reads a string of at most limit bytes, checking the length against what remains
// before allocating it.
func (r *reader) str(limit int) string {
	n := r.uvarint(uint64(limit))
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)) {
		r.fail("string length")
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *reader) f64() float64 {
	if r.err != nil || len(r.b) < 8 {
		r.fail("float")
		return 0
	}
	v := math.Float64frombits(binary.BigEndian.Uint64(r.b))
	r.b = r.b[8:]
	return v
}

func (r *reader) tags() []Tag {
	n := r.uvarint(MaxTags)
	// Each tag takes at least 2 bytes: check before allocating.
	if r.err != nil || n > uint64(len(r.b))/2 {
		r.fail("tag count")
		return nil
	}
	if n == 0 {
		return nil
	}
	tags := make([]Tag, n)
	for i := range tags {
		tags[i].K = r.str(MaxTagKeyLen)
		tags[i].V = r.str(MaxTagValueLen)
	}
	return tags
}
