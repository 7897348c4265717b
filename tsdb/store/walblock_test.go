package store

import (
	"bytes"
	"errors"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/record"
	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/tsdb/series"
)

// TestPebbleDamageInFirstWALBlock is issue 31's case: a small log, all of it in its
// first 32 KiB block, with a record flipped in the middle. Replay stops at the flip and
// drops the records after it in the same block; the store must find them by their chunk
// headers, report the loss, and with RefuseWALLoss refuse to open without replaying
// (so that the log stays as it was and a second open refuses again). A flip in the last
// record is only a warning: it cannot be told from a write cut by a crash.
func TestPebbleDamageInFirstWALBlock(t *testing.T) {
	const batches, per = 10, 20
	write := func(t *testing.T) (dir, wal string, ends []int64) {
		dir = t.TempDir()
		p := openTest(t, dir, unbuffered(SyncAlways))
		for i := range batches {
			var pts series.Points
			for j := range per {
				pts.AppendInt(testStart*1e9+int64(i*per+j), int64(i*per+j))
			}
			if err := p.Append(testRef, "k", pts); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		sort.Strings(logs)
		if len(logs) == 0 {
			t.Fatal("no WAL")
		}
		wal = logs[len(logs)-1]
		f, err := os.Open(wal)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		num := walNum(t, wal)
		readRecords(f, num, func(end int64) { ends = append(ends, end) })
		if ends[len(ends)-1] > walBlockSize {
			t.Fatalf("the log spans %d bytes: more than one block", ends[len(ends)-1])
		}
		return dir, wal, ends
	}
	flip := func(t *testing.T, wal string, at int64) {
		b, err := os.ReadFile(wal)
		if err != nil {
			t.Fatal(err)
		}
		for i := at; i < at+16 && i < int64(len(b)); i++ {
			b[i] ^= 0x5a
		}
		if err := os.WriteFile(wal, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	open := func(t *testing.T, dir string, refuse bool) (*Pebble, *testutil.SyncBuffer, error) {
		log := &testutil.SyncBuffer{}
		o := testOptions(SyncAlways)
		o.Logger = slog.New(slog.NewTextHandler(log, nil))
		o.RefuseWALLoss = refuse
		p, err := OpenPebble(dir, o)
		return p, log, err
	}

	t.Run("middle", func(t *testing.T) {
		dir, wal, ends := write(t)
		mid := len(ends) / 2
		flip(t, wal, ends[mid-1]+20) // inside record mid
		for range 2 {                // refused twice: the first refusal changed nothing
			_, _, err := open(t, dir, true)
			if !errors.Is(err, ErrWALLoss) || !strings.Contains(err.Error(), filepath.Base(wal)) {
				t.Fatalf("open with RefuseWALLoss: %v, want ErrWALLoss naming %s", err, filepath.Base(wal))
			}
			t.Log(err)
		}
		var out strings.Builder
		r, err := Fsck(dir, &out)
		if err != nil {
			t.Fatal(err)
		}
		if r.WALBytesDropped == 0 || !strings.Contains(out.String(), "write-ahead logs: 1 damaged") {
			t.Fatalf("fsck: dropped %d\n%s", r.WALBytesDropped, out.String())
		}
		p, log, err := open(t, dir, false)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		pts, _, err := p.Read(testRef, "k", math.MinInt64, math.MaxInt64)
		if err != nil {
			t.Fatal(err)
		}
		if pts.Len() >= batches*per {
			t.Fatal("the flip lost nothing")
		}
		if p.Stats().WALBytesDropped <= 0 || !strings.Contains(log.String(), "level=ERROR") || !strings.Contains(log.String(), filepath.Base(wal)) {
			t.Fatalf("%d of %d points back, WALBytesDropped %d, log:\n%s", pts.Len(), batches*per, p.Stats().WALBytesDropped, log)
		}
	})
	t.Run("last record", func(t *testing.T) {
		dir, wal, ends := write(t)
		flip(t, wal, ends[len(ends)-2]+14)
		p, log, err := open(t, dir, true)
		if err != nil {
			t.Fatalf("a damaged last record refused: %v", err)
		}
		defer p.Close()
		if p.Stats().WALBytesDropped != 0 || !strings.Contains(log.String(), "level=WARN") || !strings.Contains(log.String(), "last record") {
			t.Fatalf("WALBytesDropped %d, log:\n%s", p.Stats().WALBytesDropped, log)
		}
	})
}

func walNum(t *testing.T, path string) pebble.FileNum {
	t.Helper()
	n, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(path), ".log"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return pebble.FileNum(n)
}

// walBytes returns a log numbered num holding n records of size bytes each, as
// pebble's LogWriter writes it.
func walBytes(t *testing.T, num pebble.FileNum, n, size int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := record.NewLogWriter(&buf, num, record.LogWriterConfig{})
	for i := range n {
		if _, err := w.WriteRecord(bytes.Repeat([]byte{byte(i + 1)}, size)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestScanWALRecycledLog: pebble reuses old log files, so behind a log's records lie
// an older log's. A torn last record followed by the older log's chunks is no loss
// (they carry the older log's number); damage before the log's own later records is.
func TestScanWALRecycledLog(t *testing.T) {
	old := walBytes(t, 2, 200, 300) // about two blocks
	cur := walBytes(t, 9, 3, 300)
	for _, tc := range []struct {
		name string
		at   int // byte of cur flipped
		lost bool
	}{
		{"torn last record", len(cur) - 10, false},
		{"damaged first record", 40, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := append([]byte(nil), old...)
			copy(b, cur) // log 9 written over log 2's start
			b[tc.at] ^= 0xff
			path := filepath.Join(t.TempDir(), "000009.log")
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			l, err := scanWAL(path, 9)
			if err != nil {
				t.Fatal(err)
			}
			if got := l.records > 0; got != tc.lost {
				t.Fatalf("stop %d, %d records (%d bytes) found after it; want a loss: %v", l.stop, l.records, l.bytes, tc.lost)
			}
			if tc.lost && l.records != 2 {
				t.Fatalf("%d records found after the damage, want the 2 after it", l.records)
			}
		})
	}
}

// FuzzScanWAL: whatever a log file holds, scanning it neither panics nor reports a
// loss outside the file.
func FuzzScanWAL(f *testing.F) {
	var tb testing.T
	f.Add(walBytes(&tb, 9, 3, 300))
	f.Add(walBytes(&tb, 9, 150, 300)[:40000])
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := scanLog(walLoss{}, bytes.NewReader(b), int64(len(b)), 9)
		if err != nil {
			t.Fatal(err)
		}
		if l.stop < 0 || l.stop > int64(len(b)) || l.bytes < 0 || l.stop+l.bytes > int64(len(b)) {
			t.Fatalf("stop %d, lost %d bytes, in a file of %d", l.stop, l.bytes, len(b))
		}
	})
}
