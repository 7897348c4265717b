package store

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/series"
)

// mountTmpfs mounts a tmpfs of size bytes on a fresh directory and unmounts it when
// the test ends (after the test's own cleanups, so close stores first). It needs root
// (CI runs as root); elsewhere the test is skipped with the reason.
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+itoa(size)); err != nil {
		t.Skipf("cannot mount a %s tmpfs to fill (needs root): %v", FormatSize(size), err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

func itoa(n int64) string { return string(appendInt(nil, n)) }

func appendInt(b []byte, n int64) []byte {
	if n >= 10 {
		b = appendInt(b, n/10)
	}
	return append(b, byte('0'+n%10))
}

// fill writes a file of size bytes into dir: space to free later.
func fill(t *testing.T, dir string, size int64) string {
	t.Helper()
	f := filepath.Join(dir, "filler")
	if err := os.WriteFile(f, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// diskFullWriter appends 600-point batches of distinct floats (compressing badly, as
// raw points do) to one series, one quantum after another, and remembers what was
// acknowledged.
type diskFullWriter struct {
	p      *Pebble
	acked  series.Points
	failed series.Points // the last refused batch
	next   int64
}

func (w *diskFullWriter) append() error {
	var pts series.Points
	for range 600 {
		w.next++
		pts.AppendFloat(testStart*1e9+w.next*1e7, float64(w.next)*1.000001)
	}
	start := pts.T[0] / 1e10 * 10
	err := w.p.Append(ShardRef{ID: testRef.ID, Start: start}, "k", pts)
	if err == nil {
		w.acked = series.Concat(w.acked, pts)
	} else {
		w.failed = pts
	}
	return err
}

// check reads every acknowledged point back. A write that failed when the engine itself
// failed may be readable too (pebble had applied it to the memtable): the failed batch
// is allowed after the acknowledged points, whole.
func (w *diskFullWriter) check(t *testing.T) {
	t.Helper()
	var got series.Points
	for s := testStart; s <= w.next/100+testStart+10; s += 10 {
		pts, _, err := w.p.Read(ShardRef{ID: testRef.ID, Start: s}, "k", math.MinInt64, math.MaxInt64)
		if err != nil {
			t.Fatalf("read quantum %d: %v", s, err)
		}
		got = series.Concat(got, pts)
	}
	if got.Len() > w.acked.Len() && w.failed.Len() > 0 {
		assertSame(t, got, series.Concat(w.acked, w.failed))
		return
	}
	assertSame(t, got, w.acked)
}

// wantDiskFull checks that err is a clear disk-full error.
func wantDiskFull(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ErrDiskFull) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("want a disk-full error wrapping ErrDiskFull and ENOSPC, got %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "disk full: ") || !strings.Contains(msg, "no space left") {
		t.Fatalf("error does not say disk full / no space left: %v", err)
	}
}

// TestPebbleDiskFull fills a small filesystem under a store: writes are refused with a
// clear error while the reserve is all that is left, reads keep working, and once
// space is freed writes work again; the store closes and reopens with every
// acknowledged point.
func TestPebbleDiskFull(t *testing.T) {
	for _, mode := range []SyncMode{SyncAlways, SyncBatch, SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			fs := mountTmpfs(t, 32<<20)
			filler := fill(t, fs, 8<<20)
			dir := filepath.Join(fs, "store")
			o := testOptions(mode)
			o.MemTableSize = 1 << 20
			o.DiskReserve = 6 << 20
			p := openTest(t, dir, o)
			w := &diskFullWriter{p: p}
			var err error
			for i := 0; err == nil; i++ {
				if i > 10000 {
					t.Fatal("a 32 MiB filesystem never filled")
				}
				err = w.append()
			}
			wantDiskFull(t, err)
			t.Logf("sync=%s: after %d points: %v", mode, w.acked.Len(), err)
			if _, err := p.DeclareType("other", series.Int); !errors.Is(err, ErrDiskFull) {
				t.Fatalf("DeclareType on a full disk: %v", err)
			}
			w.check(t)
			// Reads go on working, and the engine's background work (flushes into the
			// reserve) succeeds: a seal pass rewrites everything.
			if _, err := p.SealNow(time.Unix(math.MaxInt64/2, 0)); err != nil {
				t.Fatalf("seal on a full disk: %v", err)
			}
			w.check(t)

			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if err := w.append(); err != nil {
					t.Fatalf("append after freeing space: %v", err)
				}
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			w.p = openTest(t, dir, o)
			defer w.p.Close()
			w.check(t)
			if st := w.p.Stats(); st.Points != int64(w.acked.Len()) {
				t.Fatalf("Stats.Points = %d after reopen, want %d", st.Points, w.acked.Len())
			}
		})
	}
}

// TestPebbleDiskFullEngine disables the reserve, so that pebble itself runs into
// ENOSPC, and checks what the store makes of it (see disk.go): with SyncAlways the
// failed commit is an error, not a crash; the store refuses further writes with that
// error; reads keep working; and after a restart with space freed every acknowledged
// point is there and writes work again.
func TestPebbleDiskFullEngine(t *testing.T) {
	fs := mountTmpfs(t, 24<<20)
	filler := fill(t, fs, 8<<20)
	dir := filepath.Join(fs, "store")
	o := testOptions(SyncAlways)
	o.MemTableSize = 1 << 20
	o.DiskReserve = -1
	p := openTest(t, dir, o)
	w := &diskFullWriter{p: p}
	var err error
	for i := 0; err == nil; i++ {
		if i > 10000 {
			t.Fatal("a 24 MiB filesystem never filled")
		}
		err = w.append()
	}
	wantDiskFull(t, err)
	t.Logf("after %d points: %v", w.acked.Len(), err)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// The failure is sticky: pebble's WAL writer latched the error.
	if err2 := w.append(); !errors.Is(err2, ErrDiskFull) {
		t.Fatalf("append after an engine failure: %v", err2)
	}
	w.check(t)
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		t.Logf("Close after an engine failure: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("Close hangs after an engine failure")
	}
	w.p = openTest(t, dir, o)
	defer w.p.Close()
	w.check(t)
	if err := w.append(); err != nil {
		t.Fatalf("append after restart: %v", err)
	}
	w.check(t)
}
