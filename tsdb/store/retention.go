package store

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble"
)

// Expiry: retention by age and a disk budget both drop whole quanta, oldest first.
// The quantum start leads every pair id (keys.go), so the quanta before a limit are one
// key range of 'p' (data) and one of 'u' (unsealed index): a drop is two range
// deletions and a counters operand in one atomic batch. Series metadata stays: a
// series keeps its type after its points expire.
//
// A drop must not race an append into the quanta it drops: the append would bring a
// pair back half counted. So the store keeps two floors (quanta starting before a floor
// are gone and refuse writes), and a drop raises its floor first, then waits for the
// appends that checked the old floor (dropMu), and only then counts and deletes. It
// also holds the sealer's lock, so that no seal rewrites a pair it deletes.

// writable returns why a write into the quantum starting at start (UNIX seconds) must
// be refused, if it must: the quantum is expired, or the engine failed, or the disk is
// full.
func (p *Pebble) writable(start int64, now time.Time) error {
	if err := p.expired(start, now); err != nil {
		return err
	}
	if err := p.failure(); err != nil {
		return err
	}
	return p.space.check()
}

// expired returns an error wrapping ErrExpired if the quantum starting at start is
// dropped or due to be.
func (p *Pebble) expired(start int64, now time.Time) error {
	at := func() string { return time.Unix(start, 0).UTC().Format(time.RFC3339) }
	if start < p.retFloor.Load() || p.opts.Retention > 0 && start < p.retentionLimit(now) {
		return fmt.Errorf("%w: quantum %d (%s) ended more than the retention of %v ago; its data is dropped, and storing this would bring it back",
			ErrExpired, start, at(), p.opts.Retention)
	}
	if start < p.budgetFloor.Load() {
		return fmt.Errorf("%w: quantum %d (%s) is older than the oldest quantum this store keeps within its disk budget of %s",
			ErrExpired, start, at(), FormatSize(p.opts.MaxDisk))
	}
	return nil
}

// retentionLimit returns the start of the oldest quantum retention keeps at now: a
// quantum is dropped once it ended at least Retention before now, that is when
// start + Q <= floor((now - Retention) / 1 s).
func (p *Pebble) retentionLimit(now time.Time) int64 {
	cut := now.UnixNano() - int64(p.opts.Retention)
	if cut > now.UnixNano() { // wrapped around
		return math.MinInt64
	}
	sec := cut / 1e9
	if cut%1e9 < 0 {
		sec--
	}
	return sec - int64(p.opts.Quantum) + 1
}

// EnforceRetention drops every quantum that ended at least Retention before now and
// returns how many quanta it dropped (0 without a Retention). Later writes into them
// are refused with ErrExpired. The background loop calls it every EnforceInterval.
//
// Clocks lie: now counts only up to the end of the newest quantum the store holds, so
// that a clock that jumps ahead (a board without an RTC, a bad time server) cannot
// wipe the store. Such a clock makes appends of current data fail instead, loudly, with
// the retention named, and they work again when the clock is right.
func (p *Pebble) EnforceRetention(now time.Time) (dropped int, err error) {
	_ = p.settle() // what waits for an expired quantum is left out; a failed drain must not keep space from being freed
	if p.opts.Retention <= 0 {
		return 0, nil
	}
	if !p.enter() {
		return 0, ErrClosed
	}
	newest, ok, err := p.newestQuantum()
	p.state.RUnlock()
	if err != nil || !ok {
		return 0, err
	}
	if end := time.Unix(newest+int64(p.opts.Quantum), 0); end.Before(now) {
		now = end
	}
	return p.dropBefore(p.retentionLimit(now), &p.retFloor)
}

// EnforceDiskBudget drops the oldest ended quanta while the store's disk usage is over
// MaxDisk, and compacts their range so that the space is reclaimed; it returns how many
// quanta it dropped (0 without a MaxDisk). Each pass aims at 1/16 below the budget, so
// that the next drop is not due at the next write. It never drops a quantum that has
// not ended: a budget smaller than the engine's fixed overhead (see
// PebbleOptions.MaxDisk) leaves the store over it, with a warning in the log. Writes
// into dropped quanta are refused with ErrExpired until the store is reopened; after
// that, a late write into one is stored and, while the budget is tight, dropped again
// by the next pass (it is among the oldest). The background loop calls it every
// EnforceInterval.
func (p *Pebble) EnforceDiskBudget() (dropped int, err error) {
	_ = p.settle() // a failed drain (a full disk) must not keep space from being freed
	if p.opts.MaxDisk <= 0 {
		return 0, nil
	}
	for range 8 { // each round re-measures: estimates are estimates
		live, err := p.liveDiskUsage()
		if err != nil {
			return dropped, err
		}
		if live <= p.opts.MaxDisk {
			p.overBudget.Store(false)
			return dropped, nil
		}
		excess := live - (p.opts.MaxDisk - p.opts.MaxDisk/16)
		limit, ok, err := p.oldestWorth(excess, time.Now())
		if err != nil {
			return dropped, err
		}
		if !ok {
			if !p.overBudget.Swap(true) {
				p.opts.Logger.Warn("store: over its disk budget with no ended quantum left to drop: the budget is below the engine's fixed overhead (WAL files and memtables)",
					"dir", p.dir, "disk", FormatSize(live), "budget", FormatSize(p.opts.MaxDisk))
			}
			return dropped, nil
		}
		n, err := p.dropBefore(limit, &p.budgetFloor)
		dropped += n
		if err != nil {
			return dropped, err
		}
		if err := p.compactBefore(limit); err != nil {
			return dropped, err
		}
	}
	return dropped, nil
}

// enforce is the background loop's work.
func (p *Pebble) enforce() error {
	_, err1 := p.EnforceRetention(time.Now())
	_, err2 := p.EnforceDiskBudget()
	return errors.Join(err1, err2)
}

// liveDiskUsage is DiskUsage less the table files already obsolete, which pebble
// deletes in the background moments later: what a drop can still change.
func (p *Pebble) liveDiskUsage() (int64, error) {
	if !p.enter() {
		return 0, ErrClosed
	}
	defer p.state.RUnlock()
	m := p.db.Metrics()
	u := m.DiskSpaceUsage() - m.Table.ObsoleteSize - m.Table.ZombieSize
	return int64(min(u, math.MaxInt64)), nil
}

// quantumKey returns fam ‖ start: the first key of that quantum in family fam.
func quantumKey(fam byte, start int64) []byte { return putSortable([]byte{fam}, start) }

// oldestQuantum returns the start of the oldest quantum holding data. The caller holds
// p.state.
func (p *Pebble) oldestQuantum() (int64, bool, error) {
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: []byte{famPair}, UpperBound: []byte{famPair + 1}})
	if err != nil {
		return 0, false, err
	}
	defer it.Close()
	if !it.First() {
		return 0, false, it.Error()
	}
	if len(it.Key()) < 9 {
		return 0, false, fmt.Errorf("%w: pair key %x", ErrCorrupt, it.Key())
	}
	return getSortable(it.Key()[1:9]), true, nil
}

// newestQuantum returns the start of the newest quantum holding data. The caller holds
// p.state.
func (p *Pebble) newestQuantum() (int64, bool, error) {
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: []byte{famPair}, UpperBound: []byte{famPair + 1}})
	if err != nil {
		return 0, false, err
	}
	defer it.Close()
	if !it.Last() {
		return 0, false, it.Error()
	}
	if len(it.Key()) < 9 {
		return 0, false, fmt.Errorf("%w: pair key %x", ErrCorrupt, it.Key())
	}
	return getSortable(it.Key()[1:9]), true, nil
}

// oldestWorth returns the limit (an exclusive quantum start) below which the oldest
// ended quanta take about excess bytes of table files. ok is false if no ended quantum
// holds table data. Quanta whose data is still only in the memtable weigh nothing:
// dropping them frees no disk.
func (p *Pebble) oldestWorth(excess int64, now time.Time) (limit int64, ok bool, err error) {
	if !p.enter() {
		return 0, false, ErrClosed
	}
	defer p.state.RUnlock()
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: []byte{famPair}, UpperBound: []byte{famPair + 1}})
	if err != nil {
		return 0, false, err
	}
	defer it.Close()
	var sum int64
	for valid := it.First(); valid; {
		if len(it.Key()) < 9 {
			return 0, false, fmt.Errorf("%w: pair key %x", ErrCorrupt, it.Key())
		}
		start := getSortable(it.Key()[1:9])
		if start > math.MaxInt64-int64(p.opts.Quantum) || start+int64(p.opts.Quantum) > now.Unix() {
			break // not ended
		}
		next := quantumKey(famPair, start+1)
		size, err := p.db.EstimateDiskUsage(quantumKey(famPair, start), next)
		if err != nil {
			return 0, false, err
		}
		if size > 0 {
			sum += int64(min(size, math.MaxInt64/2))
			limit, ok = start+1, true
		}
		if sum >= excess {
			break
		}
		valid = it.SeekGE(next)
	}
	return limit, ok, it.Error()
}

// dropBefore drops every quantum starting before limit, after raising floor to limit,
// and returns how many quanta held data.
func (p *Pebble) dropBefore(limit int64, floor *atomic.Int64) (int, error) {
	p.seal.mu.Lock()
	defer p.seal.mu.Unlock()
	for old := floor.Load(); old < limit && !floor.CompareAndSwap(old, limit); old = floor.Load() {
	}
	// Wait out the appends that checked the old floor; later ones see the new one.
	p.dropMu.Lock()
	p.dropMu.Unlock() // an empty critical section: a barrier

	if !p.enter() {
		return 0, ErrClosed
	}
	defer p.state.RUnlock()
	upper := quantumKey(famPair, limit)
	delta, quanta, oldest, err := p.countBefore(upper)
	if err != nil || quanta == 0 {
		return 0, err
	}
	b := p.db.NewBatch()
	defer b.Close()
	// The deletions start at the oldest quantum held, not at the start of the family,
	// so that successive passes lay tombstones side by side instead of nesting them.
	err = errors.Join(
		b.DeleteRange(quantumKey(famPair, oldest), upper, nil),
		b.DeleteRange(quantumKey(famUnsealed, oldest), quantumKey(famUnsealed, limit), nil),
		b.DeleteRange(quantumKey(famTombstone, oldest), quantumKey(famTombstone, limit), nil),
	)
	if !delta.zero() {
		err = errors.Join(err, b.Merge(countersKey, delta.encode(), nil))
	}
	if err == nil {
		// Like a seal, a drop need not wait for an fsync: if a crash loses it, the data
		// and its counts come back together, and the next pass drops them again.
		err = p.apply(b, pebble.NoSync)
	}
	if err != nil {
		return 0, fmt.Errorf("store: drop quanta before %d: %w", limit, err)
	}
	p.addCounters(delta)
	p.dropped.Add(int64(quanta))
	p.pairs.forgetBefore(string(upper[1:]))
	return quanta, nil
}

// countBefore sums, from the pair summaries, what the pairs with keys below upper hold
// (as negative counters), counts their distinct quanta and returns the oldest one's
// start. It seeks from one pair's summary to the next, skipping the pairs' points.
func (p *Pebble) countBefore(upper []byte) (c counters, quanta int, oldest int64, err error) {
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: []byte{famPair}, UpperBound: upper})
	if err != nil {
		return counters{}, 0, 0, err
	}
	defer it.Close()
	var last []byte
	const fixed = 8 + 20 + 1 // start, shard ID, key length - 1
	for valid := it.First(); valid; {
		k := it.Key()
		if len(k) < 1+fixed+1 || len(k) < 1+fixed+int(k[fixed])+1+1 {
			return counters{}, 0, 0, fmt.Errorf("%w: pair key %x", ErrCorrupt, k)
		}
		id := k[1 : 1+fixed+int(k[fixed])+1]
		if !bytes.Equal(id[:8], last) {
			if quanta == 0 {
				oldest = getSortable(id[:8])
			}
			quanta++
			last = append(last[:0], id[:8]...)
		}
		if k[1+len(id)] == kindSummary {
			s, err := decodeSummary(it.Value())
			if err != nil {
				return counters{}, 0, 0, fmt.Errorf("%w at key %x", err, k)
			}
			c.shards--
			c.points -= s.count
		}
		valid = it.SeekGE(pairKey(nil, id, kindEnd))
	}
	return c, quanta, oldest, it.Error()
}

// compactBefore compacts the key ranges of the quanta before limit, so that the space
// of dropped data is reclaimed now rather than whenever pebble would get to it.
func (p *Pebble) compactBefore(limit int64) error {
	if !p.enter() {
		return ErrClosed
	}
	defer p.state.RUnlock()
	for _, fam := range []byte{famPair, famUnsealed} {
		if err := p.guard(func() error { return p.db.Compact([]byte{fam}, quantumKey(fam, limit), false) }); err != nil {
			return fmt.Errorf("store: compact dropped quanta: %w", err)
		}
	}
	return nil
}
