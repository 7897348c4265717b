package store

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
)

// Key layout of the pebble store. Every family starts with its own byte, so each is
// one contiguous key range.
//
//	pair id  = start ‖ shardID ‖ len(key)−1 ‖ key        (8 + 20 + 1 + 1..256 bytes)
//	'p' ‖ id ‖ 0x00                  → pair summary: uvarint count ‖ varint minT ‖ varint maxT
//	                                   ‖ uvarint next block number ‖ uvarint tail block number
//	                                   [‖ statsVersion byte ‖ statistics (agg.AppendPartial)]
//	'p' ‖ id ‖ 0x01 ‖ firstT         → sealed chunk: uvarint generation ‖ chunk (package chunk)
//	'p' ‖ id ‖ 0x02 ‖ block number   → unsealed block: one appended batch, as a chunk
//	'u' ‖ id                         → empty: the pair has blocks awaiting a seal
//	'm' ‖ key                        → series metadata: version byte ‖ type byte
//	                                   [‖ uvarint quantum seconds (keys.go declValue)]
//	'd' ‖ id                         → the pair's deleted ranges (tombstones.go)
//	'c' ‖ key                        → the series' catalog entry (catalog_pebble.go)
//	'x' ‖ tag ‖ key                  → a tag's posting of a series (catalog_pebble.go)
//	's'                              → store counters, maintained by merge operands
//	'q'                              → uvarint: the last chunk generation handed out
//	                                   (format 2 kept it under 'g')
//	'v'                              → uvarint: the store format (storeFormat)
//
// Why this order:
//   - A (shard, series) pair's summary, chunks and raw points share the prefix 'p' ‖ id,
//     so a read of any time range is one seek and one forward scan in one iterator (one
//     consistent snapshot), and a seal replaces chunks and blocks with one range
//     deletion that leaves the summary alone.
//   - An append is one block, not one key per point: a 600-point batch is one pebble
//     key of ~1 KiB instead of 600 keys of 40 bytes, which is what lets a board ingest
//     hundreds of thousands of points a second (flushing and compacting per-point keys
//     took 69 % of the CPU before). Blocks are numbered per pair in append order, so
//     where two blocks hold one timestamp the later block wins, as a later write must;
//     the number lives in the summary, which every append rewrites anyway. Every
//     foldTail appends the recent small blocks are folded into one (pebble.go), so a
//     quantum written point by point is not read back as hundreds of blocks.
//   - The quantum start leads the pair id. Data arrives for the newest quanta, so
//     writes append at the end of the key space instead of scattering over it by hash
//     (QFI IDs are uniformly random): the LSM tree compacts time-ordered files with
//     little overlap. Retention by age is a single range deletion of everything below
//     'p' ‖ start, and the sealer finds work by scanning 'u' from the oldest quantum.
//   - Timestamps and starts are big-endian with the sign bit flipped, so byte order is
//     numeric order, negative values included.
//   - The series key is length-prefixed, so no pair's key range contains another's: two
//     series whose 80-bit hash halves collide share a shard ID but never a key range.
//     (Keys are 1..256 bytes, so len−1 fits a byte.)
//   - Every key a write or a seal touches besides the pair's own ('s', 'u', 'q') sorts
//     after every 'p' key. A pebble table flushed from the memtable spans the keys it
//     holds, and a compaction rewrites every older table that span overlaps: with the
//     generation under 'g' (before 'p'), each flushed table spanned the whole pair
//     family, and each compaction rewrote all of the store's data — 30-100 bytes of
//     flash written per point stored. Now a flush spans only the newest quanta.
//   - 'm' is keyed by series alone: a type check or a future latest-value lookup is one
//     point read, which the bloom filters make cheap.
const (
	famPair     = 'p'
	famUnsealed = 'u'
	famMeta     = 'm'
	famCounters = 's'
	famGen      = 'q'
	famGenOld   = 'g' // where format-2 stores keep the generation: read, then deleted

	kindSummary = 0x00
	kindChunk   = 0x01
	kindBlock   = 0x02
	kindEnd     = 0x03 // upper bound of a pair's keys

	famFormat = 'v'
)

// storeFormat is the on-disk format this code writes. Format 1 stored one raw key per
// point and is refused at open rather than misread. Format 2 (version-1 chunks only,
// the generation under 'g') is read and upgraded in place: its chunks stay readable
// (package chunk decodes both versions), its generation moves at the next seal. An
// older tsdht refuses format 3 at open instead of misreading version-2 chunks.
const storeFormat = 3

// metaVersion is the first byte of a series' metadata value written before series had
// quanta of their own; metaVersionDecl the first byte of one written since.
const (
	metaVersion     = 1
	metaVersionDecl = 2
)

var (
	countersKey = []byte{famCounters}
	genKey      = []byte{famGen}
	genKeyOld   = []byte{famGenOld}
	formatKey   = []byte{famFormat}
)

// putSortable appends v big-endian with the sign bit flipped, so that byte order is
// numeric order.
func putSortable(b []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(b, uint64(v)^(1<<63))
}

func getSortable(b []byte) int64 { return int64(binary.BigEndian.Uint64(b) ^ (1 << 63)) }

// pairID returns the id of series key in shard ref; key must be valid.
func pairID(ref ShardRef, key string) []byte {
	return appendPairID(make([]byte, 0, 8+quanta.IDLen+1+len(key)), ref, key)
}

// pairIDStack is room for a pair id of a key of up to 100 bytes, for an id made on
// the stack (a longer one grows onto the heap).
const pairIDStack = 8 + quanta.IDLen + 1 + 100

// appendPairID appends the id of series key in shard ref to dst; key must be valid.
func appendPairID(dst []byte, ref ShardRef, key string) []byte {
	dst = putSortable(dst, ref.Start)
	dst = append(dst, ref.ID[:]...)
	dst = append(dst, byte(len(key)-1))
	return append(dst, key...)
}

// validPairID reports whether id is well formed: what the sealer reads back from 'u'.
func validPairID(id []byte) bool {
	const fixed = 8 + quanta.IDLen + 1
	return len(id) > fixed && len(id) == fixed+int(id[fixed-1])+1
}

// pairKey appends 'p' ‖ id ‖ kind to dst.
func pairKey(dst, id []byte, kind byte) []byte {
	dst = append(dst, famPair)
	dst = append(dst, id...)
	return append(dst, kind)
}

// pointKey appends the key of a chunk starting at t.
func pointKey(dst, id []byte, kind byte, t int64) []byte {
	return putSortable(pairKey(dst, id, kind), t)
}

// blockKey appends the key of the pair's block number n.
func blockKey(dst, id []byte, n uint64) []byte {
	return binary.BigEndian.AppendUint64(pairKey(dst, id, kindBlock), n)
}

// keyTime returns the timestamp at the end of a chunk key.
func keyTime(k []byte) int64 { return getSortable(k[len(k)-8:]) }

// keyKind returns the kind byte of a pair key whose pair id has length idLen.
func keyKind(k []byte, idLen int) byte { return k[1+idLen] }

func unsealedKey(id []byte) []byte { return append([]byte{famUnsealed}, id...) }

func metaKey(key string) []byte { return append([]byte{famMeta}, key...) }

// summary describes a pair's points: enough to tell that an in-order batch holds no
// duplicates without reading anything, and the pair's statistics (stats.go).
type summary struct {
	count      int64 // points held; 0 means the pair holds nothing
	minT, maxT int64
	nextBlock  uint64 // number of the pair's next block
	tailBlock  uint64 // first block of the tail, the blocks the next fold rewrites

	// marked: the pair's 'u' key is known to be written since its last seal, so an
	// append need not write it again. Not persisted: a summary read from disk has it
	// false, which costs one redundant write of the marker.
	marked bool
	// stats aggregates all the pair's points, hash included; hasStats is false for a
	// record written before statistics were kept, whose stats are computed from the
	// points when first needed (stats.go).
	stats    agg.Partial
	hasStats bool
	// cover: ranges every held timestamp falls in (cover.go). Not persisted: a
	// summary read from disk has none, and [minT, maxT] stands for it.
	cover timeCover
	// written is when (UnixNano) an append last wrote the pair: the background sealer
	// leaves a pair that is still being written (a backfill) for a later pass. Not
	// persisted.
	written int64
}

// statsVersion is the byte before the statistics in a pair summary.
const statsVersion = 1

func (s summary) encode() []byte { return s.appendTo(make([]byte, 0, summaryCap)) }

// summaryCap holds an encoded summary with float statistics, the largest but for
// string first/last values: one allocation where growing from nil took five.
const summaryCap = 192

// appendTo appends the encoded summary to b.
func (s summary) appendTo(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(s.count))
	b = binary.AppendVarint(b, s.minT)
	b = binary.AppendVarint(b, s.maxT)
	b = binary.AppendUvarint(b, s.nextBlock)
	b = binary.AppendUvarint(b, s.tailBlock)
	if s.hasStats {
		b = append(b, statsVersion)
		b = agg.AppendPartial(b, &s.stats)
	}
	return b
}

// summaryMinT returns the minT of an encoded summary, decoding nothing after it.
func summaryMinT(v []byte) (int64, bool) {
	_, n := binary.Uvarint(v)
	if n <= 0 {
		return 0, false
	}
	minT, m := binary.Varint(v[n:])
	return minT, m > 0
}

func decodeSummary(v []byte) (summary, error) {
	var s summary
	c, n := binary.Uvarint(v)
	if n <= 0 || c > math.MaxInt64 {
		return s, errCorruptValue("pair summary")
	}
	v = v[n:]
	s.count = int64(c)
	if s.minT, n = binary.Varint(v); n <= 0 {
		return s, errCorruptValue("pair summary")
	}
	v = v[n:]
	if s.maxT, n = binary.Varint(v); n <= 0 {
		return s, errCorruptValue("pair summary")
	}
	v = v[n:]
	if s.nextBlock, n = binary.Uvarint(v); n <= 0 {
		return s, errCorruptValue("pair summary")
	}
	v = v[n:]
	if s.tailBlock, n = binary.Uvarint(v); n <= 0 || s.tailBlock > s.nextBlock {
		return s, errCorruptValue("pair summary")
	}
	v = v[n:]
	if len(v) == 0 {
		return s, nil // written before statistics were kept
	}
	if v[0] != statsVersion {
		return s, errCorruptValue("pair statistics version")
	}
	st, rest, err := agg.DecodePartial(v[1:])
	if err != nil || len(rest) != 0 {
		return s, errCorruptValue("pair statistics")
	}
	// Statistics that disagree with the count are not trusted: they are computed again
	// from the points when needed, as for an old record.
	s.stats, s.hasStats = st, st.Count == s.count
	return s, nil
}

// with returns the summary after adding fresh new points spanning [minT, maxT] in
// blocks more blocks; the tail stays where it was.
func (s summary) with(fresh int64, minT, maxT int64, blocks uint64) summary {
	next := summary{count: s.count + fresh, minT: min(s.minT, minT), maxT: max(s.maxT, maxT),
		nextBlock: s.nextBlock + blocks, tailBlock: s.tailBlock, marked: true}
	if s.count == 0 {
		next.minT, next.maxT = minT, maxT
	}
	return next
}

// metaValue is a series' metadata as an append records it: the type alone, the
// quantum left to a declaration (Decl.NoQuantum).
func metaValue(t series.Type) []byte { return []byte{metaVersionDecl, byte(t)} }

// declValue is a series' metadata as a declaration records it: the type and the quantum
// length (uvarint seconds, 0: the cluster's), or the type alone for one of no quantum.
func declValue(d Decl) []byte {
	if d.NoQuantum {
		return metaValue(d.Type)
	}
	return binary.AppendUvarint([]byte{metaVersionDecl, byte(d.Type)}, uint64(d.Quantum))
}

// decodeMeta reads a series' metadata. Version 1, written before series had quanta of
// their own, means the cluster's quantum; version 2 carries the quantum if a
// declaration recorded one.
func decodeMeta(v []byte) (Decl, error) {
	if len(v) < 2 || v[0] != metaVersion && v[0] != metaVersionDecl {
		return Decl{}, errCorruptValue("series metadata")
	}
	d := Decl{Type: series.Type(v[1])}
	if d.Type != series.Float && d.Type != series.Int && d.Type != series.String {
		return Decl{}, errCorruptValue("series metadata type")
	}
	if v[0] == metaVersion {
		return d, nil
	}
	if len(v) == 2 {
		d.NoQuantum = true
		return d, nil
	}
	q, n := binary.Uvarint(v[2:])
	if n <= 0 || 2+n != len(v) || q > uint64(quanta.MaxQuantum) {
		return Decl{}, errCorruptValue("series metadata quantum")
	}
	d.Quantum = quanta.Quantum(q)
	return d, nil
}

// ErrCorrupt is wrapped by errors about stored data that cannot be decoded.
var ErrCorrupt = fmt.Errorf("store: corrupt data")

func errCorruptValue(what string) error { return fmt.Errorf("%w: bad %s", ErrCorrupt, what) }
