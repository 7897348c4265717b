package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/record"
)

// WAL replay that stops early.
//
// Pebble replays a write-ahead log until the first record it cannot read and treats
// that as the log's end: a torn tail after a power cut looks exactly like that, and is
// harmless (those writes were never acknowledged with SyncAlways). A record damaged in
// the middle of the log looks the same, yet the records after it were acknowledged, and
// pebble drops them with an INFO line. So before pebble opens a store, the store reads
// each log itself the same way, and where the reading stops it looks for valid chunks
// of the same log further on: pebble writes a log as chunks, each with its own header
// (checksum, length, type and the log's number) and never across a 32 KiB block, so
// the store tries every offset after the stop, in the same block and the later ones,
// for a header of this log whose checksum holds, and from each one found reads on
// chunk by chunk. Any found were dropped by damage, not by a torn tail: the store logs
// an error naming the file, the offset and how many records and bytes are lost, and
// counts them in Stats.WALBytesDropped, so that the node can have the pairs re-sent by
// its peers, or, with PebbleOptions.RefuseWALLoss, refuses to open before pebble
// replays (and so discards) the log. A damaged last record is not told apart from a
// write cut by a crash: the store logs a warning for a last record whose header and
// length are whole but whose checksum fails.

// walBlockSize is pebble's log block size (record.blockSize).
const walBlockSize = 32 << 10

// Pebble's log chunk header (record package): checksum (4), length (2), type (1) and,
// in the recyclable format its LogWriter writes, the log number (4).
const (
	walHeaderSize   = 11
	walChunkFull    = 5 // recyclable full chunk
	walChunkFirst   = 6
	walChunkLast    = 8
	walChecksumFrom = 6 // the checksum covers the type, the log number and the payload
)

var walCRCTable = crc32.MakeTable(crc32.Castagnoli)

// walLoss is what one log lost.
type walLoss struct {
	file    string
	stop    int64 // where replay stops
	records int   // valid records (first or full chunks) after it
	bytes   int64 // from stop to the end of the last valid chunk
	badTail bool  // no valid chunk after stop, but the chunk at stop is whole and fails its checksum
}

// scanWALs checks every log in dir. It returns the logs that lose records after the
// point where replay stops, and those whose last record fails its checksum (badTail).
func scanWALs(dir string) ([]walLoss, error) {
	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return nil, err
	}
	sort.Strings(logs)
	var out []walLoss
	for _, path := range logs {
		num, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(path), ".log"), 10, 64)
		if err != nil {
			continue // not a pebble log
		}
		l, err := scanWAL(path, pebble.FileNum(num))
		if err != nil {
			return nil, err
		}
		if l.records > 0 || l.badTail {
			out = append(out, l)
		}
	}
	return out, nil
}

// scanWAL reads one log as a replay would and counts the valid chunks after the point
// where that stops. It reads one block at a time: a log can be as large as a memtable.
func scanWAL(path string, num pebble.FileNum) (walLoss, error) {
	l := walLoss{file: filepath.Base(path)}
	f, err := os.Open(path)
	if err != nil {
		return l, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return l, err
	}
	return scanLog(l, f, st.Size(), num)
}

// scanLog is scanWAL over the size bytes of r.
func scanLog(l walLoss, r io.ReaderAt, size int64, num pebble.FileNum) (walLoss, error) {
	stop, clean := readRecords(io.NewSectionReader(r, 0, size), num, nil)
	l.stop = stop
	if clean {
		return l, nil
	}
	buf := make([]byte, walBlockSize)
	for b := stop / walBlockSize * walBlockSize; b < size; b += walBlockSize {
		n, err := r.ReadAt(buf, b)
		if err != nil && !errors.Is(err, io.EOF) {
			return l, err
		}
		blk := buf[:n]
		i := 0
		if b < stop {
			i = int(stop-b) + 1 // the chunk at stop is the one replay could not read
			if int(stop-b) < n {
				l.badTail = wholeBadChunk(blk[stop-b:], uint32(num))
			}
		}
		for i+walHeaderSize <= len(blk) {
			end, typ, ok := walChunkAt(blk, i, uint32(num))
			if !ok {
				i++
				continue
			}
			if typ == walChunkFull || typ == walChunkFirst {
				l.records++
			}
			l.bytes = b + int64(end) - stop
			i = end
		}
	}
	if l.records > 0 {
		l.badTail = false
	}
	return l, nil
}

// walChunkAt says whether blk holds, at i, a chunk of log num whose checksum holds,
// and if so where it ends and its type.
func walChunkAt(blk []byte, i int, num uint32) (end int, typ byte, ok bool) {
	h := blk[i:]
	typ = h[6]
	if typ < walChunkFull || typ > walChunkLast || binary.LittleEndian.Uint32(h[7:11]) != num {
		return 0, 0, false
	}
	end = i + walHeaderSize + int(binary.LittleEndian.Uint16(h[4:6]))
	if end > len(blk) {
		return 0, 0, false
	}
	if binary.LittleEndian.Uint32(h[0:4]) != walChecksum(blk[i+walChecksumFrom:end]) {
		return 0, 0, false
	}
	return end, typ, true
}

// wholeBadChunk says whether h starts with the header of a chunk of log num whose
// payload is all there but whose checksum fails: damage, or a write cut by a crash.
func wholeBadChunk(h []byte, num uint32) bool {
	if len(h) < walHeaderSize || h[6] < walChunkFull || h[6] > walChunkLast || binary.LittleEndian.Uint32(h[7:11]) != num {
		return false
	}
	end := walHeaderSize + int(binary.LittleEndian.Uint16(h[4:6]))
	return end <= len(h) && binary.LittleEndian.Uint32(h[0:4]) != walChecksum(h[walChecksumFrom:end])
}

// walChecksum is pebble's masked CRC-32C (internal/crc).
func walChecksum(b []byte) uint32 {
	c := crc32.Checksum(b, walCRCTable)
	return (c>>15 | c<<17) + 0xa282ead8
}

// readRecords reads records from r until one cannot be read, calling each (if not nil)
// with the offset where each valid record ends. It returns the offset of the first
// record it could not read, and whether the log simply ended there.
func readRecords(r io.Reader, num pebble.FileNum, each func(end int64)) (stop int64, clean bool) {
	rr := record.NewReader(r, num)
	for {
		stop = rr.Offset()
		rec, err := rr.Next()
		if err == nil {
			_, err = io.Copy(io.Discard, rec)
		}
		if err != nil {
			return stop, errors.Is(err, io.EOF)
		}
		if each != nil {
			each(rr.Offset())
		}
	}
}

// ErrWALLoss is wrapped by OpenPebble's error when RefuseWALLoss is set and replay
// would drop valid write-ahead log records after a damaged one.
var ErrWALLoss = errors.New("write-ahead log damaged: replay would drop acknowledged writes")

// walLossError is OpenPebble's refusal under RefuseWALLoss, or nil if nothing is lost.
func walLossError(dir string, losses []walLoss) error {
	var what []string
	for _, l := range losses {
		if l.records > 0 {
			what = append(what, l.String())
		}
	}
	if len(what) == 0 {
		return nil
	}
	return fmt.Errorf("open store %s: %w: %s; nothing was replayed or changed", dir, ErrWALLoss, strings.Join(what, "; "))
}

// String says what one log loses.
func (l walLoss) String() string {
	if l.records == 0 {
		return fmt.Sprintf("write-ahead log %s: its last record, at offset %d, fails its checksum (a write cut by a crash, never acknowledged, or damage)", l.file, l.stop)
	}
	recs := "records"
	if l.records == 1 {
		recs = "record"
	}
	return fmt.Sprintf("write-ahead log %s is damaged at offset %d: replay stops there, and %d valid %s (%s from the damage on) after it are dropped",
		l.file, l.stop, l.records, recs, FormatSize(l.bytes))
}

// reportWALLoss logs and counts what scanWALs found.
func (p *Pebble) reportWALLoss(losses []walLoss) {
	for _, l := range losses {
		if l.records == 0 {
			p.opts.Logger.Warn("store: "+l.String(), "dir", p.dir)
			continue
		}
		p.damage.walDropped.Add(l.bytes)
		p.opts.Logger.Error("store: "+l.String()+" on this node; their points come back from the other replicas by repair, if there are any (run tsdht fsck on the stopped node for details)",
			"dir", p.dir, "file", l.file, "offset", l.stop, "records", l.records, "bytes", l.bytes)
	}
}

// manifestDamage reads the store's current MANIFEST (the newest) as pebble would
// and says where reading it stops before its end, or "" if it reads to its end. Pebble
// stops at a damaged record as at the end of the file and then complains about the
// first table the lost records would have explained: the store puts the MANIFEST in
// the message instead.
func manifestDamage(dir string) string {
	ms, err := filepath.Glob(filepath.Join(dir, "MANIFEST-*"))
	if err != nil || len(ms) == 0 {
		return ""
	}
	sort.Strings(ms) // numbered with leading zeros: the last is the newest, the one in use
	name := filepath.Base(ms[len(ms)-1])
	f, err := os.Open(ms[len(ms)-1])
	if err != nil {
		return fmt.Sprintf("%s cannot be read: %v", name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	stop, clean := readRecords(f, 0, nil)
	if clean {
		return ""
	}
	return fmt.Sprintf("%s is damaged: its records stop being readable at offset %d of %d bytes", name, stop, st.Size())
}

// manifestMismatch names the newest MANIFEST when pebble complains about a table file
// that is on disk: the MANIFEST lost the records that list it (cut at a record
// boundary, which reading it cannot tell from its end).
func manifestMismatch(dir string) string {
	ms, err := filepath.Glob(filepath.Join(dir, "MANIFEST-*"))
	if err != nil || len(ms) == 0 {
		return ""
	}
	sort.Strings(ms)
	return fmt.Sprintf("%s does not match the table files on disk (it lost records: cut or damaged)", filepath.Base(ms[len(ms)-1]))
}
