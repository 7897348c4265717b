package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/trace"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/chunk"
	"github.com/tsdht/tsdht/tsdb/series"
)

// Pebble is the durable Store: an embedded cockroachdb/pebble LSM tree in a data
// directory (key layout in keys.go). Each append is stored as one block per pair,
// readable at once; under SyncBatch and SyncNone appends may first wait in a write
// buffer and reach pebble together, one block per pair for all of them (buffer.go).
// Quanta that have ended are sealed in the background: their blocks are merged into
// sorted, compressed chunks (package chunk). Every change is one atomic pebble batch, so
// a power cut leaves either all of an Append or none of it.
type Pebble struct {
	dir  string
	opts PebbleOptions
	db   *pebble.DB
	wo   *pebble.WriteOptions

	// state guards closed: every call holds it for reading while it uses db, and Close
	// takes it for writing, so pebble (which panics when used after Close) never sees a
	// call after Close.
	state  sync.RWMutex
	closed bool

	types *typeCache
	// declMu orders the declarations that fix the quantum of a series an append
	// recorded first (settleQuantum).
	declMu sync.Mutex
	pairs  *pairTable
	hot    *hotCache

	shards, series, points atomic.Int64
	appended               atomic.Int64 // new points stored since open
	overlapReads           atomic.Int64 // appends that read the pair to find overwrites (countNew)
	engine                 engineStats  // pebble's figures, cached (flash.go)

	seal    sealer
	idle    idleFlush   // flushes the memtable when writes stop (idleflush.go)
	compact idleCompact // then compacts what the seals replaced (idlecompact.go)

	catMu          sync.Mutex    // serialises catalog and tombstone read-modify-writes (catalog_pebble.go, tombstones.go)
	tombState      atomic.Int32  // whether any tombstone exists (tombstones.go)
	entriesVersion atomic.Uint64 // catalog entry changes made visible (EntriesVersioner)

	// Expiry (retention.go). An append holds dropMu for reading from its check of the
	// floors to its commit; a drop raises a floor, then takes dropMu once to wait out
	// the appends that checked the old one.
	dropMu      sync.RWMutex
	retFloor    atomic.Int64 // quanta starting before it are dropped by retention
	budgetFloor atomic.Int64 // quanta starting before it are dropped by the disk budget
	dropped     atomic.Int64 // quanta dropped since open
	overBudget  atomic.Bool  // the budget cannot be met: warned once

	space  spaceGuard
	failed atomic.Pointer[error] // the engine failed a write: refuse all writes (disk.go)

	damage  damageLog    // corrupt reads and WAL loss (damage.go)
	buf     *writeBuffer // appends on their way to pebble (buffer.go); nil with SyncAlways
	changes changeLog    // pairs changed since the repairer last asked (changes.go)

	dirty   atomic.Bool   // SyncBatch: written since the last WAL sync
	applied atomic.Uint64 // commitLater writes applied (SyncAlways)
	synced  atomic.Uint64 // how many of them are known on disk (durable)
	stop    chan struct{}
	loops   sync.WaitGroup
}

// encoders lends chunk encoders to appends, which run concurrently.
var encoders = sync.Pool{New: func() any { return new(chunk.Encoder) }}

// blockEncoders lends appends quick encoders for their blocks: a block is re-encoded
// when its quantum is sealed, so its encoding saves CPU rather than the last bytes.
var blockEncoders = sync.Pool{New: func() any { return &chunk.Encoder{Quick: true} }}

// OpenPebble opens the store in dir, creating it if needed. A store whose files are
// damaged is refused with an error that names the file: pebble checks the manifest's
// records and every table's size against it at open (TestPebbleCorruptStoreIsRefused);
// damage inside a table is caught by its block checksums when the block is read, as
// an error from that read.
func OpenPebble(dir string, opts PebbleOptions) (p *Pebble, err error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	po := opts.pebbleOptions()
	defer po.Cache.Unref()
	// Pebble reports some damage by panicking; a node must get an error it can show.
	defer func() {
		if r := recover(); r != nil {
			p, err = nil, fmt.Errorf("open store %s: %v", dir, r)
		}
	}()
	losses, scanErr := scanWALs(dir)
	if opts.RefuseWALLoss {
		if err := walLossError(dir, losses); err != nil {
			return nil, err
		}
	}
	full := fullAtOpen(dir, opts.DiskReserve)
	if full != "" {
		po.ReadOnly = true
	}
	db, err := pebble.Open(dir, po)
	if err != nil && full == "" && isNoSpace(err) {
		// Replaying the WAL flushes it and writes a new MANIFEST: on a disk filled
		// while the node was down that fails, and read-only it needs no space.
		full = fmt.Sprintf("opening it read-write failed: %v", err)
		po.ReadOnly = true
		db, err = pebble.Open(dir, po)
	}
	if err != nil {
		m := manifestDamage(dir)
		if m == "" && strings.Contains(err.Error(), "unknown to the objstorage provider") {
			m = manifestMismatch(dir)
		}
		if m != "" {
			return nil, fmt.Errorf("open store %s: %s, so the list of table files cannot be trusted (%w); move the directory away and restart the node: repair refills it from its replicas", dir, m, err)
		}
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	p = &Pebble{
		dir:   dir,
		opts:  opts,
		db:    db,
		wo:    pebble.NoSync,
		types: newTypeCache(opts.TypeCacheEntries),
		pairs: newPairTable(opts.PairCacheEntries),
		hot:   newHotCache(opts.HotCacheSize),
		space: spaceGuard{dir: dir, reserve: opts.DiskReserve},
		stop:  make(chan struct{}),
		buf:   newWriteBuffer(opts),
	}
	if scanErr != nil {
		opts.Logger.Warn("store: could not check the write-ahead logs for damage before replaying them", "dir", dir, "err", scanErr.Error())
	}
	p.reportWALLoss(losses)
	if full != "" {
		err := fmt.Errorf("%w: the store opened read-only (%s): it serves reads and refuses writes until the node restarts with space freed: %w",
			ErrDiskFull, full, syscall.ENOSPC)
		p.failed.Store(&err)
		opts.Logger.Error("store: disk full at start-up: "+err.Error(), "dir", dir)
	}
	p.retFloor.Store(math.MinInt64)
	p.budgetFloor.Store(math.MinInt64)
	if opts.Sync == SyncAlways {
		p.wo = pebble.Sync
	}
	if err := p.load(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	if opts.Sync == SyncBatch {
		p.loop(opts.SyncInterval, p.syncWAL)
	}
	if opts.SealInterval > 0 {
		p.loop(opts.SealInterval, func() error {
			now := time.Now()
			return p.sealPass(now, now.Add(-opts.SealGrace).UnixNano())
		})
	}
	if opts.EnforceInterval > 0 && (opts.Retention > 0 || opts.MaxDisk > 0) {
		p.loop(opts.EnforceInterval, p.enforce)
	}
	return p, nil
}

// load checks the store's format and reads the counters and the seal generation.
func (p *Pebble) load() error {
	if err := p.checkFormat(); err != nil {
		return err
	}
	var c counters
	v, closer, err := p.db.Get(countersKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return fmt.Errorf("read counters: %w", err)
	default:
		err = c.add(v)
		closer.Close()
		if err != nil {
			return err
		}
	}
	p.shards.Store(c.shards)
	p.series.Store(c.series)
	p.points.Store(c.points)
	v, closer, err = p.db.Get(genKey)
	if errors.Is(err, pebble.ErrNotFound) {
		// A store upgraded from format 2: the first seal moves the generation.
		v, closer, err = p.db.Get(genKeyOld)
		p.seal.dropOldGen = err == nil
	}
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return fmt.Errorf("read seal generation: %w", err)
	default:
		gen, n := binary.Uvarint(v)
		closer.Close()
		if n <= 0 {
			return errCorruptValue("seal generation")
		}
		p.seal.gen = gen
	}
	return nil
}

// checkFormat refuses a store written in another format, and stamps a new one.
func (p *Pebble) checkFormat() error {
	v, closer, err := p.db.Get(formatKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		it, err := p.db.NewIter(nil)
		if err != nil {
			return err
		}
		empty := !it.First()
		if err := errors.Join(it.Error(), it.Close()); err != nil {
			return err
		}
		if !empty {
			return fmt.Errorf("the store is in format 1 (one key per point), this tsdht reads format %d: "+
				"move the directory away and let the node be refilled by repair", storeFormat)
		}
		return p.stampFormat()
	case err != nil:
		return fmt.Errorf("read store format: %w", err)
	}
	format, n := binary.Uvarint(v)
	closer.Close()
	if n <= 0 || n != len(v) {
		return errCorruptValue("store format")
	}
	if format == 2 { // readable as it is (keys.go); stamped so an older tsdht refuses it
		return p.stampFormat()
	}
	if format != storeFormat {
		return fmt.Errorf("the store is in format %d, this tsdht reads format %d", format, storeFormat)
	}
	return nil
}

// stampFormat records the store's format, unless the store opened read-only (a full
// disk): the next read-write open stamps it.
func (p *Pebble) stampFormat() error {
	if p.failure() != nil {
		return nil
	}
	return p.db.Set(formatKey, binary.AppendUvarint(nil, storeFormat), pebble.Sync)
}

// loop runs f every interval until Close, logging its errors.
func (p *Pebble) loop(interval time.Duration, f func() error) {
	p.loops.Add(1)
	go func() {
		defer p.loops.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		full := false // a full disk is reported once, not every interval
		for {
			select {
			case <-p.stop:
				return
			case <-tick.C:
				if p.failure() != nil {
					continue // a failed engine must not be written to (disk.go)
				}
				err := f()
				switch {
				case err == nil:
					full = false
				case errors.Is(err, ErrClosed):
				case errors.Is(err, ErrDiskFull):
					if !full {
						p.opts.Logger.Warn("store background work waits for disk space", "dir", p.dir, "err", err)
					}
					full = true
				default:
					p.opts.Logger.Error("store background work failed", "dir", p.dir, "err", err)
				}
			}
		}
	}()
}

// syncWAL flushes and fsyncs the WAL if anything was written since the last sync; an
// empty synced record makes pebble sync everything queued before it.
func (p *Pebble) syncWAL() error {
	if err := p.settle(); err != nil { // what waits in the write buffer is synced too
		return err
	}
	if !p.dirty.Swap(false) {
		return nil
	}
	if !p.enter() {
		return ErrClosed
	}
	defer p.state.RUnlock()
	return p.guard(func() error { return p.db.LogData(nil, pebble.Sync) })
}

// enter starts a call: it returns false, holding nothing, once the store is closed;
// otherwise the caller must p.state.RUnlock() when done with db.
func (p *Pebble) enter() bool {
	p.state.RLock()
	if p.closed {
		p.state.RUnlock()
		return false
	}
	return true
}

// commit commits b with the store's sync mode.
func (p *Pebble) commit(b *pebble.Batch) error {
	if err := p.apply(b, p.wo); err != nil {
		return err
	}
	if p.opts.Sync == SyncBatch {
		p.dirty.Store(true)
	}
	return nil
}

// commitLater commits b without waiting for the disk. With SyncAlways the caller must
// call durable after releasing its locks and before it answers: writers that wait for
// the disk outside their locks share one sync, where a sync under a pair's or the
// catalog's lock made every other writer of it wait a whole sync. The write is
// visible to readers from here on, a sync before the writer is told it is stored.
func (p *Pebble) commitLater(b *pebble.Batch) error {
	if err := p.apply(b, pebble.NoSync); err != nil {
		return err
	}
	switch p.opts.Sync {
	case SyncAlways:
		p.applied.Add(1) // after the apply: whoever reads the count syncs past this write
	case SyncBatch:
		p.dirty.Store(true)
	}
	return nil
}

// durable returns, with SyncAlways, once every write committed by commitLater before
// it is on disk (at once when none waits). The caller holds p.state.
//
// Counts only grow: two writers that sync for the same writes both record them synced,
// and neither can make a later writer believe its own write was synced when it was not
// (a pending count that two callers both subtracted once went negative, and the next
// writer's sync was skipped: an acknowledged point lost to a crash under --sync always).
func (p *Pebble) durable() error {
	if p.opts.Sync != SyncAlways {
		return nil
	}
	target := p.applied.Load() // every write counted here is in the WAL's buffer
	if p.synced.Load() >= target {
		return nil
	}
	if err := p.guard(func() error { return p.db.LogData(nil, pebble.Sync) }); err != nil {
		return err
	}
	for { // the WAL is synced past target: record it, unless another caller got further
		cur := p.synced.Load()
		if cur >= target || p.synced.CompareAndSwap(cur, target) {
			return nil
		}
	}
}

// apply commits b with wo, unless the engine has failed; a failure of the commit marks
// the store failed (disk.go).
func (p *Pebble) apply(b *pebble.Batch, wo *pebble.WriteOptions) error {
	n := b.Len()
	if err := p.guard(func() error { return b.Commit(wo) }); err != nil {
		return err
	}
	p.space.wrote(n)
	return nil
}

// guard runs f, a call that writes to pebble, unless the engine has failed. Pebble
// answers a failed WAL write with Logger.Fatalf, which panics (options.go): guard turns
// that into the store's sticky failure.
func (p *Pebble) guard(f func() error) (err error) {
	if err := p.failure(); err != nil {
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			// A variable of its own: the address of err would make every call
			// allocate it.
			failure := engineFailure(r)
			err = failure
			if p.failed.CompareAndSwap(nil, &failure) {
				p.opts.Logger.Error("store: the storage engine failed; refusing writes until restart", "dir", p.dir, "err", err)
			} else {
				err = *p.failed.Load()
			}
		}
	}()
	return f()
}

// failure returns the error that failed the engine, or nil.
func (p *Pebble) failure() error {
	if e := p.failed.Load(); e != nil {
		return *e
	}
	return nil
}

func (p *Pebble) addCounters(c counters) {
	p.shards.Add(c.shards)
	p.series.Add(c.series)
	p.points.Add(c.points)
}

// Append implements Appender. With SyncAlways the points are durable when it returns;
// with SyncBatch and SyncNone they may wait in the write buffer (buffer.go), readable
// all the same.
func (p *Pebble) Append(ref ShardRef, key string, pts series.Points) error {
	if empty, err := prepareAppend(key, &pts); empty || err != nil {
		return err
	}
	one := [1]PairAppend{{Ref: ref, Key: key, Points: pts}}
	return p.appendNow(one[:])
}

// appendNow stores a prepared batch: into the write buffer if it may wait there,
// otherwise in a commit of its own, after what the buffer holds.
func (p *Pebble) appendNow(batch []PairAppend) error {
	if p.buffer(batch) {
		return nil
	}
	if err := p.settle(); err != nil {
		return err
	}
	return p.append(batch, nil, false)
}

// AppendBatch implements BatchAppender: one pebble batch, one commit, for all pairs.
// With SyncAlways the points are durable when it returns.
func (p *Pebble) AppendBatch(batch []PairAppend) error {
	prepared := make([]PairAppend, 0, len(batch))
	for _, a := range batch {
		if empty, err := prepareAppend(a.Key, &a.Points); err != nil {
			return err
		} else if !empty {
			prepared = append(prepared, a)
		}
	}
	if len(prepared) == 0 {
		return nil
	}
	return p.appendNow(prepared)
}

// pairWrite is one pair's part of an append.
type pairWrite struct {
	PairAppend
	id    []byte
	sid   string
	claim typeClaim
	skip  bool    // the filter left nothing to write
	next  summary // the pair's summary after the commit
	sum   summary // before it
}

// append stores prepared points of one or more pairs in one batch; filter, if not nil,
// may drop some of them under the pairs' locks (Restore drops what tombstones cover;
// it appends one pair). drained says the batch is the write buffer's: its appends were
// acknowledged, so a pair whose quantum expired meanwhile is left out (retention drops
// it anyway) instead of failing the others, and a disk that filled meanwhile takes them
// into its reserve.
func (p *Pebble) append(batch []PairAppend, filter func(id []byte, pts *series.Points) error, drained bool) (err error) {
	if !p.enter() {
		return ErrClosed
	}
	defer p.state.RUnlock()
	defer func() { // after the pairs' locks are released (commitLater)
		if err == nil {
			r := trace.StartRegion(context.Background(), "store.durable")
			err = p.durable()
			r.End()
		}
	}()
	defer trace.StartRegion(context.Background(), "store.append").End()
	p.dropMu.RLock()
	defer p.dropMu.RUnlock()

	// One entry per pair: the entries of a pair named twice are merged, the later's
	// values winning, so that its lock is taken once and its counts stay exact.
	var ws []pairWrite
	var onePair [1]pairWrite // a lone single-point write allocates no slice
	if len(batch) == 1 {
		ws = onePair[:0]
	} else {
		ws = make([]pairWrite, 0, len(batch))
	}
	var byID map[string]int
	if len(batch) > 1 {
		byID = make(map[string]int, len(batch))
	}
	now := time.Now()
	for _, a := range batch {
		if drained {
			// Acknowledged when the disk had room: it goes into the reserve (at most
			// WriteBuffer of it, as the buffer takes nothing once the disk is full).
			if p.expired(a.Ref.Start, now) != nil {
				continue
			}
			if err := p.failure(); err != nil {
				return err
			}
		} else if err := p.writable(a.Ref.Start, now); err != nil {
			return fmt.Errorf("store: append to %q: %w", a.Key, err)
		}
		id := pairID(a.Ref, a.Key)
		sid := string(id)
		if i, ok := byID[sid]; ok {
			if have := ws[i].Points.Type; have != a.Points.Type {
				return mismatch(a.Key, have, a.Points.Type)
			}
			ws[i].Points = series.Merge(ws[i].Points, a.Points)
			continue
		}
		if byID != nil {
			byID[sid] = len(ws)
		}
		ws = append(ws, pairWrite{PairAppend: a, id: id, sid: sid})
	}
	if len(ws) == 0 {
		return nil // a drain whose every pair expired
	}

	committed, claimed := false, 0
	defer func() {
		for i := range ws[:claimed] {
			p.types.settle(ws[i].Key, ws[i].claim, committed && !ws[i].skip)
		}
	}()
	for i := range ws {
		cl, _, err := p.types.claim(ws[i].Key, ws[i].Points.Type, p.loadType)
		if err != nil {
			return err
		}
		ws[i].claim, claimed = cl, i+1
	}
	// Pairs are locked in the order of their IDs: two batches sharing pairs cannot
	// wait for each other in a cycle.
	var oneOrder [1]int
	order := oneOrder[:]
	if len(ws) > 1 {
		order = make([]int, len(ws))
	}
	for i := range order {
		order[i] = i
	}
	if len(ws) > 1 {
		slices.SortFunc(order, func(a, b int) int { return strings.Compare(ws[a].sid, ws[b].sid) })
	}
	// One deferred release for all: a defer in a loop is an allocation each.
	var oneLock [1]*pairLock
	locks := oneLock[:0]
	if len(ws) > 1 {
		locks = make([]*pairLock, 0, len(ws))
	}
	defer func() {
		for j, l := range locks {
			p.pairs.release(ws[order[j]].sid, l)
		}
	}()
	for _, i := range order {
		locks = append(locks, p.pairs.acquire(ws[i].sid))
	}

	if err := p.summaries(ws, order); err != nil {
		return err
	}
	b := p.db.NewBatch()
	defer b.Close()
	var delta counters
	// k and v are scratch for keys and values: the batch copies what it is given.
	kcap := 64 + len(ws[0].id)
	scratch := make([]byte, 0, kcap+summaryCap)
	k, v := scratch[:0:kcap], scratch[kcap:kcap]
	for i := range ws {
		w := &ws[i]
		if filter != nil {
			// A copy: handing filter &w.Points would put every append's ws on the heap.
			pts := w.Points
			if err := filter(w.id, &pts); err != nil {
				return err
			}
			if w.Points = pts; w.Points.Len() == 0 {
				w.skip = true
				continue
			}
		}
		fresh, old, err := p.countNew(w.id, w.sum, &w.Points)
		if err != nil {
			return err
		}
		stats, err := p.statsAfter(w.id, w.sum, &w.Points, &old, fresh)
		if err != nil {
			return fmt.Errorf("store: append to %q: %w", w.Key, err)
		}
		n := w.Points.Len()
		blocks, tail, err := p.appendBlocks(b, w.id, w.sum, w.Points)
		if err != nil {
			return fmt.Errorf("store: append to %q: %w", w.Key, err)
		}
		w.next = w.sum.with(fresh, w.Points.T[0], w.Points.T[n-1], blocks)
		w.next.tailBlock = tail
		w.next.stats, w.next.hasStats = stats, true
		w.next.cover = coverOf(&w.sum).add(w.Points.T[0], w.Points.T[n-1])
		w.next.written = now.UnixNano()
		delta.points += fresh
		if w.sum.count == 0 {
			delta.shards++
		}
		if w.claim.count {
			delta.series++
		}
		k, v = pairKey(k[:0], w.id, kindSummary), w.next.appendTo(v[:0])
		err = b.Set(k, v, nil)
		if !w.sum.marked { // the sealer's index: written once per unsealed stretch
			k = append(append(k[:0], famUnsealed), w.id...)
			err = errors.Join(err, b.Set(k, p.unsealedValue(w.Ref.Q), nil))
		}
		if w.claim.writeMeta {
			err = errors.Join(err, b.Set(metaKey(w.Key), metaValue(w.Points.Type), nil))
		}
		if err != nil {
			return fmt.Errorf("store: append to %q: %w", w.Key, err)
		}
	}
	if b.Empty() {
		return nil // the filter dropped everything
	}
	if !delta.zero() {
		err = b.Merge(countersKey, delta.encode(), nil)
	}
	if err == nil {
		err = p.commitLater(b)
	}
	if err != nil {
		if len(ws) == 1 {
			return fmt.Errorf("store: append to %q: %w", ws[0].Key, err)
		}
		return fmt.Errorf("store: append to %d pairs (%q, …): %w", len(ws), ws[0].Key, err)
	}
	committed = true
	for i := range ws {
		w := &ws[i]
		if w.skip {
			continue
		}
		p.pairs.remember(w.sid, w.next)
		if w.next.count != w.sum.count || w.next.stats.Hash != w.sum.stats.Hash {
			p.changes.note(w.sid) // what an idempotent re-write (a repair push) did not change is not news
		}
	}
	p.addCounters(delta)
	p.appended.Add(delta.points)
	return nil
}

// foldTail is how many blocks a pair's unsealed tail holds before an append folds them
// into one. Without folding, a quantum written one point at a time would be hundreds
// of one-point blocks, each decoded by every read (and every repair pass) until the
// seal: 27 % of the CPU of a single-point write benchmark went to that.
const foldTail = 16

// foldKeep is the size from which a block leaves the tail for good (when no smaller
// block precedes it there). It bounds what a fold rewrites: a quantum written point by
// point re-encodes each point about foldKeep/foldTail/2 times on average, and a batch
// of foldKeep points or more is never rewritten before the seal. At 64 a 600-point
// quantum written point by point is read back as about ten blocks until its seal; at
// 256 it was three, but each point was encoded four times as often: a single-point
// append took 6-9 % more of an emulated ARMv7 core (BenchmarkAppendSyncNone/point-60hz
// under qemu-arm: 53.4-55.0 µs against 49.7-51.4).
const foldKeep = 64

// appendBlocks adds pts to batch b as new blocks of pair id. When the pair's tail (its
// blocks from sum.tailBlock on) has grown to foldTail blocks, the tail and pts are
// merged and rewritten as one block (or a few, ChunkMaxPoints at most each) that
// replaces the tail: numbered after it, so a later write still wins over everything
// before. Blocks of foldKeep points or more leave the tail for good, so the rewrite
// stays short however much the quantum holds. It returns how many block numbers were used and
// where the pair's tail now starts. The caller holds the pair's lock.
func (p *Pebble) appendBlocks(b *pebble.Batch, id []byte, sum summary, pts series.Points) (used, tail uint64, err error) {
	next, tail := sum.nextBlock, sum.tailBlock
	folding := next-tail >= foldTail
	if folding {
		it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: blockKey(nil, id, tail), UpperBound: blockKey(nil, id, next)})
		if err != nil {
			return 0, 0, err
		}
		old, err := unsealedPoints(it, nil, id, math.MinInt64, math.MaxInt64, false)
		// Point deletions, not a range deletion: pebble re-fragments all of a memtable's
		// range deletions for every new iterator, which made one per fold quadratic
		// (34 % of a single-point append's CPU).
		if err == nil {
			err = deleteAll(b, it)
		}
		if err := errors.Join(err, it.Close()); err != nil {
			return 0, 0, err
		}
		if old.Len() > 0 && old.Type != pts.Type {
			return 0, 0, fmt.Errorf("%w: blocks of pair %x differ in type", ErrCorrupt, id)
		}
		pts = series.Merge(old, pts)
		tail = next
	}
	enc := blockEncoders.Get().(*chunk.Encoder)
	defer blockEncoders.Put(enc)
	// One allocation for the key and a small block's value; the batch copies both.
	kcap := len(id) + 32
	buf := make([]byte, 0, kcap+blockScratch)
	k, v := buf[:0:kcap], buf[kcap:kcap]
	n, limit := pts.Len(), p.opts.ChunkMaxPoints
	for i := 0; i < n; i += limit {
		part := pts.Slice(i, min(i+limit, n))
		if v, err = enc.Encode(v[:0], part); err != nil {
			return 0, 0, err
		}
		k = blockKey(k[:0], id, next+used)
		if err := b.Set(k, v, nil); err != nil {
			return 0, 0, err
		}
		used++
		if part.Len() >= min(foldKeep, limit) && tail == next+used-1 {
			tail++ // big enough, and nothing small before it: no fold rewrites it again
		}
	}
	return used, tail, nil
}

// blockScratch is room for the encoding of a block of a few points, what a
// single-point append writes between folds.
const blockScratch = 128

// summary returns the summary of pair id, from the cache or the store.
func (p *Pebble) summary(id []byte, sid string) (summary, error) {
	if s, ok := p.pairs.summary(sid); ok {
		return s, nil
	}
	v, closer, err := p.db.Get(pairKey(nil, id, kindSummary))
	if errors.Is(err, pebble.ErrNotFound) {
		return summary{}, nil
	}
	if err != nil {
		return summary{}, err
	}
	defer closer.Close()
	return decodeSummary(v)
}

// summaries sets the sum of each of ws (locked) from the cache or the store, the
// ones the cache lacks read at once (lookupMany) in the order of their IDs.
func (p *Pebble) summaries(ws []pairWrite, order []int) error {
	var miss []int
	var keys [][]byte
	for _, i := range order {
		w := &ws[i]
		if s, ok := p.pairs.summary(w.sid); ok {
			w.sum = s
			continue
		}
		w.sum = summary{}
		miss = append(miss, i)
		keys = append(keys, pairKey(nil, w.id, kindSummary))
	}
	// What the pair table does not hold is mostly a pair written for the first time.
	return p.lookupMostlyAbsent(keys, func(j int, v []byte, found bool) error {
		if !found {
			return nil
		}
		s, err := decodeSummary(v)
		ws[miss[j]].sum = s
		return err
	})
}

// countNew returns how many of pts' timestamps the pair does not hold yet, and the
// points it holds in pts' span. A batch entirely after (or before) what the pair holds
// is all new, which is the common case and needs no read; so is a batch none of whose
// points falls in the pair's cover (cover.go), a batch that fills a gap left by
// batches committed out of order. Otherwise the overlapping span is read.
func (p *Pebble) countNew(id []byte, sum summary, pts *series.Points) (int64, series.Points, error) {
	n := pts.Len()
	if sum.count == 0 || pts.T[0] > sum.maxT || pts.T[n-1] < sum.minT || !sum.cover.meets(pts.T) {
		return int64(n), series.Points{}, nil
	}
	p.overlapReads.Add(1)
	old, _, err := p.readPair(id, pts.T[0], pts.T[n-1])
	if err != nil {
		return 0, series.Points{}, err
	}
	fresh, i := int64(n), 0
	for _, t := range pts.T {
		for i < old.Len() && old.T[i] < t {
			i++
		}
		if i < old.Len() && old.T[i] == t {
			fresh--
		}
	}
	return fresh, old, nil
}

// Read implements Querier.
func (p *Pebble) Read(ref ShardRef, key string, from, to int64) (series.Points, bool, error) {
	if err := p.settle(); err != nil {
		return series.Points{}, false, err
	}
	if err := series.ValidateKey(key); err != nil {
		return series.Points{}, false, err
	}
	if !p.enter() {
		return series.Points{}, false, ErrClosed
	}
	defer p.state.RUnlock()
	lo, hi := inclusive(from, to)
	var idBuf [pairIDStack]byte // a long read asks for quanta by the million, most absent: no garbage per quantum
	pts, held, err := p.readPair(appendPairID(idBuf[:0], ref, key), lo, hi)
	if err != nil {
		return series.Points{}, false, p.readFailed(ref, key, err)
	}
	return pts, held, nil
}

// inclusive returns [from, to) as an inclusive range, empty (hi < lo) if to <= from.
func inclusive(from, to int64) (lo, hi int64) {
	if to <= from {
		return 1, 0
	}
	return from, to - 1
}

// readFailed is the error of a failed read of series key in shard ref, counted and
// logged as damage when it is.
func (p *Pebble) readFailed(ref ShardRef, key string, err error) error {
	return p.damaged(fmt.Errorf("store: read %q of quantum %d: %w", key, ref.Start, err))
}

// readPair returns pair id's points with lo <= t <= hi (none if hi < lo), merging
// sealed chunks and unsealed blocks from one snapshot; a block's point wins over a
// chunk's point at the same time (it was written later). held reports whether the pair holds
// any point at all.
//
// It allocates one buffer of its own for the iterator's bounds (pebble keeps them), and
// id does not escape: a pair the store does not hold, which a long read over a sparse
// range asks for quantum after quantum, costs that buffer and pebble's iterator
// (TestReadAbsentAllocs).
func (p *Pebble) readPair(id []byte, lo, hi int64) (series.Points, bool, error) {
	n := len(id) + 2 // a pair key: famPair ‖ id ‖ kind
	keys := make([]byte, 0, 3*n+8)
	lower, upper, seek := pairBounds(keys, id)
	opts := pebble.IterOptions{LowerBound: lower, UpperBound: upper}
	it, err := p.db.NewIter(&opts)
	if err != nil {
		return series.Points{}, false, err
	}
	defer it.Close()
	return p.scanPair(it, id, lower, seek, lo, hi)
}

// pairBounds lays out in keys (capacity 3·(len(id)+2)+8 at least) the first key of pair
// id (its summary's), the key after its last, and an empty seek key with room for a
// chunk's key.
func pairBounds(keys, id []byte) (lower, upper, seek []byte) {
	n := len(id) + 2
	lower = pairKey(keys[:0], id, kindSummary)[:n:n]
	upper = pairKey(keys[n:n], id, kindEnd)[:n:n]
	return lower, upper, keys[2*n : 2*n]
}

// scanPair is readPair in it, an iterator bounded to pair id's keys; lower is the first
// of them, seek room for a chunk's key.
func (p *Pebble) scanPair(it *pebble.Iterator, id, lower, seek []byte, lo, hi int64) (series.Points, bool, error) {
	held := it.SeekGE(lower) && bytes.Equal(it.Key(), lower)
	if !held || hi < lo {
		return series.Points{}, held, it.Error()
	}
	pts, err := p.scanFrom(it, id, seek, lo, hi)
	return pts, err == nil, err
}

// scanFrom is scanPair once it stands at the pair's summary, with lo <= hi.
func (p *Pebble) scanFrom(it *pebble.Iterator, id, seek []byte, lo, hi int64) (series.Points, error) {
	var parts []series.Points
	var valid bool
	if minT, ok := summaryMinT(it.Value()); ok && lo <= minT {
		// No point before lo: the read starts at the pair's first chunk or block, the
		// key after the summary. A step, where a seek searches every level again.
		valid = it.Next()
	} else {
		// The chunk that may hold lo starts at or before it.
		seek = pointKey(seek[:0], id, kindChunk, lo)
		if valid = it.SeekLT(seek); !valid || keyKind(it.Key(), len(id)) != kindChunk {
			valid = it.SeekGE(seek)
		}
	}
	for ; valid && keyKind(it.Key(), len(id)) == kindChunk; valid = it.Next() {
		if keyTime(it.Key()) > hi {
			break
		}
		c, err := p.decodeChunk(it.Key(), it.Value())
		if err != nil {
			return series.Points{}, err
		}
		parts = append(parts, trimInclusive(c, lo, hi))
	}
	// The loop also ends when the iterator fails (a block failing its checksum): the
	// next seek would clear that error, and the read would be silently short.
	if err := it.Error(); err != nil {
		return series.Points{}, err
	}

	var raw series.Points
	if valid { // blocks follow the chunks (the iterator ends at the pair's last key)
		var err error
		at := keyKind(it.Key(), len(id)) == kindBlock
		if raw, err = unsealedPoints(it, pairKey(seek[:0], id, kindBlock), id, lo, hi, at); err != nil {
			return series.Points{}, err
		}
	}
	out := series.Concat(parts...) // copies: cached chunks stay untouched
	if raw.Len() > 0 {
		if out.Len() > 0 && out.Type != raw.Type {
			return series.Points{}, fmt.Errorf("%w: unsealed and sealed points of pair %x differ in type", ErrCorrupt, bytes.Clone(id))
		}
		out = series.Merge(out, raw)
	}
	return out, nil
}

// unsealedPoints reads the blocks from start (a key; nil: it's first) to it's end,
// keeping the points with lo <= t <= hi; at says it stands at start already. Blocks come
// in append order, each sorted; where two hold one timestamp the later block's value wins.
func unsealedPoints(it *pebble.Iterator, start, id []byte, lo, hi int64, at bool) (series.Points, error) {
	seek := func() bool {
		if start == nil {
			return it.First()
		}
		return it.SeekGE(start)
	}
	// The blocks are counted first from their headers, so that the columns are
	// allocated once at their size; then each block is decoded straight onto their end
	// and trimmed in place. Appending block after block would reallocate and copy the
	// columns again and again.
	total := 0
	var typ series.Type
	for valid := at || seek(); valid; valid = it.Next() {
		t, n, err := chunk.Peek(it.Value())
		if err != nil {
			return series.Points{}, fmt.Errorf("%w: block at key %x: %w", ErrCorrupt, it.Key(), err)
		}
		total += n
		typ = t
	}
	if err := it.Error(); err != nil {
		return series.Points{}, err
	}
	if total == 0 {
		return series.Points{}, nil
	}
	raw := series.Points{Type: typ, T: make([]int64, 0, total)}
	switch typ {
	case series.Float:
		raw.F = make([]float64, 0, total)
	case series.Int:
		raw.I = make([]int64, 0, total)
	case series.String:
		raw.S = make([]string, 0, total)
	}
	var dec chunk.Decoder
	ascending := true // every block starts after the previous one ends: no merge needed
	for valid := seek(); valid; valid = it.Next() {
		base := raw.Len()
		if err := dec.Append(&raw, it.Value()); err != nil {
			// A block of another type than the pair's earlier ones says so here.
			return series.Points{}, fmt.Errorf("%w: block at key %x of pair %x: %w", ErrCorrupt, it.Key(), bytes.Clone(id), err) // id is the caller's, maybe on its stack
		}
		block := raw.Slice(base, raw.Len())
		i := sort.Search(block.Len(), func(i int) bool { return block.T[i] >= lo })
		j := sort.Search(block.Len(), func(i int) bool { return block.T[i] > hi })
		raw = keepTail(raw, base, i, max(i, j))
		if raw.Len() > base && base > 0 {
			ascending = ascending && raw.T[base] > raw.T[base-1]
		}
	}
	if err := it.Error(); err != nil {
		return series.Points{}, err
	}
	if raw.Len() == 0 {
		return series.Points{}, nil
	}
	if !ascending {
		raw.Normalize() // stable: of equal timestamps the later block's point is kept
	}
	return raw, nil
}

// keepTail keeps, of the points of p from base on, those [base+i, base+j): moved down
// to base, p cut after them.
func keepTail(p series.Points, base, i, j int) series.Points {
	n := j - i
	if i > 0 {
		copy(p.T[base:], p.T[base+i:base+j])
		switch p.Type {
		case series.Float:
			copy(p.F[base:], p.F[base+i:base+j])
		case series.Int:
			copy(p.I[base:], p.I[base+i:base+j])
		case series.String:
			copy(p.S[base:], p.S[base+i:base+j])
		}
	}
	p.T = p.T[:base+n]
	switch p.Type {
	case series.Float:
		p.F = p.F[:base+n]
	case series.Int:
		p.I = p.I[:base+n]
	case series.String:
		p.S = p.S[:base+n]
	}
	return p
}

// trimInclusive returns the points of p with lo <= t <= hi, sharing p's arrays.
func trimInclusive(p series.Points, lo, hi int64) series.Points {
	i := sort.Search(p.Len(), func(i int) bool { return p.T[i] >= lo })
	j := sort.Search(p.Len(), func(i int) bool { return p.T[i] > hi })
	return p.Slice(i, max(i, j))
}

// decodeChunk returns the decoded chunk stored under key, from the hot tier if there.
func (p *Pebble) decodeChunk(key, value []byte) (series.Points, error) {
	gen, n := binary.Uvarint(value)
	if n <= 0 {
		return series.Points{}, fmt.Errorf("%w: chunk at key %x has no generation", ErrCorrupt, key)
	}
	hk := hotKey{key: string(key), gen: gen}
	if c, ok := p.hot.get(hk); ok {
		return c, nil
	}
	c, err := chunk.Decode(value[n:])
	if err != nil {
		return series.Points{}, fmt.Errorf("%w: chunk at key %x: %w", ErrCorrupt, key, err)
	}
	p.hot.put(hk, c)
	return c, nil
}

// DeclareType implements Registry: a declaration of the type alone.
func (p *Pebble) DeclareType(key string, t series.Type) (series.Type, error) {
	d, err := p.DeclareSeries(key, Decl{Type: t, NoQuantum: true})
	return d.Type, err
}

// DeclareSeries implements Registry.
func (p *Pebble) DeclareSeries(key string, d Decl) (Decl, error) {
	if err := checkDecl(key, d); err != nil {
		return Decl{}, err
	}
	if !p.enter() {
		return Decl{}, ErrClosed
	}
	defer p.state.RUnlock()
	claim, have, err := p.types.claim(key, d.Type, p.loadType)
	if err != nil {
		return Decl{Type: have}, err
	}
	if !claim.writeMeta {
		return p.settleQuantum(key, d)
	}
	if err := errors.Join(p.failure(), p.space.check()); err != nil {
		p.types.settle(key, claim, false)
		return Decl{}, fmt.Errorf("store: declare %q: %w", key, err)
	}
	b := p.db.NewBatch()
	defer b.Close()
	err = b.Set(metaKey(key), declValue(d), nil)
	if claim.count && err == nil {
		err = b.Merge(countersKey, counters{series: 1}.encode(), nil)
	}
	if err == nil {
		err = p.commit(b)
	}
	p.types.settle(key, claim, err == nil)
	if err != nil {
		return Decl{}, fmt.Errorf("store: declare %q: %w", key, err)
	}
	if claim.count {
		p.series.Add(1)
	}
	return d, nil
}

// settleQuantum records d's quantum for a series the store already holds, if the store
// does not know its quantum yet (an append recorded the series before a declaration
// reached this replica), and returns what the store holds.
func (p *Pebble) settleQuantum(key string, d Decl) (Decl, error) {
	p.declMu.Lock()
	defer p.declMu.Unlock()
	have, ok, err := p.loadDecl(key)
	if err != nil {
		return Decl{}, fmt.Errorf("store: declare %q: %w", key, err)
	}
	if !ok {
		// An append that declared the series is still committing: its record knows no
		// quantum, and neither does this store yet.
		return Decl{Type: d.Type, NoQuantum: true}, nil
	}
	if !have.NoQuantum || d.NoQuantum {
		return have, nil
	}
	if err := errors.Join(p.failure(), p.space.check()); err != nil {
		return Decl{}, fmt.Errorf("store: declare %q: %w", key, err)
	}
	b := p.db.NewBatch()
	defer b.Close()
	if err := errors.Join(b.Set(metaKey(key), declValue(d), nil), p.commit(b)); err != nil {
		return Decl{}, fmt.Errorf("store: declare %q: %w", key, err)
	}
	return d, nil
}

// SeriesDecl implements Registry.
func (p *Pebble) SeriesDecl(key string) (Decl, bool) {
	if series.ValidateKey(key) != nil || !p.enter() {
		return Decl{}, false
	}
	defer p.state.RUnlock()
	d, ok, err := p.loadDecl(key)
	if err != nil {
		p.opts.Logger.Error("store: read series metadata", "series", key, "err", err)
		return Decl{}, false
	}
	return d, ok
}

// SeriesType implements Registry.
func (p *Pebble) SeriesType(key string) (series.Type, bool) {
	t, ok, evictions := p.types.lookup(key)
	if ok || series.ValidateKey(key) != nil || !p.enter() {
		return t, ok
	}
	defer p.state.RUnlock()
	t, ok, err := p.loadType(key)
	if err != nil {
		p.opts.Logger.Error("store: read series type", "series", key, "err", err)
		return series.Unknown, false
	}
	if ok {
		p.types.remember(key, t, evictions)
	}
	return t, ok
}

// loadType reads a series' type from the store.
func (p *Pebble) loadType(key string) (series.Type, bool, error) {
	d, ok, err := p.loadDecl(key)
	return d.Type, ok, err
}

// loadDecl reads a series' metadata from the store.
func (p *Pebble) loadDecl(key string) (Decl, bool, error) {
	v, closer, err := p.db.Get(metaKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return Decl{}, false, nil
	}
	if err != nil {
		return Decl{}, false, err
	}
	defer closer.Close()
	d, err := decodeMeta(v)
	return d, err == nil, err
}

// Quantum returns the quantum the store was opened with (PebbleOptions.Quantum), so that
// a node can check it against the cluster's.
func (p *Pebble) Quantum() quanta.Quantum { return p.opts.Quantum }

// Stats implements Store. The counts are exact, and they survive crashes: they are
// persisted in the same batches as the data they count. DiskBytes and
// FlashBytesWritten come from pebble's metrics, fetched without ever blocking for long
// (flash.go): after an engine failure they are the last figures known.
func (p *Pebble) Stats() Stats {
	_ = p.settle() // a failed drain is the appends' and reads' error to report
	s := Stats{
		Shards:         int(p.shards.Load()),
		Series:         int(p.series.Load()),
		Points:         p.points.Load(),
		Retention:      p.opts.Retention,
		MaxDisk:        p.opts.MaxDisk,
		DroppedQuanta:  p.dropped.Load(),
		AppendedPoints: p.appended.Load(),
	}
	s.Corruptions, s.WALBytesDropped = p.damage.corrupt.Load(), p.damage.walDropped.Load()
	f := p.engineFigures()
	s.DiskBytes, s.FlashBytesWritten = f.disk, f.flash
	if p.buf != nil {
		s.BufferedAppends, s.BufferDrains = p.buf.drained.Load(), p.buf.drains.Load()
	}
	if p.failure() != nil && s.DiskBytes == 0 {
		s.DiskBytes = filesSize(p.dir) // the engine failed before its figures were read
	}
	if !p.enter() {
		return s
	}
	defer p.state.RUnlock()
	if start, ok, err := p.oldestQuantum(); err == nil && ok {
		s.OldestQuantum = start
	}
	return s
}

// Flush writes the memtables to table files (pebble.DB.Flush): what a clean Close
// leaves in the WAL is then in tables. Operators' tools and tests use it.
func (p *Pebble) Flush() error {
	if err := p.settle(); err != nil {
		return err
	}
	if !p.enter() {
		return ErrClosed
	}
	defer p.state.RUnlock()
	return p.db.Flush()
}

// DiskUsage returns the bytes the store's files take on disk: tables, WAL, manifest.
func (p *Pebble) DiskUsage() int64 {
	if !p.enter() {
		return 0
	}
	defer p.state.RUnlock()
	return p.diskUsage()
}

func (p *Pebble) diskUsage() int64 {
	if p.failure() != nil {
		// After a failed WAL write pebble's Metrics waits forever on a mutex that the
		// failed commit left held: count the files instead.
		return filesSize(p.dir)
	}
	return int64(min(p.db.Metrics().DiskSpaceUsage(), math.MaxInt64))
}

// filesSize sums the sizes of the files in dir (pebble keeps everything at its top).
func filesSize(dir string) int64 {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range ents {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
	}
	return n
}

// Close stops the background work, waits for the calls in flight, and closes the
// database, which syncs the WAL: after a clean Close nothing is lost in any sync mode.
// Calls after Close return ErrClosed.
func (p *Pebble) Close() error {
	if err := p.closeBuffer(); err != nil && !errors.Is(err, ErrClosed) {
		p.opts.Logger.Error("store: acknowledged appends lost at close", "dir", p.dir, "err", err)
	}
	p.state.Lock()
	if p.closed {
		p.state.Unlock()
		return ErrClosed
	}
	p.closed = true
	p.state.Unlock()
	close(p.stop)
	p.loops.Wait()
	if err := p.db.Close(); err != nil {
		return fmt.Errorf("close store %s: %w", p.dir, err)
	}
	return nil
}
