package store

import (
	"fmt"
	"sync"
	"time"
)

// Flushing when writes stop.
//
// The WAL on disk holds the records of the memtables not yet flushed (walfiles.go): up
// to about 2 × MemTableSize while writes flow, and as long as no more come, however
// long that is, since pebble flushes a memtable only when it is full. So after a pass
// of the background sealer in which the store took no new point and sealed nothing,
// while a pass before had, the store flushes its memtable: the WAL then shrinks to an
// empty file, a stream that stopped costs its data's bytes and not a memtable's WAL
// besides, and a flush costs little when no writes compete with it. A steady stream
// never triggers it.

// idleFlush is the state of that check.
type idleFlush struct {
	mu       sync.Mutex
	appended int64 // Pebble.appended at the previous pass
	dirty    bool  // the store was written since the last idle flush
}

// sealPass is one pass of the background sealer at now: SealNow, leaving out pairs
// written at or after busySince (sealIdle), then the idle flush and, after one, the
// compaction of what the seals replaced (idlecompact.go).
func (p *Pebble) sealPass(now time.Time, busySince int64) error {
	n, err := p.sealIdle(now, busySince)
	if err != nil {
		return err
	}
	flushed, err := p.flushIfIdle(n > 0)
	if err != nil || !flushed || p.opts.NoIdleCompaction {
		return err
	}
	_, err = p.compactIdle()
	return err
}

// flushIfIdle flushes the memtable if the store took no new point since the previous
// call, sealed is false, and something was written since the last such flush; it
// reports whether it flushed.
func (p *Pebble) flushIfIdle(sealed bool) (bool, error) {
	f := &p.idle
	f.mu.Lock()
	defer f.mu.Unlock()
	a := p.appended.Load()
	wrote := sealed || a != f.appended
	f.appended = a
	if wrote {
		f.dirty = true
		return false, nil
	}
	if !f.dirty {
		return false, nil
	}
	// A flush writes a table before the WAL goes: on a full disk it waits (disk.go).
	if err := p.space.check(); err != nil {
		return false, fmt.Errorf("store: idle flush: %w", err)
	}
	if !p.enter() {
		return false, ErrClosed
	}
	defer p.state.RUnlock()
	if err := p.db.Flush(); err != nil {
		return false, fmt.Errorf("store: idle flush: %w", err)
	}
	f.dirty = false
	return true, nil
}
