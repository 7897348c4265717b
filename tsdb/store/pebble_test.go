package store

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/series"
)

// testOptions returns options for tests: no background sealing (tests call SealNow).
func testOptions(mode SyncMode) PebbleOptions {
	o := DefaultPebbleOptions()
	o.Sync = mode
	o.SealInterval = -1
	return o
}

// unbuffered returns testOptions(mode) without the write buffer, for tests of how the
// engine lays out each append (blocks, WAL records): buffered, appends reach it merged.
func unbuffered(mode SyncMode) PebbleOptions {
	o := testOptions(mode)
	o.WriteBuffer = -1
	return o
}

func openTest(t testing.TB, dir string, o PebbleOptions) *Pebble {
	t.Helper()
	p, err := OpenPebble(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var (
	testStart = int64(1_700_000_000)
	testRef   = ShardRef{ID: quanta.ShardID(quanta.QFI, "k", testStart), Start: testStart}
)

func TestPebbleReopenKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	p := openTest(t, dir, testOptions(SyncNone))
	t0 := testStart * 1e9
	in := map[string]series.Points{
		"f": {Type: series.Float, T: []int64{t0, t0 + 1, t0 + 2}, F: []float64{1.5, math.NaN(), -3}},
		"i": {Type: series.Int, T: []int64{t0 + 5}, I: []int64{math.MinInt64}},
		"s": {Type: series.String, T: []int64{t0, t0 + 9}, S: []string{"", "on"}},
	}
	for k, pts := range in {
		if err := p.Append(testRef, k, pts); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.SealNow(time.Unix(testStart+3600, 0)); err != nil {
		t.Fatal(err)
	}
	// A late point after the seal stays raw beside the chunk.
	if err := p.Append(testRef, "f", series.Points{Type: series.Float, T: []int64{t0 + 1}, F: []float64{2}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DeclareType("declared", series.Int); err != nil {
		t.Fatal(err)
	}
	stats := p.Stats()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}

	p = openTest(t, dir, testOptions(SyncNone))
	defer p.Close()
	if got := p.Stats(); got.Counts() != stats.Counts() {
		t.Fatalf("Stats after reopen = %+v, want %+v", got, stats)
	}
	in["f"].F[1] = 2
	for k, want := range in {
		got, held, err := p.Read(testRef, k, math.MinInt64, math.MaxInt64)
		if err != nil || !held {
			t.Fatalf("%s: held=%v err=%v", k, held, err)
		}
		if got.Len() != want.Len() || got.Type != want.Type {
			t.Fatalf("%s: got %+v, want %+v", k, got, want)
		}
		for i := range want.T {
			if got.T[i] != want.T[i] || got.Value(i) != want.Value(i) {
				t.Fatalf("%s point %d: got %d=%s, want %d=%s", k, i, got.T[i], got.Value(i), want.T[i], want.Value(i))
			}
		}
		if typ, ok := p.SeriesType(k); !ok || typ != want.Type {
			t.Fatalf("%s: type %v after reopen", k, typ)
		}
	}
	if typ, ok := p.SeriesType("declared"); !ok || typ != series.Int {
		t.Fatalf("declared type after reopen: %v, %v", typ, ok)
	}
	if err := p.Append(testRef, "i", series.Points{Type: series.String, T: []int64{t0}, S: []string{"x"}}); !errors.Is(err, series.ErrTypeMismatch) {
		t.Fatalf("type not enforced after reopen: %v", err)
	}
}

// countKeys counts the keys of pair id of one kind.
func countKeys(t *testing.T, p *Pebble, id []byte, kind byte) int {
	t.Helper()
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: pairKey(nil, id, kind), UpperBound: pairKey(nil, id, kind+1)})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		n++
	}
	return n
}

func TestPebbleSeal(t *testing.T) {
	o := testOptions(SyncAlways)
	o.ChunkMaxPoints = 100
	p := openTest(t, t.TempDir(), o)
	defer p.Close()

	now := time.Unix(testStart+3600, 0)
	old := testRef // an hour before now: due for sealing
	cur := ShardRef{ID: quanta.ShardID(quanta.QFI, "k", now.Unix()), Start: now.Unix()}
	var want series.Points
	for i := range 250 {
		want.AppendFloat(old.Start*1e9+int64(i)*16_666_667, 60+float64(i%7)/1000)
	}
	if err := p.Append(old, "k", want); err != nil {
		t.Fatal(err)
	}
	if err := p.Append(cur, "k", want.Slice(0, 1)); err != nil {
		t.Fatal(err)
	}
	before, _, err := p.Read(old, "k", math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}

	n, err := p.SealNow(now)
	if err != nil || n != 1 {
		t.Fatalf("SealNow sealed %d pairs, err %v; want 1 (the open quantum waits)", n, err)
	}
	id := pairID(old, "k")
	if blocks, chunks := countKeys(t, p, id, kindBlock), countKeys(t, p, id, kindChunk); blocks != 0 || chunks != 3 {
		t.Fatalf("after seal: %d blocks, %d chunks; want 0 and 3", blocks, chunks)
	}
	if raw := countKeys(t, p, pairID(cur, "k"), kindBlock); raw != 1 {
		t.Fatalf("open quantum: %d blocks, want 1", raw)
	}
	for range 2 { // the second read is served by the hot tier
		after, held, err := p.Read(old, "k", math.MinInt64, math.MaxInt64)
		if err != nil || !held {
			t.Fatal(held, err)
		}
		assertSame(t, after, before)
	}
	// Reads within and across chunk boundaries.
	for _, r := range [][2]int{{0, 1}, {99, 101}, {100, 200}, {150, 250}, {249, 250}, {10, 10}} {
		from, to := want.T[r[0]], old.Start*1e9+1e12
		if r[1] < want.Len() {
			to = want.T[r[1]]
		}
		got, _, err := p.Read(old, "k", from, to)
		if err != nil {
			t.Fatal(err)
		}
		assertSame(t, got, want.Slice(r[0], r[1]))
	}

	// A late point into the sealed quantum: readable at once, overriding the chunk.
	late := series.Points{Type: series.Float, T: []int64{want.T[120], want.T[120] + 1}, F: []float64{-1, -2}}
	if err := p.Append(old, "k", late); err != nil {
		t.Fatal(err)
	}
	expect := series.Merge(want, late)
	got, _, err := p.Read(old, "k", math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	assertSame(t, got, expect)
	if st := p.Stats(); st.Points != int64(want.Len())+1+1 {
		t.Fatalf("Stats.Points = %d after a late overwrite and a late new point", st.Points)
	}
	// The next pass folds it in.
	if n, err := p.SealNow(now); err != nil || n != 1 {
		t.Fatalf("re-seal: %d, %v", n, err)
	}
	if raw := countKeys(t, p, id, kindBlock); raw != 0 {
		t.Fatalf("after re-seal: %d blocks", raw)
	}
	got, _, err = p.Read(old, "k", math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	assertSame(t, got, expect)
	if n, err := p.SealNow(now); err != nil || n != 0 {
		t.Fatalf("nothing left to seal, yet %d, %v", n, err)
	}
}

func assertSame(t *testing.T, got, want series.Points) {
	t.Helper()
	if got.Len() != want.Len() {
		t.Fatalf("%d points, want %d", got.Len(), want.Len())
	}
	for i := range want.T {
		if got.T[i] != want.T[i] || !got.Equal(i, &want, i) {
			t.Fatalf("point %d: %d=%s, want %d=%s", i, got.T[i], got.Value(i), want.T[i], want.Value(i))
		}
	}
}

func TestPebbleBackgroundLoops(t *testing.T) {
	o := testOptions(SyncBatch)
	o.SyncInterval = time.Millisecond
	o.SealInterval = time.Millisecond
	o.Quantum = 1
	o.SealGrace = time.Nanosecond
	p := openTest(t, t.TempDir(), o)
	ref := ShardRef{ID: testRef.ID, Start: 0} // 1970: long due
	if err := p.Append(ref, "k", series.Points{Type: series.Int, T: []int64{1}, I: []int64{1}}); err != nil {
		t.Fatal(err)
	}
	// Wait until the background sealer has done the work (the deadline only bounds a
	// failure, correctness does not depend on timing).
	id := pairID(ref, "k")
	testutil.WaitFor(t, 10*time.Second, func() bool { return countKeys(t, p, id, kindBlock) == 0 },
		"the background sealer to seal a long-due quantum")
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SealNow(time.Now()); !errors.Is(err, ErrClosed) {
		t.Fatalf("SealNow after Close: %v", err)
	}
	if p.DiskUsage() != 0 {
		t.Fatal("DiskUsage after Close")
	}
}

func TestPebbleDiskUsage(t *testing.T) {
	p := openTest(t, t.TempDir(), testOptions(SyncNone))
	defer p.Close()
	before := p.DiskUsage()
	var pts series.Points
	for i := range 10000 {
		pts.AppendInt(int64(i), int64(i))
	}
	if err := p.Append(testRef, "k", pts); err != nil {
		t.Fatal(err)
	}
	if err := p.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if after := p.DiskUsage(); after <= before {
		t.Fatalf("DiskUsage %d after writing, %d before", after, before)
	}
}

// writeFlushed makes a store with its data in table files and closes it.
func writeFlushed(t *testing.T, dir string) {
	t.Helper()
	p := openTest(t, dir, testOptions(SyncNone))
	var pts series.Points
	for i := range 1000 {
		pts.AppendInt(testStart*1e9+int64(i), int64(i))
	}
	if err := p.Append(testRef, "k", pts); err != nil {
		t.Fatal(err)
	}
	if err := p.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

func onlyFile(t *testing.T, dir, pattern string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil || len(m) != 1 {
		t.Fatalf("%s in %s: %v %v", pattern, dir, m, err)
	}
	return m[0]
}

func TestPebbleCorruptStoreIsRefused(t *testing.T) {
	damage := map[string]func(t *testing.T, dir string) string{
		"truncated table": func(t *testing.T, dir string) string {
			f := onlyFile(t, dir, "*.sst")
			st, _ := os.Stat(f)
			if err := os.Truncate(f, st.Size()/2); err != nil {
				t.Fatal(err)
			}
			return filepath.Base(f)
		},
		"truncated manifest": func(t *testing.T, dir string) string {
			f := onlyFile(t, dir, "MANIFEST-*")
			if err := os.Truncate(f, 10); err != nil {
				t.Fatal(err)
			}
			return filepath.Base(f)
		},
		"garbage manifest": func(t *testing.T, dir string) string {
			f := onlyFile(t, dir, "MANIFEST-*")
			if err := os.WriteFile(f, []byte(strings.Repeat("\xde\xad", 100)), 0o644); err != nil {
				t.Fatal(err)
			}
			return filepath.Base(f)
		},
		"missing table": func(t *testing.T, dir string) string {
			f := onlyFile(t, dir, "*.sst")
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
			return filepath.Base(f)
		},
	}
	for name, f := range damage {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeFlushed(t, dir)
			file := f(t, dir)
			p, err := OpenPebble(dir, testOptions(SyncNone))
			if err == nil {
				p.Close()
				t.Fatalf("opened a store with a %s", name)
			}
			if !strings.Contains(err.Error(), strings.TrimSuffix(file, ".sst")) {
				t.Fatalf("error does not name %s: %v", file, err)
			}
			t.Logf("%s: %v", name, err)
		})
	}
}

// TestPebbleTornWALKeepsPrefix cuts the WAL in half, as a power cut during a write
// may: the store opens, and what it holds is a prefix of the writes.
//
// Buffered, the appends reach the WAL as one record per drain of the write buffer
// (a small buffer here drains every few dozen appends): the cut keeps whole drains.
func TestPebbleTornWALKeepsPrefix(t *testing.T) {
	for _, c := range []struct {
		name   string
		buffer int64
	}{{"unbuffered", -1}, {"buffered", 4 << 10}} {
		t.Run(c.name, func(t *testing.T) {
			o := testOptions(SyncNone)
			o.WriteBuffer = c.buffer
			testTornWALKeepsPrefix(t, o)
		})
	}
}

func testTornWALKeepsPrefix(t *testing.T, o PebbleOptions) {
	dir := t.TempDir()
	p := openTest(t, dir, o)
	const n = 500
	for i := range n {
		pts := series.Points{Type: series.Int, T: []int64{testStart*1e9 + int64(i)}, I: []int64{int64(i)}}
		if err := p.Append(testRef, "k", pts); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(); err != nil { // the memtable stays in the WAL
		t.Fatal(err)
	}
	wal := onlyFile(t, dir, "*.log")
	st, _ := os.Stat(wal)
	if err := os.Truncate(wal, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	p = openTest(t, dir, o)
	defer p.Close()
	pts, _, err := p.Read(testRef, "k", math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range pts.I {
		if v != int64(i) {
			t.Fatalf("not a prefix: point %d holds %d", i, v)
		}
	}
	if pts.Len() == 0 || pts.Len() == n {
		t.Fatalf("%d of %d points after cutting the WAL in half", pts.Len(), n)
	}
	if st := p.Stats(); st.Points != int64(pts.Len()) {
		t.Fatalf("Stats.Points = %d, but %d points survived", st.Points, pts.Len())
	}
}

// TestPebbleCorruptTableBlock damages the inside of a table: opening succeeds (sizes
// match), but reading the damaged block fails with an error, not a panic.
func TestPebbleCorruptTableBlock(t *testing.T) {
	dir := t.TempDir()
	writeFlushed(t, dir)
	f := onlyFile(t, dir, "*.sst")
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	for i := 100; i < 200; i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := OpenPebble(dir, testOptions(SyncNone))
	if err != nil {
		t.Logf("open refused: %v", err)
		return
	}
	defer p.Close()
	_, _, err = p.Read(testRef, "k", math.MinInt64, math.MaxInt64)
	if err == nil {
		t.Fatal("read through a damaged block succeeded")
	}
	t.Logf("read: %v", err)
}

// The helper process: when the test binary runs with helperEnv set, TestMain runs
// helperMain instead of the tests. It writes into a store and reports on stdout every
// write that Append acknowledged, until the parent kills it.
const helperEnv = "TSDHT_STORE_HELPER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		if err := helperMain(spec); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// helperMain runs a helper spec "mode:writers:count:dir". Each writer appends single
// points 0, 1, 2, … to series w<n> and prints "n i" once each is acknowledged; with a
// count it stops after count points, prints "done" and waits to be killed.
func helperMain(spec string) error {
	parts := strings.SplitN(spec, ":", 4)
	if len(parts) != 4 {
		return fmt.Errorf("bad spec %q", spec)
	}
	mode, err := ParseSyncMode(parts[0])
	if err != nil {
		return err
	}
	writers, _ := strconv.Atoi(parts[1])
	count, _ := strconv.Atoi(parts[2])
	p, err := OpenPebble(parts[3], testOptions(mode))
	if err != nil {
		return err
	}
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			key := fmt.Sprintf("w%d", w)
			for i := 0; count == 0 || i < count; i++ {
				pts := series.Points{Type: series.Int, T: []int64{testStart*1e9 + int64(i)}, I: []int64{int64(i)}}
				if err := p.Append(testRef, key, pts); err != nil {
					errs <- err
					return
				}
				// One write(2) per line: lines of concurrent writers never interleave.
				fmt.Fprintf(os.Stdout, "%d %d\n", w, i)
			}
			errs <- nil
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			return err
		}
	}
	fmt.Fprintln(os.Stdout, "done")
	select {} // wait for SIGKILL
}

// runHelper starts a helper, lets it run until stop says so (given each stdout line),
// SIGKILLs it and returns every line it printed.
func runHelper(t *testing.T, spec string, stop func(line string, n int) bool) []string {
	t.Helper()
	start := func(argv ...string) (*exec.Cmd, io.Reader, error) {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), helperEnv+"="+spec)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, nil, err
		}
		return cmd, out, cmd.Start()
	}
	cmd, out, err := start(os.Args[0], "-test.run=^$")
	if errors.Is(err, syscall.ENOEXEC) {
		// A cross-compiled test binary run by qemu-user (without binfmt_misc) cannot
		// exec itself; the emulator can, and SIGKILL still hits the helper's process.
		emu, lookErr := exec.LookPath("qemu-" + runtime.GOARCH + "-static")
		if lookErr != nil {
			t.Skipf("cannot re-exec the test binary: %v", err)
		}
		cmd, out, err = start(emu, os.Args[0], "-test.run=^$")
	}
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(out)
	killed := false
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if !killed && stop(sc.Text(), len(lines)) {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	// After the kill the pipe still holds what the helper printed before it died:
	// reading to EOF collects every acknowledgement.
	err = cmd.Wait()
	if !killed {
		t.Fatalf("helper exited before it was killed: %v", err)
	}
	return lines
}

// TestKillKeepsAcknowledgedWrites SIGKILLs a process in the middle of SyncAlways
// appends from several goroutines and checks that every acknowledged point is there.
func TestKillKeepsAcknowledgedWrites(t *testing.T) {
	dir := t.TempDir()
	const writers = 4
	acks := 400
	if testing.Short() {
		acks = 40
	}
	lines := runHelper(t, fmt.Sprintf("always:%d:0:%s", writers, dir), func(_ string, n int) bool { return n >= acks })

	p := openTest(t, dir, testOptions(SyncAlways))
	defer p.Close()
	held := make(map[string]map[int64]bool)
	for w := range writers {
		key := fmt.Sprintf("w%d", w)
		pts, _, err := p.Read(testRef, key, math.MinInt64, math.MaxInt64)
		if err != nil {
			t.Fatal(err)
		}
		held[key] = make(map[int64]bool)
		for _, v := range pts.I {
			held[key][v] = true
		}
	}
	for _, l := range lines {
		var w, i int64
		if _, err := fmt.Sscanf(l, "%d %d", &w, &i); err != nil {
			t.Fatalf("helper line %q: %v", l, err)
		}
		if !held[fmt.Sprintf("w%d", w)][i] {
			t.Fatalf("acknowledged point %d of writer %d lost in a kill", i, w)
		}
	}
	t.Logf("%d acknowledged appends survived SIGKILL; %d points held", len(lines), p.Stats().Points)
}

// TestKillLosesUnsyncedTail measures what SyncNone and SyncBatch lose when the process
// is killed right after acknowledging 100 appends, and checks that what survives is a
// prefix of the acknowledged writes, never one with holes.
func TestKillLosesUnsyncedTail(t *testing.T) {
	const count = 100
	for _, mode := range []SyncMode{SyncNone, SyncBatch} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			runHelper(t, fmt.Sprintf("%s:1:%d:%s", mode, count, dir), func(l string, _ int) bool { return l == "done" })
			p := openTest(t, dir, testOptions(mode))
			defer p.Close()
			pts, _, err := p.Read(testRef, "w0", math.MinInt64, math.MaxInt64)
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range pts.I {
				if v != int64(i) {
					t.Fatalf("survivors are not a prefix: point %d holds %d", i, v)
				}
			}
			t.Logf("sync=%s: SIGKILL right after %d acknowledged single-point appends lost %d of them",
				mode, count, count-pts.Len())
		})
	}
}
