package store

import (
	"math"
	"sync"
	"time"

	"github.com/cockroachdb/pebble"
)

// engineStats are the figures Stats takes from pebble's Metrics. Metrics takes pebble's
// mutex, which a failed WAL write can leave held for good, so Stats never waits on it
// for long: a refresh runs in its own goroutine, Stats waits for it at most
// engineStatsWait, and otherwise (or once the engine has failed) reports the last
// figures it got.
type engineStats struct {
	mu       sync.Mutex
	last     engineFigures
	inflight chan struct{} // closed when the running refresh ends; nil if none runs
}

type engineFigures struct {
	disk  int64 // DiskSpaceUsage: tables, WAL, manifest
	flash int64 // bytes written to the device since open: WAL, flushes, compactions
}

// engineStatsWait bounds how long Stats waits for pebble's figures.
const engineStatsWait = 200 * time.Millisecond

// engineFigures returns pebble's figures, fresh unless pebble did not answer in time.
func (p *Pebble) engineFigures() engineFigures {
	e := &p.engine
	e.mu.Lock()
	ch := e.inflight
	if ch == nil && p.failure() == nil {
		ch = make(chan struct{})
		e.inflight = ch
		go p.refreshEngineFigures(ch)
	}
	e.mu.Unlock()
	if ch != nil {
		t := time.NewTimer(engineStatsWait)
		select {
		case <-ch:
		case <-t.C:
		}
		t.Stop()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.last
}

func (p *Pebble) refreshEngineFigures(done chan struct{}) {
	defer close(done)
	var f engineFigures
	ok := p.enter()
	if ok {
		m := p.db.Metrics()
		p.state.RUnlock()
		f.disk = int64(min(m.DiskSpaceUsage(), math.MaxInt64))
		f.flash = int64(min(flashBytes(m), math.MaxInt64))
	}
	e := &p.engine
	e.mu.Lock()
	defer e.mu.Unlock()
	if ok {
		e.last = f
	}
	e.inflight = nil
}

// flashBytes is what pebble wrote to the device: every byte is a WAL record, a flushed
// table or a compacted table (the manifest and OPTIONS files are a few KiB); ingested
// tables are not used by the store. The levels' figures are summed here rather than
// taken from Metrics.Total, whose BytesFlushed already includes the WAL's bytes (added
// to it once more, they counted every WAL byte twice).
func flashBytes(m *pebble.Metrics) uint64 {
	n := m.WAL.BytesWritten
	for i := range m.Levels {
		n += m.Levels[i].BytesFlushed + m.Levels[i].BytesCompacted
	}
	return n
}
