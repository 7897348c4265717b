package store

import (
	"fmt"
	"slices"
	"sync"
)

// Compacting what the seals replaced, once the writes stop.
//
// A seal replaces a pair's blocks with chunks by deleting the blocks (seal.go). When
// the blocks are still in the memtable, the flush drops them; when they already reached
// a table — a bulk load of history, a memtable that filled before the quantum ended —
// they stay on disk, shadowed by the deletions, until a compaction merges the tables
// that hold the deletions with the ones that hold the blocks. Pebble starts such a
// compaction only when level 0 is deep enough (L0CompactionThreshold sublevels), which
// on a node whose writes stopped may be never: after an hour of PMU history loaded at
// once and sealed after the load, the directory held a third more than its data (2.41
// bytes a point instead of 1.80: BenchmarkPMUBulkBytesPerPoint, where pebble's metrics
// show the seals' deletions in level-0 tables over the blocks in level 6) for as long
// as the node stayed idle. A node that keeps taking writes keeps flushing into level 0,
// so pebble's own compactions get there.
//
// So each seal notes, per window of idleWindowQuanta quanta, the bytes it wrote (net of
// the chunks it replaced) and the bytes of the pair it deleted that were in tables, not
// only in the memtable (an iterator with OnlyReadGuaranteedDurable, which in pebble
// v1.1.5 reads the tables alone): the garbage it leaves on disk. When a pass of the
// background sealer finds the store idle (the moment idleflush.go flushes the
// memtable), it checks each noted window against what its key range holds in the
// tables (pebble's EstimateDiskUsage) and compacts it once (pebble's manual
// compaction, one window at a time, never parallel) when the seals left as garbage in tables at least 1/idleGarbageFraction of what the
// window holds, and at least idleGarbageMin bytes. A stream sealed while its blocks were
// in the memtable leaves almost none (a few pairs whose blocks a full memtable flushed
// before their seal), a late point re-sealed into an old quantum leaves one pair's
// chunks, and neither is worth a rewrite; a bulk load sealed after its blocks reached
// the tables leaves most of them. (The garbage is counted before pebble's compression
// and the window after, so the test errs toward compacting a window the seals filled
// with garbage, which pebble may have compacted meanwhile: then the rewrite is wasted,
// once.)
//
// Each note is dropped after its check, compacted or not, so a window is compacted at
// most once per round of seals, and a store with no new seal does no such work: an
// idle node stays idle. The compaction rewrites the window's tables once (their bytes
// are what it costs in flash; level-0 tables that overlap the window are taken whole);
// it stops between windows when writes come back, leaving the rest for the next idle
// moment. The notes live in memory: a restart between the seals and the idle moment
// leaves that garbage to pebble.

const (
	// idleWindowQuanta is the width of a window, in quanta: an hour at the default 10 s.
	idleWindowQuanta = 360
	// idleGarbageFraction: a window is compacted when its seals left in tables at least
	// 1/idleGarbageFraction of what the window holds.
	idleGarbageFraction = 4
	// idleGarbageMin is the least garbage worth a compaction, in bytes.
	idleGarbageMin = 64 << 10
	// idleWindowsMax bounds the windows counted between two idle moments (a store that
	// never idles); past it the seals of new windows are not counted.
	idleWindowsMax = 4096
)

// idleCompact is the state of that compaction.
type idleCompact struct {
	mu      sync.Mutex
	windows map[int64]windowSeals // what the seals did to each window since its last check
	done    int64                 // windows compacted since open (for tests)
	// afterWindow, if set, runs after each window's check (tests: writes coming back).
	afterWindow func()
}

// compactedWindows returns how many windows compactIdle compacted since open.
func (p *Pebble) compactedWindows() int64 {
	p.compact.mu.Lock()
	defer p.compact.mu.Unlock()
	return p.compact.done
}

// windowSeals is what a window's seals did: bytes (keys and values) written, net of the
// chunks they replaced, and bytes they deleted that were in tables.
type windowSeals struct{ sealed, replaced int64 }

// pendingWindows returns how many windows wait for compactIdle's check.
func (p *Pebble) pendingWindows() int {
	p.compact.mu.Lock()
	defer p.compact.mu.Unlock()
	return len(p.compact.windows)
}

// noteSeal records that a seal wrote n bytes (keys and values, net) into the pair whose
// quantum starts at start (seconds), and deleted onDisk bytes that were in tables.
func (p *Pebble) noteSeal(start int64, n, onDisk int) {
	if p.opts.NoIdleCompaction {
		return
	}
	c := &p.compact
	w := p.idleWindow(start)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.windows == nil {
		c.windows = make(map[int64]windowSeals)
	}
	s, ok := c.windows[w]
	if !ok && len(c.windows) >= idleWindowsMax {
		return
	}
	s.sealed += int64(n)
	s.replaced += int64(onDisk)
	c.windows[w] = s
}

// idleWindow returns the window a quantum start falls in.
func (p *Pebble) idleWindow(start int64) int64 {
	width := int64(p.opts.Quantum) * idleWindowQuanta
	w := start / width
	if start%width < 0 {
		w--
	}
	return w
}

// windowBounds returns the pair-key range of window w: every key of every pair whose
// quantum starts in it.
func (p *Pebble) windowBounds(w int64) (lo, hi []byte) {
	width := int64(p.opts.Quantum) * idleWindowQuanta
	lo = putSortable([]byte{famPair}, w*width)
	hi = putSortable([]byte{famPair}, (w+1)*width)
	return lo, hi
}

// compactIdle runs the checks above; the caller has just found the store idle. It
// returns how many windows it compacted.
func (p *Pebble) compactIdle() (int, error) {
	c := &p.compact
	c.mu.Lock()
	windows := make([]int64, 0, len(c.windows))
	for w := range c.windows {
		windows = append(windows, w)
	}
	c.mu.Unlock()
	slices.Sort(windows)
	appended := p.appended.Load()
	n := 0
	for _, w := range windows {
		if p.appended.Load() != appended {
			return n, nil // writes are back: the rest waits for the next idle moment
		}
		c.mu.Lock()
		s := c.windows[w]
		delete(c.windows, w)
		c.mu.Unlock()
		ok, err := p.compactWindow(w, s)
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
		if c.afterWindow != nil {
			c.afterWindow()
		}
	}
	return n, nil
}

// compactWindow compacts window w if its seals left enough garbage in its tables; it
// reports whether it did.
func (p *Pebble) compactWindow(w int64, s windowSeals) (bool, error) {
	if !p.enter() {
		return false, ErrClosed
	}
	defer p.state.RUnlock()
	lo, hi := p.windowBounds(w)
	held, err := p.db.EstimateDiskUsage(lo, hi)
	if err != nil {
		return false, fmt.Errorf("store: idle compaction: %w", err)
	}
	if s.replaced < max(int64(held)/idleGarbageFraction, idleGarbageMin) {
		return false, nil
	}
	// A compaction writes its output before it deletes its input (disk.go).
	if err := p.space.check(); err != nil {
		return false, fmt.Errorf("store: idle compaction: %w", err)
	}
	if err := p.db.Compact(lo, hi, false); err != nil {
		return false, fmt.Errorf("store: idle compaction: %w", err)
	}
	p.compact.mu.Lock()
	p.compact.done++
	p.compact.mu.Unlock()
	p.opts.Logger.Info("store: compacted what the seals replaced", "dir", p.dir,
		"window", w, "held", held, "sealed", s.sealed, "replaced", s.replaced)
	return true, nil
}
