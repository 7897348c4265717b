package store

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsdht/tsdht/tsdb/series"
)

// The write buffer: under SyncBatch and SyncNone an acknowledged append may be lost to
// a crash anyway (the WAL is not synced before the answer), so it need not be a pebble
// batch of its own. A single-point append as its own batch costs a replica a block, a
// summary of about 120 bytes, a counters merge and every 16 appends a fold: about four
// memtable inserts and 300 bytes of WAL for 16 bytes of data (DESIGN-NOTES, "What a
// single-point write costs a replica"). Buffered, the appends of an interval reach
// pebble as one batch: one block and one summary per pair, one counters merge.
//
// What stays true:
//   - Readable at once: every call that reads or changes stored pairs other than an
//     append (Read, statistics, summaries, seals, deletes, restores, retention, the
//     repairer's change list, Stats, Flush, Close) drains the buffer first (settle).
//   - The crash guarantee of the sync mode: SyncBatch drains before every WAL sync, so a
//     crash still loses at most SyncInterval of acknowledged writing; SyncNone drains
//     within BufferWait, and loses on a kill what is in the buffer besides pebble's
//     unflushed WAL tail.
//   - What survives is a prefix of the acknowledged writes: an append that does not wait
//     in the buffer (a series' first, SyncAlways, a full buffer) drains the buffer
//     before its own commit, so pebble's WAL holds the appends in the order they were
//     acknowledged.
//   - Refusals reach the writer: an append is buffered only after the checks a commit
//     would make (input, retention, disk space, engine failure, the series' known type)
//     passed; otherwise it takes the direct path, which refuses it with the same error
//     as without a buffer.
//   - Bounded: at most WriteBuffer bytes wait; the append that finds the buffer full
//     drains it itself, so a writer faster than pebble waits for pebble.

// writeBuffer holds acknowledged appends on their way to pebble.
type writeBuffer struct {
	limit int64         // bytes held at most (PebbleOptions.WriteBuffer)
	wait  time.Duration // SyncNone: how long an append may wait; 0: the sync loop drains

	mu      sync.Mutex
	pending []PairAppend // in acknowledgement order; the points are the buffer's copies
	bytes   int64        // what pending holds, as bufferedSize counts it
	closing bool         // Close has begun: appends take the direct path
	failing bool         // the last drain failed: appends take the direct path
	timer   *time.Timer  // armed while pending is not empty (wait > 0)

	// unsettled counts the appends acknowledged and not yet committed to pebble: a
	// caller that reads 0 needs no drain (it is decremented only after the commit).
	unsettled atomic.Int64
	drainMu   sync.Mutex // one drain at a time

	drains, drained atomic.Int64 // drains committed, appends they carried
}

// newWriteBuffer returns the buffer for opts, or nil where appends must not wait.
func newWriteBuffer(opts PebbleOptions) *writeBuffer {
	if opts.Sync == SyncAlways || opts.WriteBuffer < 0 {
		return nil
	}
	b := &writeBuffer{limit: opts.WriteBuffer}
	if opts.Sync == SyncNone {
		b.wait = opts.BufferWait
	}
	return b
}

// bufferedSize is what an append is charged against WriteBuffer: its points, its key
// and the bookkeeping around them.
func bufferedSize(a *PairAppend) int64 {
	n := int64(len(a.Key)) + 96 + 16*int64(a.Points.Len())
	for _, s := range a.Points.S {
		n += int64(len(s)) + 16
	}
	return n
}

// buffer takes a prepared batch into the write buffer if every pair of it may wait
// there, and reports whether it did. It refuses nothing itself: a batch not taken goes
// through the direct path, which refuses what must be refused with the error it
// always gave.
func (p *Pebble) buffer(batch []PairAppend) bool {
	b := p.buf
	if b == nil {
		return false
	}
	now := time.Now()
	var size int64
	for i := range batch {
		a := &batch[i]
		// A refusal, or a series whose type is not yet durable here: the direct path
		// says why, or writes the type.
		if p.writable(a.Ref.Start, now) != nil {
			return false
		}
		if t, ok := p.types.durableType(a.Key); !ok || t != a.Points.Type {
			return false
		}
		size += bufferedSize(a)
	}
	if size > b.limit {
		return false // it would never fit: no copies for nothing
	}
	// The caller's points may be reused once it has its answer: the buffer keeps copies,
	// made before taking the lock.
	copies := make([]PairAppend, len(batch))
	for i := range batch {
		copies[i] = PairAppend{Ref: batch[i].Ref, Key: batch[i].Key, Points: clonePoints(batch[i].Points)}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closing || b.failing || b.bytes+size > b.limit {
		return false
	}
	b.pending = append(b.pending, copies...)
	b.bytes += size
	b.unsettled.Add(int64(len(copies)))
	if b.wait > 0 && b.timer == nil {
		b.timer = time.AfterFunc(b.wait, p.drainLater)
	}
	return true
}

// clonePoints returns a copy of pts that shares no array with it.
func clonePoints(pts series.Points) series.Points {
	out := series.Points{Type: pts.Type, T: append([]int64(nil), pts.T...)}
	switch pts.Type {
	case series.Float:
		out.F = append([]float64(nil), pts.F...)
	case series.Int:
		out.I = append([]int64(nil), pts.I...)
	case series.String:
		out.S = append([]string(nil), pts.S...)
	}
	return out
}

// drainLater is the timer's drain (SyncNone). A failure is logged; the drain re-armed
// the timer, so the appends are tried again.
func (p *Pebble) drainLater() {
	if err := p.drain(); err != nil && !errors.Is(err, ErrClosed) {
		p.opts.Logger.Error("store: the write buffer could not reach the storage engine", "dir", p.dir, "err", err)
	}
}

// settle moves the write buffer into pebble; every call but an append that reads or
// changes stored pairs calls it first. Without buffered appends it costs one atomic
// load.
func (p *Pebble) settle() error {
	if p.buf == nil || p.buf.unsettled.Load() == 0 {
		return nil
	}
	return p.drain()
}

// drain commits everything buffered as one append. On failure the appends go back to
// the front of the buffer, appends take the direct path (and so see the failure) until
// a drain succeeds, and the timer, if any, tries again.
func (p *Pebble) drain() error {
	b := p.buf
	b.drainMu.Lock()
	defer b.drainMu.Unlock()
	b.mu.Lock()
	taken, size := b.pending, b.bytes
	b.pending, b.bytes = nil, 0
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	b.mu.Unlock()
	if len(taken) == 0 {
		return nil
	}
	grouped := groupAppends(taken)
	err := p.append(grouped, nil, true)
	if errors.Is(err, series.ErrTypeMismatch) {
		err = p.drainEach(grouped)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.pending = append(taken, b.pending...)
		b.bytes += size
		b.failing = true
		if b.wait > 0 && b.timer == nil && !b.closing && !errors.Is(err, ErrClosed) {
			b.timer = time.AfterFunc(b.wait, p.drainLater)
		}
		return fmt.Errorf("store: %d acknowledged appends wait in memory: %w", len(taken), err)
	}
	b.failing = false
	b.unsettled.Add(-int64(len(taken)))
	b.drains.Add(1)
	b.drained.Add(int64(len(taken)))
	return nil
}

// drainEach commits the grouped appends of a drain one pair at a time, leaving out a
// pair whose series changed type since its appends were taken (ForgetType and a new
// declaration racing them): one such pair must not keep every other from the engine,
// nor fail every later drain. Any other error stops it; the caller puts everything
// back, and appends are unions, so what was committed here is committed again harmlessly.
func (p *Pebble) drainEach(grouped []PairAppend) error {
	for i := range grouped {
		err := p.append(grouped[i:i+1], nil, true)
		if errors.Is(err, series.ErrTypeMismatch) {
			p.opts.Logger.Error("store: acknowledged points dropped: their series changed type before they reached the engine",
				"series", grouped[i].Key, "points", grouped[i].Points.Len(), "err", err)
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// closeBuffer drains the buffer for Close and turns it off: later appends take the
// direct path, which refuses them once the store is closed.
func (p *Pebble) closeBuffer() error {
	if p.buf == nil {
		return nil
	}
	p.buf.mu.Lock()
	p.buf.closing = true
	p.buf.mu.Unlock()
	return p.drain()
}

// pairName identifies a pair in groupAppends.
type pairName struct {
	ref ShardRef
	key string
}

// groupAppends merges the buffered appends of each pair, in order (a later value of a
// timestamp wins, as in AppendBatch), so append handles each pair once. Points that
// continue a pair's run are appended; only out-of-order ones pay a merge.
func groupAppends(taken []PairAppend) []PairAppend {
	out := make([]PairAppend, 0, min(len(taken), 64))
	idx := make(map[pairName]int, min(len(taken), 64))
	for _, a := range taken {
		k := pairName{a.Ref, a.Key}
		i, ok := idx[k]
		if !ok {
			idx[k] = len(out)
			out = append(out, a)
			continue
		}
		g := &out[i].Points
		if g.Type != a.Points.Type {
			out = append(out, a) // refused on its own by append (drainEach)
			continue
		}
		if g.T[len(g.T)-1] < a.Points.T[0] {
			g.T = append(g.T, a.Points.T...)
			switch g.Type {
			case series.Float:
				g.F = append(g.F, a.Points.F...)
			case series.Int:
				g.I = append(g.I, a.Points.I...)
			case series.String:
				g.S = append(g.S, a.Points.S...)
			}
			continue
		}
		*g = series.Merge(*g, a.Points)
	}
	return out
}

// DrainWriteBuffer moves what waits in the write buffer into the engine at once, as a
// read would. Nothing needs it for correctness; a benchmark calls it to count the
// buffer's deferred work as the writes' own.
func (p *Pebble) DrainWriteBuffer() error { return p.settle() }
