package store

import (
	"errors"
	"fmt"
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
// each log itself the same way, and where the reading stops it looks for valid records
// of the same log further on, in later 32 KiB blocks (the log's unit). Any found were
// dropped by damage, not by a torn tail: the store logs an error naming the file, the
// offset and how many records and bytes are lost, and counts them in
// Stats.WALBytesDropped, so that the node can have the pair re-sent by its peers. A
// damaged record followed only by records in the same block is not told apart from a
// torn tail.

// walBlockSize is pebble's log block size (record.blockSize).
const walBlockSize = 32 << 10

// walLoss is what one log lost.
type walLoss struct {
	file    string
	stop    int64 // where replay stops
	records int   // valid records after it
	bytes   int64 // from stop to the end of the last valid record
}

// scanWALs checks every log in dir.
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
		if l.records > 0 {
			out = append(out, l)
		}
	}
	return out, nil
}

// scanWAL reads one log as a replay would and counts the valid records after the point
// where that stops.
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
	size := st.Size()
	stop, clean := readRecords(f, num, nil)
	l.stop = stop
	if clean {
		return l, nil
	}
	for b := nextWALBlock(stop); b < size; {
		var last int64
		n := 0
		s, _ := readRecords(io.NewSectionReader(f, b, size-b), num, func(end int64) { n++; last = end })
		if n > 0 {
			l.records += n
			l.bytes = b + last - stop
		}
		b = nextWALBlock(b + s)
	}
	return l, nil
}

// nextWALBlock returns the start of the log block after the one holding off.
func nextWALBlock(off int64) int64 { return (off/walBlockSize + 1) * walBlockSize }

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

// reportWALLoss logs and counts what scanWALs found.
func (p *Pebble) reportWALLoss(losses []walLoss) {
	for _, l := range losses {
		p.damage.walDropped.Add(l.bytes)
		p.opts.Logger.Error(fmt.Sprintf("store: write-ahead log %s is damaged at offset %d: replay stops there, and %d valid records (%s) after it are lost on this node; their points come back from the other replicas by repair",
			l.file, l.stop, l.records, FormatSize(l.bytes)), "dir", p.dir)
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
