package store

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble"
)

// Rollup family of the pebble store (keys.go has the others):
//
//	'r' ‖ len(key)−1 ‖ key ‖ 0x00                      → head record
//	'r' ‖ len(key)−1 ‖ key ‖ 0x01 ‖ level ‖ start      → record (start sortable, keys.go)
//
// A series' rollups are one contiguous key range (dropping a series is one range
// deletion), and a level's windows are sorted by start (a read of a day of minutes is
// one seek and a scan of 1,440 keys). The family sorts after 'p', so rollup writes do
// not widen the spans of the tables flushed with fresh points.
const (
	famRollup        = 'r'
	rollupKindHead   = 0x00
	rollupKindRecord = 0x01
)

func rollupPrefix(key string) []byte {
	b := make([]byte, 0, 2+len(key)+2+8)
	b = append(b, famRollup, byte(len(key)-1))
	return append(b, key...)
}

func rollupHeadKey(key string) []byte { return append(rollupPrefix(key), rollupKindHead) }

func rollupRecordKey(key string, level uint8, start int64) []byte {
	return putSortable(append(rollupPrefix(key), rollupKindRecord, level), start)
}

// UpdateRollups implements RollupStore: one batch, committed with the store's sync mode.
func (p *Pebble) UpdateRollups(u RollupUpdate) (err error) {
	if err := checkRollupUpdate(&u); err != nil {
		return err
	}
	if !p.enter() {
		return ErrClosed
	}
	defer p.state.RUnlock()
	if err := errors.Join(p.failure(), p.space.check()); err != nil {
		return fmt.Errorf("store: rollups of %q: %w", u.Key, err)
	}
	b := p.db.NewBatch()
	defer b.Close()
	if u.Drop {
		pre := rollupPrefix(u.Key)
		err = errors.Join(err, b.DeleteRange(pre, prefixEnd(pre), nil))
	}
	for _, d := range u.Delete {
		if d.From < d.To {
			err = errors.Join(err, b.DeleteRange(rollupRecordKey(u.Key, d.Level, d.From), rollupRecordKey(u.Key, d.Level, d.To), nil))
		}
	}
	if u.Head != nil {
		err = errors.Join(err, b.Set(rollupHeadKey(u.Key), u.Head, nil))
	}
	for _, r := range u.Put {
		err = errors.Join(err, b.Set(rollupRecordKey(u.Key, r.Level, r.Start), r.Value, nil))
	}
	if err == nil && !b.Empty() {
		err = p.commitLater(b)
	}
	if err == nil {
		err = p.durable()
	}
	if err != nil {
		return fmt.Errorf("store: rollups of %q: %w", u.Key, err)
	}
	return nil
}

// RollupHead implements RollupStore.
func (p *Pebble) RollupHead(key string) ([]byte, bool, error) {
	if !p.enter() {
		return nil, false, ErrClosed
	}
	defer p.state.RUnlock()
	v, closer, err := p.db.Get(rollupHeadKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer closer.Close()
	return append([]byte{}, v...), true, nil
}

// RollupHeads implements RollupStore: it seeks from one series' head to the next, a
// batch of walkBatch heads per iterator.
func (p *Pebble) RollupHeads(fn func(key string, head []byte) bool) error {
	from := []byte{famRollup}
	for {
		keys, heads, next, err := p.rollupHeadBatch(from)
		if err != nil {
			return err
		}
		for i := range keys {
			if !fn(keys[i], heads[i]) {
				return nil
			}
		}
		if next == nil {
			return nil
		}
		from = next
	}
}

func (p *Pebble) rollupHeadBatch(from []byte) (keys []string, heads [][]byte, next []byte, err error) {
	if !p.enter() {
		return nil, nil, nil, ErrClosed
	}
	defer p.state.RUnlock()
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: from, UpperBound: []byte{famRollup + 1}})
	if err != nil {
		return nil, nil, nil, err
	}
	defer it.Close()
	for valid := it.First(); valid; {
		k := it.Key()
		if len(k) < 3 || len(k) < 2+int(k[1])+1+1 {
			return nil, nil, nil, fmt.Errorf("%w: rollup key %x", ErrCorrupt, k)
		}
		key := string(k[2 : 2+int(k[1])+1])
		if len(keys) == walkBatch {
			return keys, heads, rollupPrefix(key), nil
		}
		if k[2+len(key)] == rollupKindHead {
			keys = append(keys, key)
			heads = append(heads, append([]byte{}, it.Value()...))
		}
		end := prefixEnd(rollupPrefix(key))
		if end == nil {
			break
		}
		valid = it.SeekGE(end)
	}
	return keys, heads, nil, it.Error()
}

// RollupRecords implements RollupStore, a batch of walkBatch records per iterator.
func (p *Pebble) RollupRecords(key string, level uint8, from, to int64, fn func(int64, []byte) bool) error {
	type rec struct {
		start int64
		v     []byte
	}
	batch := make([]rec, 0, walkBatch)
	for from < to {
		batch = batch[:0]
		err := func() error {
			if !p.enter() {
				return ErrClosed
			}
			defer p.state.RUnlock()
			it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: rollupRecordKey(key, level, from), UpperBound: rollupRecordKey(key, level, to)})
			if err != nil {
				return err
			}
			defer it.Close()
			for valid := it.First(); valid && len(batch) < walkBatch; valid = it.Next() {
				batch = append(batch, rec{keyTime(it.Key()), append([]byte{}, it.Value()...)})
			}
			return it.Error()
		}()
		if err != nil {
			return err
		}
		for _, r := range batch {
			if !fn(r.start, r.v) {
				return nil
			}
		}
		if len(batch) < walkBatch || batch[len(batch)-1].start == to-1 {
			return nil
		}
		from = batch[len(batch)-1].start + 1
	}
	return nil
}
