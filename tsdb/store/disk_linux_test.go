package store

import (
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
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

// smallStore opens a store on a 32 MiB tmpfs with a 4 MiB reserve and appends 20
// batches to it; the store is closed when the test ends.
func smallStore(t *testing.T) (fs, dir string, o PebbleOptions, w *diskFullWriter) {
	t.Helper()
	fs = mountTmpfs(t, 32<<20)
	dir = filepath.Join(fs, "store")
	o = diskFullOptions(SyncAlways, &testutil.SyncBuffer{})
	o.DiskReserve = 4 << 20
	w = &diskFullWriter{p: openClosing(t, dir, o)}
	for range 20 {
		if err := w.append(); err != nil {
			t.Fatal(err)
		}
	}
	return fs, dir, o, w
}

// hogAll writes a file into dir until the filesystem is full, as another program may,
// and returns its name.
func hogAll(t *testing.T, dir string) string {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "hog"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for err == nil {
		_, err = f.Write(make([]byte, 64<<10))
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the disk: %v", err)
	}
	return f.Name()
}

// diskFullWriter appends batches of 100 points of 100 random bytes (strings, which
// compress badly, so that the disk fills after few appends) to one series, one
// quantum after another, and remembers what was acknowledged.
type diskFullWriter struct {
	p      *Pebble
	acked  series.Points
	failed series.Points // the first refused batch
	next   int64
	rnd    *rand.Rand
}

func (w *diskFullWriter) append() error {
	if w.rnd == nil {
		w.rnd = rand.New(rand.NewPCG(1, 2))
	}
	var pts series.Points
	b := make([]byte, 100)
	for range 100 {
		w.next++
		for i := range b {
			b[i] = byte(' ' + w.rnd.IntN(95))
		}
		pts.AppendString(testStart*1e9+w.next*1e7, string(b))
	}
	start := pts.T[0] / 1e10 * 10
	err := w.p.Append(ShardRef{ID: testRef.ID, Start: start}, "k", pts)
	if err == nil {
		w.acked = series.Concat(w.acked, pts)
	} else if w.failed.Len() == 0 {
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

// diskFullOptions returns options for a store on a small filesystem, logging into log.
func diskFullOptions(mode SyncMode, log *testutil.SyncBuffer) PebbleOptions {
	o := testOptions(mode)
	o.MemTableSize = 1 << 20
	o.DiskReserve = 8 << 20
	o.Logger = slog.New(slog.NewTextHandler(log, nil))
	return o
}

// openClosing opens a store that is closed when the test ends, before the filesystem
// under it is unmounted.
func openClosing(t *testing.T, dir string, o PebbleOptions) *Pebble {
	t.Helper()
	p := openTest(t, dir, o)
	t.Cleanup(func() { p.Close() })
	return p
}

// TestPebbleDiskFull fills a small filesystem under a store: writes are refused with a
// clear error while the reserve is all that is left, pebble's own flushes and
// compactions never run out of space, reads keep working, and once space is freed
// writes work again; the store closes and reopens with every acknowledged point.
func TestPebbleDiskFull(t *testing.T) {
	for _, mode := range []SyncMode{SyncAlways, SyncBatch, SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			// The filler is big enough that freeing it lifts the store well clear of the
			// reserve even while pebble's compactions still hold obsolete files.
			fs := mountTmpfs(t, 28<<20)
			filler := fill(t, fs, 10<<20)
			dir := filepath.Join(fs, "store")
			log := &testutil.SyncBuffer{}
			o := diskFullOptions(mode, log)
			w := &diskFullWriter{p: openClosing(t, dir, o)}
			var err error
			for i := 0; err == nil; i++ {
				if i > 10000 {
					t.Fatal("a 28 MiB filesystem never filled")
				}
				err = w.append()
			}
			wantDiskFull(t, err)
			t.Logf("sync=%s: after %d points: %v", mode, w.acked.Len(), err)
			w.check(t)
			// The sealer may use half the reserve: it seals what fits, then waits.
			n, err := w.p.SealNow(time.Unix(math.MaxInt64/2, 0))
			if err != nil && !errors.Is(err, ErrDiskFull) {
				t.Fatalf("seal on a full disk: %v", err)
			}
			t.Logf("the sealer sealed %d pairs on the full disk (%v)", n, err)
			w.check(t)

			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if err := w.append(); err != nil {
					t.Fatalf("append after freeing space: %v", err)
				}
			}
			if err := w.p.Close(); err != nil {
				t.Fatal(err)
			}
			w.p = openClosing(t, dir, o)
			w.check(t)
			if st := w.p.Stats(); st.Points != int64(w.acked.Len()) {
				t.Fatalf("Stats.Points = %d after reopen, want %d", st.Points, w.acked.Len())
			}
			if strings.Contains(log.String(), "no space left") && strings.Contains(log.String(), "background error") {
				t.Fatalf("the engine's own work ran out of space despite the reserve:\n%s", log)
			}
		})
	}
}

// TestPebbleDiskFilledByOthers fills the filesystem from outside the store, to the
// last byte, as another program may: the next write is refused at once with a clear
// error (no hang, no crash), reads keep working, and once space is freed writes work
// again.
func TestPebbleDiskFilledByOthers(t *testing.T) {
	fs, dir, o, w := smallStore(t)
	f := hogAll(t, fs)     // another program takes every byte left
	time.Sleep(spaceFresh) // let the guard's measurement age: it must measure again
	var err error
	done := make(chan error, 1)
	go func() { done <- w.append() }()
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("an append on a full disk hangs")
	}
	wantDiskFull(t, err)
	t.Logf("on a disk filled by another program: %v", err)
	w.check(t)
	if err := os.Remove(f); err != nil {
		t.Fatal(err)
	}
	if err := w.append(); err != nil {
		t.Fatalf("append after freeing space: %v", err)
	}
	if err := w.p.Close(); err != nil {
		t.Fatal(err)
	}
	w.p = openClosing(t, dir, o)
	w.check(t)
}

// TestPebbleDiskFullEngine disables the reserve, so that pebble itself runs into
// ENOSPC, with 4 MiB memtables on a 16 MiB filesystem, where the WAL (whose files pebble
// preallocates at 1.1 × MemTableSize) fails first. The filler freed before the restart
// must leave room for the flush that replaying the WAL makes. Pebble answers the failed commit with
// Logger.Fatalf; the store turns that into an error (no crash), refuses further writes
// with it, and keeps serving reads; after a restart with space freed every
// acknowledged point is there and writes work again. See disk.go.
func TestPebbleDiskFullEngine(t *testing.T) {
	fs := mountTmpfs(t, 16<<20)
	filler := fill(t, fs, 6<<20)
	dir := filepath.Join(fs, "store")
	log := &testutil.SyncBuffer{}
	o := diskFullOptions(SyncAlways, log)
	o.MemTableSize = 4 << 20
	o.NoDiskReserve = true
	w := &diskFullWriter{p: openTest(t, dir, o)}
	var err error
	for i := 0; err == nil; i++ {
		if i > 10000 {
			t.Fatal("a 16 MiB filesystem never filled")
		}
		done := make(chan error, 1)
		go func() { done <- w.append() }()
		select {
		case err = <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("append hangs on a full disk; log:\n%s", log)
		}
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
	// Status must still answer: Stats may not wait on the engine's latched mutex.
	stats := make(chan Stats, 1)
	go func() { stats <- w.p.Stats() }()
	select {
	case st := <-stats:
		if st.DiskBytes <= 0 {
			t.Errorf("Stats after an engine failure reports %d disk bytes", st.DiskBytes)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Stats hangs after an engine failure")
	}
	closed := make(chan error, 1)
	go func() { closed <- w.p.Close() }()
	select {
	case err := <-closed:
		t.Logf("Close after an engine failure: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("Close hangs after an engine failure")
	}
	w.p = openClosing(t, dir, o)
	w.check(t)
	if err := w.append(); err != nil {
		t.Fatalf("append after restart: %v", err)
	}
	w.check(t)
}

// TestPebbleOpensReadOnlyOnFullDisk restarts a store on a filesystem another program
// filled while it was down, with acknowledged points still in its WAL: pebble's own
// open would flush them and fail for want of space. The store opens read-only within
// seconds, serves every acknowledged point, refuses writes with a disk-full error, and
// once space is freed a restart takes writes again with nothing lost.
func TestPebbleOpensReadOnlyOnFullDisk(t *testing.T) {
	fs, dir, o, w := smallStore(t)
	if err := w.p.Close(); err != nil {
		t.Fatal(err)
	}
	hog := hogAll(t, fs)
	for _, reserve := range []int64{o.DiskReserve, 0} { // 0: the reserve off, the open fails with ENOSPC first
		o := o
		o.DiskReserve, o.NoDiskReserve = reserve, reserve == 0
		start := time.Now()
		p, err := OpenPebble(dir, o)
		if err != nil {
			t.Fatalf("reserve %d: open on a full disk: %v", reserve, err)
		}
		took := time.Since(start)
		w.p = p
		w.check(t)
		werr := w.append()
		p.Close()
		wantDiskFull(t, werr)
		if took > 5*time.Second || !strings.Contains(werr.Error(), "read-only") {
			t.Fatalf("reserve %d: opened in %v; append: %v", reserve, took, werr)
		}
		t.Logf("reserve %d: opened read-only in %v; append: %v", reserve, took.Round(time.Millisecond), werr)
	}
	if err := os.Remove(hog); err != nil {
		t.Fatal(err)
	}
	w.p = openClosing(t, dir, o)
	w.check(t)
	if err := w.append(); err != nil {
		t.Fatalf("append after freeing space: %v", err)
	}
}
