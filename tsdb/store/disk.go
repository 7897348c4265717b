package store

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A full disk.
//
// Pebble (v1.1.5) does not survive running out of space itself; measured on a small
// tmpfs (TestPebbleDiskFullEngine) and read in its source:
//   - A WAL write that fails with ENOSPC makes every later synced commit fail, and
//     DB.Apply answers a failed commit with Logger.Fatalf ("fatal commit error"),
//     whose contract is not to return: the batch is already in the memtable, and the
//     commit pipeline is left holding a slot. Unsynced commits (SyncNone, SyncBatch
//     between syncs) see no error at all; the WAL error stays latched.
//   - The next WAL rotation (a full memtable, Flush, Compact) then fails closing the
//     old WAL and panics while holding the DB mutex: every later call would hang.
//   - Flushes and compactions that fail are retried at once, over and over; a failed
//     MANIFEST write calls Fatalf from pebble's own goroutine, which no caller can
//     recover: the process dies.
//
// So the store never lets pebble get there: before a write it checks the free space
// of its filesystem (statfs, cached while plenty is left) and refuses the write with
// ErrDiskFull once less than DiskReserve would remain, leaving the reserve to pebble's
// WAL rotations, flushes and compactions. Reads keep working, and writes work again as
// soon as space is freed (by the disk budget, by an operator, by another program).
//
// If pebble hits ENOSPC anyway (another program filled the disk between two checks, or
// the reserve is disabled), the store turns the Fatalf of the failed commit into an
// error, marks itself failed, and from then on refuses every write with that error
// without calling pebble, so the latched WAL error never reaches a WAL rotation. Reads
// keep working (they need no lock a failed commit holds). The acknowledged writes are
// in the WAL; the node serves them again after a restart with space freed. A failure
// in pebble's background goroutines still ends the process, as pebble intends.

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
	g.mu.Lock()
	defer g.mu.Unlock()
	free := g.free - g.written.Load()
	if time.Since(g.at) > spaceFresh || free < 2*g.reserve {
		f, err := freeBytes(g.dir)
		if err != nil {
			// Unknown free space must not stop a node; pebble's own error would name it.
			return nil
		}
		g.free, g.at, free = f, time.Now(), f
		g.written.Store(0)
	}
	if free < g.reserve {
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
