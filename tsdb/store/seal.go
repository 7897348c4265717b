package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/tsdht/tsdht/internal/netyield"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/chunk"
)

// sealer is the state of sealing: one pass at a time.
type sealer struct {
	mu  sync.Mutex
	gen uint64 // last chunk generation written; persisted under 'q'
	// dropOldGen: the store came from format 2, whose generation key 'g' the next seal deletes.
	dropOldGen bool
	enc        chunk.Encoder
}

// sealYield runs between two pairs a seal rewrites (a test counts the calls). A seal
// is CPU from start to end, and on a node with one core Go polls the network only when
// the core has nothing else queued, or every 10 ms: a writer's request that arrives
// while a seal runs would wait for the whole seal (41 ms for each write during a seal
// of 2,000 pairs, BenchmarkWriteDuringSeal in tsdb). netyield.Yield lets it in after
// the pair being sealed.
var sealYield = netyield.Yield

// sealBatch is how many pairs one scan of the unsealed index collects, bounding the
// sealer's memory however far behind it is.
const sealBatch = 256

// SealNow seals every (shard, series) pair holding raw points whose quantum ended at
// least SealGrace before now: its chunks and raw points are merged and rewritten as
// compressed chunks, in one atomic batch per pair. A point that arrives for a sealed
// quantum is stored raw beside the chunks and folded in by a later pass. The
// background sealer calls it every SealInterval; it returns how many pairs it sealed.
func (p *Pebble) SealNow(now time.Time) (int, error) { return p.sealIdle(now, math.MaxInt64) }

// sealIdle is SealNow, leaving out the pairs an append wrote at or after busySince (UnixNano)
// as far as the pairs' cached summaries tell: a backfill writes into quanta that ended
// long ago, and sealing rewrites a whole pair, so sealing a pair between each of its
// appends would cost its size each time. The background sealer passes SealGrace ago.
func (p *Pebble) sealIdle(now time.Time, busySince int64) (int, error) {
	if err := p.settle(); err != nil {
		return 0, err
	}
	p.seal.mu.Lock()
	defer p.seal.mu.Unlock()
	// A quantum starting at s (seconds) ends at s+Q; seal it once s+Q+grace <= now,
	// that is s <= floor((now-grace)/1s) - Q. No quantum is shorter than the store's,
	// so the scan stops there; a pair of a longer quantum says so in its marker.
	ended := now.Add(-p.opts.SealGrace).Unix()
	limit := ended - int64(p.opts.Quantum)
	sealed := 0
	var after []byte
	for {
		ids, next, err := p.unsealed(after, limit, ended, busySince)
		if err != nil {
			return sealed, err
		}
		for _, id := range ids {
			// A seal writes about as much as it folds away, and the space comes back only
			// when pebble compacts: on a full disk the sealer waits too (disk.go).
			if err := p.space.check(); err != nil {
				return sealed, fmt.Errorf("store: seal: %w", err)
			}
			if err := p.sealPair(id); err != nil {
				return sealed, fmt.Errorf("store: seal pair %x: %w", id, err)
			}
			sealed++
			sealYield()
		}
		if next == nil {
			return sealed, nil
		}
		after = next
	}
}

// unsealedValue is the value of a pair's marker in the unsealed index: the length of
// its quantum where it is not the store's, so that the sealer waits for its end.
func (p *Pebble) unsealedValue(q quanta.Quantum) []byte {
	if q == 0 || q == p.opts.Quantum {
		return nil
	}
	return binary.AppendUvarint(nil, uint64(q))
}

// unsealed returns up to sealBatch ids of pairs with raw points whose quantum starts at
// or before limit and ended at or before ended (UNIX seconds), oldest first, from the
// marker after the key after (nil: from the first), but none written at or after
// busySince (sealIdle). next is where to go on, nil when the scan reached its end.
func (p *Pebble) unsealed(after []byte, limit, ended, busySince int64) (ids [][]byte, next []byte, err error) {
	if !p.enter() {
		return nil, nil, ErrClosed
	}
	defer p.state.RUnlock()
	upper := []byte{famUnsealed + 1}
	if limit < math.MaxInt64 {
		upper = putSortable([]byte{famUnsealed}, limit+1)
	}
	lower := []byte{famUnsealed}
	if after != nil {
		lower = after
	}
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, nil, err
	}
	defer it.Close()
	scanned := 0
	for valid := it.First(); valid; valid = it.Next() {
		if len(ids) == sealBatch || scanned == 16*sealBatch {
			return ids, append([]byte(nil), it.Key()...), it.Error()
		}
		scanned++
		id := it.Key()[1:]
		if !validPairID(id) {
			return nil, nil, fmt.Errorf("%w: unsealed-index key %x", ErrCorrupt, it.Key())
		}
		if v := it.Value(); len(v) > 0 {
			q, n := binary.Uvarint(v)
			if n <= 0 || q > uint64(quanta.MaxQuantum) {
				return nil, nil, fmt.Errorf("%w: unsealed-index value %x", ErrCorrupt, v)
			}
			if start := getSortable(id[:8]); start+int64(q) > ended {
				continue // its quantum has not ended yet
			}
		}
		if s, ok := p.pairs.summaryOf(id); ok && s.written >= busySince {
			continue // still being written
		}
		ids = append(ids, append([]byte(nil), id...))
	}
	return ids, nil, it.Error()
}

// sealPair rewrites one pair's chunks and raw points as fresh chunks. It holds the
// pair's lock, so no append can slip a raw point between its read and its deletion.
func (p *Pebble) sealPair(id []byte) error {
	if !p.enter() {
		return ErrClosed
	}
	defer p.state.RUnlock()
	defer p.pairs.lock(string(id))()

	pts, _, err := p.readPair(id, math.MinInt64, math.MaxInt64)
	if err != nil {
		// A damaged pair is left as it is: sealing what could be read would delete the
		// rest for good. Repair re-sends the pair from another replica.
		return p.damaged(fmt.Errorf("store: seal pair %x: %w", id, err))
	}
	b := p.db.NewBatch()
	defer b.Close()
	// Delete everything but the summary, then write the new chunks: within a batch,
	// later writes win over the earlier deletions. Point deletions, because pebble
	// re-fragments every range deletion in the memtable for each new iterator, and a
	// backfill seals hundreds of pairs a second.
	old, err := p.deleteSealed(b, id)
	if err != nil {
		return err
	}
	onDisk, err := p.tableBytes(id)
	if err != nil {
		return err
	}
	gen := p.seal.gen + 1
	n := pts.Len()
	var buf []byte
	written := 0 // bytes of the pair's keys and values after the seal (idlecompact.go)
	for i := 0; i < n; i += p.opts.ChunkMaxPoints {
		part := pts.Slice(i, min(i+p.opts.ChunkMaxPoints, n))
		buf = binary.AppendUvarint(buf[:0], gen)
		if buf, err = p.seal.enc.Encode(buf, part); err != nil {
			return err
		}
		k := pointKey(nil, id, kindChunk, part.T[0])
		if err := b.Set(k, buf, nil); err != nil {
			return err
		}
		written += len(k) + len(buf)
	}
	if err := b.Set(genKey, binary.AppendUvarint(nil, gen), nil); err != nil {
		return err
	}
	if err := b.Delete(unsealedKey(id), nil); err != nil {
		return err
	}
	if p.seal.dropOldGen {
		if err := b.Delete(genKeyOld, nil); err != nil {
			return err
		}
	}
	// The statistics again, from the sorted points: a sealed pair's are a function of
	// its points alone, whatever order they came in (stats.go).
	sum, err := p.summary(id, string(id))
	if err != nil {
		return err
	}
	if sum.count > 0 && sum.count == int64(n) {
		sum.stats, sum.hasStats = pairStats(&pts), true
		if err := b.Set(pairKey(nil, id, kindSummary), sum.encode(), nil); err != nil {
			return err
		}
	}
	written += len(id) + 2 + len(sum.encode())
	// Sealing changes no point, so it need not wait for an fsync: the WAL keeps batches
	// in order, and any later synced write makes this one durable too.
	if err := p.apply(b, pebble.NoSync); err != nil {
		return err
	}
	p.seal.gen = gen
	p.seal.dropOldGen = false
	p.noteSeal(getSortable(id), written-old, onDisk)
	if _, cached := p.pairs.summary(string(id)); cached || sum.hasStats {
		sum.marked = false // the 'u' key is gone: the next append rewrites it
		p.pairs.remember(string(id), sum)
	}
	return nil
}

// deleteSealed adds to b a deletion of the pair's chunks and blocks, and returns the
// bytes (keys and values) of the chunks among them: what an earlier seal wrote, which
// this one replaces (idlecompact.go counts what seals add).
func (p *Pebble) deleteSealed(b *pebble.Batch, id []byte) (int, error) {
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: pairKey(nil, id, kindChunk), UpperBound: pairKey(nil, id, kindBlock)})
	if err != nil {
		return 0, err
	}
	n := 0
	for valid := it.First(); valid && err == nil; valid = it.Next() {
		n += len(it.Key()) + len(it.Value())
		err = b.Delete(it.Key(), nil)
	}
	if err := errors.Join(err, it.Error(), it.Close()); err != nil {
		return 0, err
	}
	return n, p.deleteKeys(b, pairKey(nil, id, kindBlock), pairKey(nil, id, kindEnd))
}

// tableBytes returns the bytes (keys and values) of the pair's chunks and blocks that
// are in pebble's tables, not only in the memtable: what a seal leaves on disk as
// garbage until a compaction drops it (idlecompact.go).
func (p *Pebble) tableBytes(id []byte) (int, error) {
	it, err := p.db.NewIter(&pebble.IterOptions{
		LowerBound:                pairKey(nil, id, kindChunk),
		UpperBound:                pairKey(nil, id, kindEnd),
		OnlyReadGuaranteedDurable: true, // pebble v1.1.5: tables only, memtables ignored
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		n += len(it.Key()) + len(it.Value())
	}
	return n, errors.Join(it.Error(), it.Close())
}

// deleteKeys adds to b a deletion of every key in [lower, upper).
func (p *Pebble) deleteKeys(b *pebble.Batch, lower, upper []byte) error {
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	return errors.Join(deleteAll(b, it), it.Close())
}

// deleteAll adds to b a deletion of every key it holds, from its first.
func deleteAll(b *pebble.Batch, it *pebble.Iterator) error {
	var err error
	for valid := it.First(); valid && err == nil; valid = it.Next() {
		err = b.Delete(it.Key(), nil)
	}
	return errors.Join(err, it.Error())
}
