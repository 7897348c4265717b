package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A full disk.
//
// Pebble (v1.1.5) does not survive running out of space itself. Measured on small tmpfs
// filesystems with the reserve below disabled, and read in its source:
//   - If a WAL write fails first (TestPebbleDiskFullEngine: 4 MiB memtables on 16 MiB),
//     every later synced commit fails, and DB.Apply answers the failed commit with Logger.Fatalf ("fatal
//     commit error"), which must not return: pebble's default logger exits the
//     process. The batch is already in the memtable. Unsynced commits see no error at
//     all; the WAL error stays latched, and the next WAL rotation (a full memtable, a
//     Flush, a Compact) panics while holding the DB mutex, after which every call hangs.
//   - If a flush fails first (1 MiB memtables on 24 MiB), pebble logs a background
//     error and retries at once, in a tight loop (66,815 retries in 90 s); the
//     memtables fill up and the next commit blocks in a write stall until space is
//     freed: an append hangs instead of failing.
//   - A failed MANIFEST write calls Fatalf from pebble's own goroutine, which no caller
//     can recover: the process dies.
//
// So the store never lets pebble get there: before every append, declaration and seal
// it checks the free space of its filesystem (statfs, cached while plenty is left) and
// refuses the write with ErrDiskFull once less than DiskReserve would remain, which
// leaves the reserve to pebble's WAL rotations, flushes and compactions (compactions
// write their output before deleting their input; pebble itself keeps expanded
// compactions under half the free space). Reads keep working, and writes work again as
// soon as space is freed (by the disk budget, an operator, another program):
// TestPebbleDiskFull, TestPebbleDiskFilledByOthers. The sealer waits too, although
// sealing shrinks the data in the end: a seal writes its chunks before compaction
// reclaims the raw points.
//
// If pebble hits ENOSPC anyway (another program filled the disk while a write was
// under way, or the reserve is disabled), the store turns the Fatalf of a failed commit
// into an error, marks itself failed, and from then on refuses every write with that
// error without calling pebble, so the latched WAL error never reaches a WAL rotation
// and the background loops stop. Reads keep working, and Close returns the error
// instead of hanging. Every acknowledged write is in the WAL; the node serves it again
// after a restart with space freed. A stalled flush or a failed MANIFEST write stays
// out of the store's hands: the first blocks the writes under way until space is
// freed, the second ends the process, as pebble intends.

// A node restarted on a full disk (filled while it was down, or by its own last
// writes): pebble's open replays the WAL, flushes what it replayed and writes a new
// MANIFEST, which fails for want of space, and the node would not start at all. So
// OpenPebble measures the free space first, and below the reserve (or when a
// read-write open fails with ENOSPC) opens pebble read-only, which replays the WAL
// into memory and writes nothing: the store serves every acknowledged point and
// refuses writes with ErrDiskFull until the node restarts with space freed
// (TestPebbleOpensReadOnlyOnFullDisk).

// fullAtOpen says why the store in dir must open read-only, or "" if its filesystem
// has the reserve free (or the reserve is off, or the space cannot be measured).
func fullAtOpen(dir string, reserve int64) string {
	if reserve <= 0 {
		return ""
	}
	if _, err := os.Stat(filepath.Join(dir, "CURRENT")); err != nil {
		return "" // a new store: nothing to serve read-only
	}
	free, err := freeBytes(dir)
	if err != nil || free >= reserve {
		return ""
	}
	return fmt.Sprintf("%s free on the filesystem of %s, less than the %s the store keeps in reserve for its engine",
		FormatSize(max(free, 0)), dir, FormatSize(reserve))
}

// isNoSpace says whether err is the filesystem's "no space left on device".
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), "no space left on device")
}

// spaceGuard refuses writes that would leave less than reserve bytes free.
type spaceGuard struct {
	dir     string
	reserve int64 // <= 0: off

	mu      sync.Mutex
	at      time.Time // when free was measured
	free    int64
	written atomic.Int64 // bytes committed since
}

// spaceFresh is how long a measurement is trusted while more than twice the reserve
// was free; below that, every write measures again (a statfs costs microseconds).
const spaceFresh = 200 * time.Millisecond

func (g *spaceGuard) check() error {
	if g.reserve <= 0 {
		return nil
	}
	need := g.reserve
	g.mu.Lock()
	defer g.mu.Unlock()
	free := g.free - g.written.Load()
	if time.Since(g.at) > spaceFresh || free < 2*need {
		f, err := freeBytes(g.dir)
		if err != nil {
			// Unknown free space must not stop a node; pebble's own error would name it.
			return nil
		}
		g.free, g.at, free = f, time.Now(), f
		g.written.Store(0)
	}
	if free < need {
		return fmt.Errorf("%w: %s free on the filesystem of %s, less than the %s the store keeps in reserve for its engine: %w",
			ErrDiskFull, FormatSize(max(free, 0)), g.dir, FormatSize(g.reserve), syscall.ENOSPC)
	}
	return nil
}

// wrote accounts n bytes committed since the last measurement.
func (g *spaceGuard) wrote(n int) { g.written.Add(int64(n)) }

// engineFailure turns what pebble's Fatalf (or a panic of its commit path) gave us into
// the store's sticky error.
func engineFailure(r any) error {
	msg := fmt.Sprint(r)
	if err, ok := r.(error); ok && errors.Is(err, syscall.ENOSPC) || strings.Contains(msg, "no space left") {
		return fmt.Errorf("%w: the storage engine failed a write and the store takes no more writes until the node restarts with space freed (%s): %w",
			ErrDiskFull, strings.TrimSuffix(msg, ": no space left on device"), syscall.ENOSPC)
	}
	return fmt.Errorf("%w: %s; the store takes no more writes until the node restarts", errEngineFailed, msg)
}

var errEngineFailed = errors.New("storage engine failed")
