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
// So the store counts, per window of idleWindowQuanta quanta, the bytes its seals
// wrote (net of the chunks they replaced); when a pass of the background sealer finds the store idle (the moment
// idleflush.go flushes the memtable), it compares, window by window, what the tables
// hold in the window's key range (pebble's EstimateDiskUsage) with what the seals wrote
// there, and compacts a window once (pebble's manual compaction, one at a time, never
// parallel) when
//
//   - the seals wrote at least half of what the window holds, so that the comparison is
//     about this round of seals and not older data sealed before (a window a few late
//     points were re-sealed into is left to pebble);
//   - and the window holds more than the seals wrote by at least 1/idleGarbageFraction
//     of that, and by at least idleGarbageMin bytes: what the compaction would give
//     back. (The seals' bytes are counted before pebble's compression, the tables'
//     after, so the test errs toward not compacting.)
//
// Each counter is dropped after its check, compacted or not, so a window is compacted
// at most once per round of seals, and a store with no new seal does no such work: an
// idle node stays idle. The compaction rewrites the window's tables once (their bytes
// are what it costs in flash); it stops between windows when writes come back, leaving
// the rest for the next idle moment.

const (
	// idleWindowQuanta is the width of a window, in quanta: an hour at the default 10 s.
	idleWindowQuanta = 360
	// idleGarbageFraction: a window is compacted when its tables hold more than its
	// seals wrote by at least 1/idleGarbageFraction of what the seals wrote.
	idleGarbageFraction = 8
	// idleGarbageMin is the least a compaction must give back, in bytes.
	idleGarbageMin = 64 << 10
	// idleWindowsMax bounds the windows counted between two idle moments (a store that
	// never idles); past it the seals of new windows are not counted.
	idleWindowsMax = 4096
)

// idleCompact is the state of that compaction.
type idleCompact struct {
	mu     sync.Mutex
	sealed map[int64]int64 // window → bytes the seals wrote into it since its last check
	done   int64           // windows compacted since open (for tests)
}

// compactedWindows returns how many windows compactIdle compacted since open.
func (p *Pebble) compactedWindows() int64 {
	p.compact.mu.Lock()
	defer p.compact.mu.Unlock()
	return p.compact.done
}

// noteSeal records that a seal wrote n bytes (keys and values) into the pair whose
// quantum starts at start (seconds).
func (p *Pebble) noteSeal(start int64, n int) {
	if p.opts.NoIdleCompaction {
		return
	}
	c := &p.compact
	w := p.idleWindow(start)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sealed == nil {
		c.sealed = make(map[int64]int64)
	}
	if _, ok := c.sealed[w]; !ok && len(c.sealed) >= idleWindowsMax {
		return
	}
	c.sealed[w] += int64(n)
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
	windows := make([]int64, 0, len(c.sealed))
	for w := range c.sealed {
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
		sealed := c.sealed[w]
		delete(c.sealed, w)
		c.mu.Unlock()
		ok, err := p.compactWindow(w, sealed)
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// compactWindow compacts window w if its tables hold enough more than the sealed
// bytes written into it; it reports whether it did.
func (p *Pebble) compactWindow(w, sealed int64) (bool, error) {
	if !p.enter() {
		return false, ErrClosed
	}
	defer p.state.RUnlock()
	lo, hi := p.windowBounds(w)
	held, err := p.db.EstimateDiskUsage(lo, hi)
	if err != nil {
		return false, fmt.Errorf("store: idle compaction: %w", err)
	}
	garbage := int64(held) - sealed
	if sealed < int64(held)/2 || garbage < max(sealed/idleGarbageFraction, idleGarbageMin) {
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
		"window", w, "held", held, "sealed", sealed)
	return true, nil
}
