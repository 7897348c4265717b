package store

import (
	"bytes"
	"fmt"
	"sort"

	"github.com/tsdht/tsdht/tsdb/series"
)

// RollupStore keeps what a rollup home holds of the series it keeps rollups of
// (package tsdb/rollup, docs/rollups.md): per series one head record, and records keyed by
// (level, window start). The store treats both as opaque bytes of bounded size; the
// rollup code owns their encoding. Both stores implement it.
type RollupStore interface {
	// UpdateRollups applies u atomically: first Drop, then Delete, then Head and Put.
	// With the disk store it is durable as far as the store's sync mode promises when
	// it returns. An update over the limits (MaxRollupValue, MaxRollupUpdate) or with
	// an invalid key is refused whole, with an error saying which limit.
	UpdateRollups(u RollupUpdate) error
	// RollupHead returns the head record of key, or false if there is none.
	RollupHead(key string) ([]byte, bool, error)
	// RollupHeads calls fn on every head record, in no set order, until fn returns
	// false. fn runs with nothing of the store held and must not keep head.
	RollupHeads(fn func(key string, head []byte) bool) error
	// RollupRecords calls fn on key's records of level with from <= start < to, in
	// ascending start, until fn returns false. fn must not keep value.
	RollupRecords(key string, level uint8, from, to int64, fn func(start int64, value []byte) bool) error
}

// RollupUpdate is one atomic change of one series' rollup records.
type RollupUpdate struct {
	Key    string
	Drop   bool         // delete the head and every record of Key first
	Delete []RollupSpan // records to delete
	Head   []byte       // the new head record; nil leaves it as it is
	Put    []RollupRecord
}

// RollupSpan names key's records of Level with From <= start < To.
type RollupSpan struct {
	Level    uint8
	From, To int64
}

// RollupRecord is one record: a window's statistics, or a mark, as the rollup code
// encodes them.
type RollupRecord struct {
	Level uint8
	Start int64
	Value []byte
}

// Limits of rollup records, checked before anything is stored.
const (
	// MaxRollupValue bounds a head or record value: a window's statistics of a string
	// series hold its first and last values (series.MaxStringValueLen each).
	MaxRollupValue = 2*series.MaxStringValueLen + 256
	// MaxRollupUpdate bounds the Put and Delete entries of one update.
	MaxRollupUpdate = 1 << 16
)

func checkRollupUpdate(u *RollupUpdate) error {
	if err := series.ValidateKey(u.Key); err != nil {
		return fmt.Errorf("rollup update: %w", err)
	}
	if n := len(u.Put) + len(u.Delete); n > MaxRollupUpdate {
		return fmt.Errorf("rollup update of %q: %d records, at most %d: split it", u.Key, n, MaxRollupUpdate)
	}
	if len(u.Head) > MaxRollupValue {
		return fmt.Errorf("rollup update of %q: head of %d bytes, at most %d", u.Key, len(u.Head), MaxRollupValue)
	}
	for _, r := range u.Put {
		if len(r.Value) > MaxRollupValue {
			return fmt.Errorf("rollup update of %q: record of %d bytes, at most %d", u.Key, len(r.Value), MaxRollupValue)
		}
	}
	return nil
}

// memRollups is the memory store's rollup records; Mem's lock guards it.
type memRollups struct {
	heads   map[string][]byte
	records map[memRollupKey]map[int64][]byte
}

type memRollupKey struct {
	key   string
	level uint8
}

// UpdateRollups implements RollupStore.
func (m *Mem) UpdateRollups(u RollupUpdate) error {
	if err := checkRollupUpdate(&u); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	r := &m.rollups
	if r.heads == nil {
		r.heads = make(map[string][]byte)
		r.records = make(map[memRollupKey]map[int64][]byte)
	}
	if u.Drop {
		delete(r.heads, u.Key)
		for k := range r.records {
			if k.key == u.Key {
				delete(r.records, k)
			}
		}
	}
	for _, d := range u.Delete {
		recs := r.records[memRollupKey{u.Key, d.Level}]
		for s := range recs {
			if d.From <= s && s < d.To {
				delete(recs, s)
			}
		}
	}
	if u.Head != nil {
		r.heads[u.Key] = bytes.Clone(u.Head)
	}
	for _, p := range u.Put {
		k := memRollupKey{u.Key, p.Level}
		recs := r.records[k]
		if recs == nil {
			recs = make(map[int64][]byte)
			r.records[k] = recs
		}
		recs[p.Start] = append([]byte{}, p.Value...)
	}
	return nil
}

// RollupHead implements RollupStore.
func (m *Mem) RollupHead(key string) ([]byte, bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return nil, false, ErrClosed
	}
	h, ok := m.rollups.heads[key]
	return bytes.Clone(h), ok, nil
}

// RollupHeads implements RollupStore.
func (m *Mem) RollupHeads(fn func(key string, head []byte) bool) error {
	m.mu.RLock()
	if m.closed {
		m.mu.RUnlock()
		return ErrClosed
	}
	heads := make(map[string][]byte, len(m.rollups.heads))
	for k, h := range m.rollups.heads {
		heads[k] = h
	}
	m.mu.RUnlock()
	for k, h := range heads {
		if !fn(k, h) {
			break
		}
	}
	return nil
}

// RollupRecords implements RollupStore.
func (m *Mem) RollupRecords(key string, level uint8, from, to int64, fn func(int64, []byte) bool) error {
	m.mu.RLock()
	if m.closed {
		m.mu.RUnlock()
		return ErrClosed
	}
	type rec struct {
		start int64
		v     []byte
	}
	var out []rec
	for s, v := range m.rollups.records[memRollupKey{key, level}] {
		if from <= s && s < to {
			out = append(out, rec{s, v})
		}
	}
	m.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].start < out[j].start })
	for _, r := range out {
		if !fn(r.start, r.v) {
			break
		}
	}
	return nil
}

var (
	_ RollupStore = (*Mem)(nil)
	_ RollupStore = (*Pebble)(nil)
)
