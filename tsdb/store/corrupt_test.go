package store

import (
	"errors"
	"io"
	"log/slog"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/series"
)

// writeSealedMany fills a store with one long sealed pair (many chunks, so many table
// blocks) and flushes it into a table: the shape a flipped block hides in.
func writeSealedMany(t *testing.T, dir string) (ref ShardRef, n int) {
	t.Helper()
	o := testOptions(SyncNone)
	o.Quantum = 3600
	o.ChunkMaxPoints = 256
	p := openTest(t, dir, o)
	start := int64(1_700_000_000 / 3600 * 3600)
	ref = ShardRef{ID: quanta.ShardID(quanta.QFI, "k", start), Start: start}
	r := rand.New(rand.NewSource(1))
	var pts series.Points
	n = 60 * 3600 / 4
	for i := range n {
		pts.AppendFloat(start*1e9+int64(i)*4*16_666_667, 60+r.Float64()*0.01)
	}
	if err := p.Append(ref, "k", pts); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SealNow(time.Unix(start, 0).Add(48 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := p.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := p.db.Compact([]byte{0}, []byte{0xff}, true); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	return ref, n
}

// TestPebbleFlippedBlockIsNeverAShortRead flips 64 bytes at many places of the table
// that holds a sealed pair: every read of the whole pair either returns every point or
// fails with an error that says the store is damaged — never a silent short answer —
// and each failure is counted in Stats.
func TestPebbleFlippedBlockIsNeverAShortRead(t *testing.T) {
	src := t.TempDir()
	ref, n := writeSealedMany(t, src)
	sst := onlyFile(t, src, "*.sst")
	orig, err := os.ReadFile(sst)
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for k := 1; k < 20; k++ {
		off := len(orig) * k / 24 // the table's footer and index are at the end: stay in the data
		dir := t.TempDir()
		copyDir(t, src, dir)
		b := append([]byte(nil), orig...)
		for i := off; i < off+64 && i < len(b); i++ {
			b[i] ^= 0x5a
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(sst)), b, 0o644); err != nil {
			t.Fatal(err)
		}
		o := testOptions(SyncNone)
		o.Quantum = 3600
		p, err := OpenPebble(dir, o)
		if err != nil {
			failed++
			continue
		}
		pts, _, err := p.Read(ref, "k", math.MinInt64, math.MaxInt64)
		switch {
		case err != nil:
			failed++
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("flip at %d: the read failed, but not as corruption: %v", off, err)
			}
			if p.Stats().Corruptions == 0 {
				t.Errorf("flip at %d: a corrupt read is not counted in Stats", off)
			}
		case pts.Len() != n:
			t.Errorf("flip at %d: a silent short read: %d of %d points", off, pts.Len(), n)
		}
		p.Close()
	}
	if failed == 0 {
		t.Fatal("no flip was detected at all: the test damages nothing it reads")
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPebbleDamagedWALIsReported flips a record in the middle of a write-ahead log,
// as a bad sector would after a crash: pebble replays up to the flip and drops the
// acknowledged writes after it. The store must say so — an error in the log naming the
// file, and the lost bytes in Stats — instead of opening as if nothing happened. A log
// cut at its end (a torn tail) is not reported.
func TestPebbleDamagedWALIsReported(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(b []byte) []byte
		lost   bool
	}{
		{"flipped record", func(b []byte) []byte {
			for i := 1000; i < 1064; i++ {
				b[i] ^= 0x5a
			}
			return b
		}, true},
		{"torn tail", func(b []byte) []byte { return b[:len(b)-700] }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := openTest(t, dir, unbuffered(SyncNone)) // a WAL record per batch
			const batches, per = 400, 50
			const n = batches * per
			r := rand.New(rand.NewSource(2))
			for i := range batches {
				var pts series.Points
				for j := range per {
					pts.AppendInt(testStart*1e9+int64(i*per+j), r.Int63())
				}
				if err := p.Append(testRef, "k", pts); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Close(); err != nil { // the memtable stays in the WAL
				t.Fatal(err)
			}
			logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
			if len(logs) == 0 {
				t.Fatal("no WAL")
			}
			sort.Strings(logs)
			wal := logs[len(logs)-1] // the live one
			b, err := os.ReadFile(wal)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) < 3*walBlockSize {
				t.Fatalf("the WAL holds %d bytes: too few blocks for the test", len(b))
			}
			if err := os.WriteFile(wal, tc.damage(b), 0o644); err != nil {
				t.Fatal(err)
			}
			log := &testutil.SyncBuffer{}
			o := testOptions(SyncAlways)
			o.Logger = slog.New(slog.NewTextHandler(log, nil))
			p = openTest(t, dir, o)
			defer p.Close()
			pts, _, err := p.Read(testRef, "k", math.MinInt64, math.MaxInt64)
			if err != nil {
				t.Fatal(err)
			}
			dropped := p.Stats().WALBytesDropped
			t.Logf("%d of %d points replayed; WALBytesDropped %d", pts.Len(), n, dropped)
			if !tc.lost {
				if dropped != 0 || strings.Contains(log.String(), "write-ahead log") {
					t.Fatalf("a torn tail reported as damage: %d bytes; log:\n%s", dropped, log)
				}
				return
			}
			if pts.Len() >= n {
				t.Fatal("the flip lost nothing: the test damages nothing pebble reads")
			}
			if dropped <= 0 {
				t.Fatalf("%d acknowledged points vanished and Stats.WALBytesDropped is %d", n-pts.Len(), dropped)
			}
			if !strings.Contains(log.String(), filepath.Base(wal)) || !strings.Contains(log.String(), "level=ERROR") {
				t.Fatalf("no error naming %s in the log:\n%s", filepath.Base(wal), log)
			}
		})
	}
}

// TestFsck checks a healthy store and damaged copies of it offline.
func TestFsck(t *testing.T) {
	src := t.TempDir()
	writeSealedMany(t, src)
	var out strings.Builder
	r, err := Fsck(src, &out)
	if err != nil {
		t.Fatal(err)
	}
	if r.Damaged() || r.Pairs != 1 || r.Points == 0 || r.Tables == 0 {
		t.Fatalf("a healthy store: %+v\n%s", r, out.String())
	}
	sst := onlyFile(t, src, "*.sst")
	b, _ := os.ReadFile(sst)
	dir := t.TempDir()
	copyDir(t, src, dir)
	for i := len(b) / 3; i < len(b)/3+64; i++ {
		b[i] ^= 0x5a
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.Base(sst)), b, 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	r, err = Fsck(dir, &out)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Damaged() || r.DamagedTables != 1 || r.DamagedPairs != 1 {
		t.Fatalf("a flipped block: %+v\n%s", r, out.String())
	}
	if !strings.Contains(strings.Join(r.Problems, "\n"), filepath.Base(strings.TrimSuffix(sst, ".sst"))) {
		t.Fatalf("the problems do not name the table: %q", r.Problems)
	}
	t.Logf("%s%s", out.String(), strings.Join(r.Problems, "\n"))

	// A store in use is refused, not read under a running node.
	p := openTest(t, src, testOptions(SyncNone))
	defer p.Close()
	if _, err := Fsck(src, io.Discard); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("fsck of a store in use: %v", err)
	}
}

// TestPebbleDamagedManifestIsNamed cuts the MANIFEST of a store at several points of
// its last records: where pebble then refuses the store it names a table file that
// exists; the store's error must name the MANIFEST. The cuts reach back over the last
// 512 bytes: the records that close a store (obsolete WAL and table deletions) can
// come after the last one naming a table, and a cut inside them alone is a torn tail
// that pebble rightly ignores.
func TestPebbleDamagedManifestIsNamed(t *testing.T) {
	src := t.TempDir()
	writeSealedMany(t, src)
	m := onlyFile(t, src, "MANIFEST-*")
	st, _ := os.Stat(m)
	refused := 0
	for cut := int64(1); cut <= 512 && cut < st.Size(); cut += 7 {
		dir := t.TempDir()
		copyDir(t, src, dir)
		if err := os.Truncate(filepath.Join(dir, filepath.Base(m)), st.Size()-cut); err != nil {
			t.Fatal(err)
		}
		p, err := OpenPebble(dir, testOptions(SyncNone))
		if err == nil {
			p.Close()
			continue
		}
		refused++
		if !strings.Contains(err.Error(), filepath.Base(m)) {
			t.Fatalf("cut %d bytes: the error does not name %s: %v", cut, filepath.Base(m), err)
		}
	}
	if refused == 0 {
		t.Fatal("no cut of the MANIFEST made pebble refuse the store: the test damages nothing that matters")
	}
}
