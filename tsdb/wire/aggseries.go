package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
)

// MethodAggSeries asks a replica what MethodAgg asks, for one series in many shards,
// packed: AggSeriesReq → AggSeriesResp. The series is named once and its shards by
// their quantum starts (the replica computes the IDs), so a coordinator asks each
// replica for all of its shards of an aggregate in one small request, and neither side
// spends its time in msgpack. A node that does not know it answers rpc.CodeUnknownMethod;
// the coordinator then asks MethodAgg.
const MethodAggSeries = "tsdb.aggs"

// MaxAggSeriesShards bounds the shards of one MethodAggSeries or MethodLatestPart
// request: a replica refuses more (each costs it a statistics lookup), so a request's
// cost to the replica is bounded whatever a peer sends.
const MaxAggSeriesShards = 4096

// AggSeriesReq asks a replica for the windows of width Every ns of series Key in the
// shards Shards describes (MethodAggSeries).
type AggSeriesReq struct {
	Key    string `msgpack:"k"`
	Every  int64  `msgpack:"e"`
	Shards []byte `msgpack:"s"` // AppendAggSpans
	// Q is the series' quantum length in seconds; 0 is the cluster's.
	Q int64 `msgpack:"ql,omitempty"`
}

// AggSeriesResp answers an AggSeriesReq: one ShardAggResult per shard asked, in order
// (AppendAggResults).
type AggSeriesResp struct {
	Shards []byte `msgpack:"s"`
}

// Packed forms. Every count and length is checked against the bytes that remain before
// anything is allocated for it, so hostile input costs its sender and never panics.
//
//	spans:   version byte (1) ‖ uvarint n ‖ n × span
//	span:    flags byte (bit 0: Digest) ‖ varint Start − previous Start
//	         ‖ varint From − previous To ‖ uvarint To − From   (previous: 0 for the first)
//	results: version byte (1) ‖ uvarint n ‖ n × result
//	result:  flags byte (bit 0: Held, bit 1: windows follow) ‖ type byte ‖ uvarint Count
//	         ‖ 8 bytes Hash (little-endian) [‖ uvarint len ‖ windows (agg.AppendWindowsWire)]
const aggSeriesVersion = 1

// Least bytes of one span and of one result.
const (
	minSpanBytes   = 1 + 1 + 1 + 1
	minResultBytes = 1 + 1 + 1 + 8
)

// ErrCorruptAgg is wrapped by every error of DecodeAggSpans and DecodeAggResults.
var ErrCorruptAgg = errors.New("corrupt packed aggregate")

func corruptAgg(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorruptAgg, fmt.Sprintf(format, args...))
}

// AppendAggSpans appends the packed form of shards' Start, From, To and Digest (their
// IDs and keys are not sent: the request names the series) to dst. Every shard must
// have From <= To.
func AppendAggSpans(dst []byte, shards []ShardAgg) []byte {
	dst = append(dst, aggSeriesVersion)
	dst = binary.AppendUvarint(dst, uint64(len(shards)))
	var start, to int64
	for i := range shards {
		s := &shards[i]
		var flags byte
		if s.Digest {
			flags |= 1
		}
		dst = append(dst, flags)
		dst = binary.AppendVarint(dst, int64(uint64(s.Start)-uint64(start)))
		dst = binary.AppendVarint(dst, int64(uint64(s.From)-uint64(to)))
		dst = binary.AppendUvarint(dst, uint64(s.To)-uint64(s.From))
		start, to = s.Start, s.To
	}
	return dst
}

// DecodeAggSpans decodes what AppendAggSpans wrote, the whole of b, into shards of
// series key (IDs unset); more than MaxAggSeriesShards shards are refused.
func DecodeAggSpans(b []byte, key string) ([]ShardAgg, error) {
	d := packedReader{b: b}
	n := d.header(minSpanBytes)
	if d.err != nil {
		return nil, d.err
	}
	if n > MaxAggSeriesShards {
		return nil, fmt.Errorf("%d shards in one request; at most %d (wire.MaxAggSeriesShards)", n, MaxAggSeriesShards)
	}
	out := make([]ShardAgg, n)
	var start, to int64
	for i := range out {
		flags := d.byte()
		start = int64(uint64(start) + uint64(d.varint()))
		from := int64(uint64(to) + uint64(d.varint()))
		span := d.uvarint()
		if d.err != nil {
			return nil, d.err
		}
		if flags&^1 != 0 {
			return nil, corruptAgg("span %d: flags %#x", i, flags)
		}
		if span > uint64(math.MaxInt64)-uint64(from) { // in uint64: exact for any from
			return nil, corruptAgg("span %d: end past the end of time", i)
		}
		to = int64(uint64(from) + span)
		out[i] = ShardAgg{Start: start, Key: key, From: from, To: to, Digest: flags&1 != 0}
	}
	if len(d.b) != 0 {
		return nil, corruptAgg("%d trailing bytes", len(d.b))
	}
	return out, nil
}

// AppendAggResults appends the packed form of rs (their Windows; Packed is ignored) to
// dst. Each result's windows must be strictly ascending and of its Type.
func AppendAggResults(dst []byte, rs []ShardAggResult) []byte {
	dst = append(dst, aggSeriesVersion)
	dst = binary.AppendUvarint(dst, uint64(len(rs)))
	var ws []byte
	for i := range rs {
		r := &rs[i]
		var flags byte
		if r.Held {
			flags |= 1
		}
		if len(r.Windows) > 0 {
			flags |= 2
		}
		dst = append(dst, flags, byte(r.Type))
		dst = binary.AppendUvarint(dst, uint64(r.Count))
		dst = binary.LittleEndian.AppendUint64(dst, r.Hash)
		if len(r.Windows) > 0 {
			ws = agg.AppendWindowsWire(ws[:0], r.Type, r.Windows)
			dst = binary.AppendUvarint(dst, uint64(len(ws)))
			dst = append(dst, ws...)
		}
	}
	return dst
}

// DecodeAggResults decodes what AppendAggResults wrote, the whole of b, windows into
// Windows (the results' windows share one backing array).
func DecodeAggResults(b []byte) ([]ShardAggResult, error) {
	d := packedReader{b: b}
	n := d.header(minResultBytes)
	if d.err != nil {
		return nil, d.err
	}
	out := make([]ShardAggResult, n)
	var all []agg.Window
	ends := make([]int, n) // where each result's windows end in all
	for i := range out {
		flags, typ := d.byte(), d.byte()
		count := d.uvarint()
		hash := d.u64()
		if d.err != nil {
			return nil, d.err
		}
		if flags&^3 != 0 || typ > byte(series.String) || count > math.MaxInt64 {
			return nil, corruptAgg("result %d: flags %#x, type %d, count %d", i, flags, typ, count)
		}
		r := &out[i]
		r.Held, r.Type, r.Count, r.Hash = flags&1 != 0, series.Type(typ), int64(count), hash
		if flags&2 != 0 {
			size := d.uvarint()
			if d.err == nil && size > uint64(len(d.b)) {
				return nil, corruptAgg("result %d: %d bytes of windows in %d", i, size, len(d.b))
			}
			if d.err != nil {
				return nil, d.err
			}
			if all == nil {
				all = make([]agg.Window, 0, n-i) // commonly a window per answer that has any
			}
			t, ws, err := agg.AppendDecodedWindows(all, d.b[:size])
			if err != nil {
				return nil, fmt.Errorf("result %d: %w", i, err)
			}
			if r.Type != series.Unknown && t != r.Type {
				return nil, corruptAgg("result %d: windows of type %s in an answer of type %s", i, t, r.Type)
			}
			all, d.b = ws, d.b[size:]
		}
		ends[i] = len(all)
	}
	if len(d.b) != 0 {
		return nil, corruptAgg("%d trailing bytes", len(d.b))
	}
	lo := 0
	for i := range out {
		if ends[i] > lo {
			out[i].Windows = all[lo:ends[i]:ends[i]]
		}
		lo = ends[i]
	}
	return out, nil
}

// packedReader reads a packed form; the first error sticks and every later read
// returns zero.
type packedReader struct {
	b   []byte
	err error
}

// header reads the version and the count of items of at least least bytes each.
func (d *packedReader) header(least int) int {
	if len(d.b) < 1 || d.b[0] != aggSeriesVersion {
		d.err = corruptAgg("not version %d", aggSeriesVersion)
		return 0
	}
	d.b = d.b[1:]
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)/least) {
		d.err = corruptAgg("%d items in %d bytes", n, len(d.b))
	}
	if d.err != nil {
		return 0
	}
	return int(n)
}

func (d *packedReader) fail(what string) {
	if d.err == nil {
		d.err = corruptAgg("bad %s", what)
	}
}

func (d *packedReader) byte() byte {
	if d.err != nil || len(d.b) < 1 {
		d.fail("byte")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *packedReader) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *packedReader) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *packedReader) u64() uint64 {
	if d.err != nil || len(d.b) < 8 {
		d.fail("fixed 64 bits")
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

// MethodLatestPart asks a replica, in one round trip, for what a coordinator's Latest
// needs of it: the series' catalog entry, when asked (it is one of the series' registry
// replicas), and the windows of the series' newest shards it holds (as
// MethodAggSeries): LatestPartReq → LatestPartResp. Under KFI a series' registry
// replicas are usually its shards' replicas too, so Latest costs one request to each of
// them. A node that does not know it answers rpc.CodeUnknownMethod; the coordinator
// then asks MethodEntryGet and MethodAgg.
const MethodLatestPart = "tsdb.latestpart"

// LatestPartReq asks for series Key's entry (Entry) and its windows of width Every in
// the shards Shards describes (AppendAggSpans; may be empty).
type LatestPartReq struct {
	Key    string `msgpack:"k"`
	Entry  bool   `msgpack:"n"`
	Every  int64  `msgpack:"e"`
	Shards []byte `msgpack:"s"`
	// Q is the series' quantum length in seconds; 0 is the cluster's.
	Q int64 `msgpack:"ql,omitempty"`
}

// LatestPartResp answers a LatestPartReq: the entry, if asked and held (Entry is its
// catalog.Entry.Encode form, empty when the replica holds none), and one
// ShardAggResult per shard asked (AppendAggResults).
type LatestPartResp struct {
	Entry  []byte `msgpack:"n"`
	Shards []byte `msgpack:"s"`
}
