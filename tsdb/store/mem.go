package store

import (
	"fmt"
	"sync"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/series"
)

// shardKey identifies one series' points in one shard: 80-bit hash halves can collide
// for two series, so the full key is part of the identity.
type shardKey struct {
	ref ShardRef
	key string
}

// memKey is the key of a pair: its shard and series, whatever quantum length the
// reference carries (a pair is one pair however it is named).
func memKey(ref ShardRef, key string) shardKey {
	return shardKey{ShardRef{ID: ref.ID, Start: ref.Start}, key}
}

// Mem is a Store held in RAM, as the paper's prototype did: fast and lost on restart.
// It backs simulations and tests, and serves nodes that are told to keep nothing.
type Mem struct {
	mu     sync.RWMutex
	shards map[shardKey]*series.Points
	types  map[string]series.Type
	quanta map[string]quanta.Quantum // series' quanta as declarations recorded them
	points int64
	closed bool

	cat     memCatalog           // catalog.go
	tombs   map[shardKey][]Range // tombstones.go
	rollups memRollups           // rollups.go
}

// NewMem returns an empty in-memory store.
func NewMem() *Mem {
	return &Mem{shards: make(map[shardKey]*series.Points), types: make(map[string]series.Type),
		quanta: make(map[string]quanta.Quantum)}
}

// Append implements Appender.
func (m *Mem) Append(ref ShardRef, key string, pts series.Points) error {
	if empty, err := prepareAppend(key, &pts); empty || err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.appendLocked(ref, key, pts)
}

// AppendBatch implements BatchAppender: every entry is checked (arguments, then types)
// before any is stored.
func (m *Mem) AppendBatch(batch []PairAppend) error {
	prepared := make([]PairAppend, 0, len(batch))
	for _, a := range batch {
		if empty, err := prepareAppend(a.Key, &a.Points); err != nil {
			return err
		} else if !empty {
			prepared = append(prepared, a)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	types := map[string]series.Type{}
	for _, a := range prepared {
		t, ok := types[a.Key]
		if !ok {
			t, ok = m.types[a.Key]
		}
		if ok && t != a.Points.Type {
			return mismatch(a.Key, t, a.Points.Type)
		}
		types[a.Key] = a.Points.Type
	}
	for _, a := range prepared {
		if err := m.appendLocked(a.Ref, a.Key, a.Points); err != nil {
			return err // cannot happen: every type was checked above
		}
	}
	return nil
}

func (m *Mem) appendLocked(ref ShardRef, key string, pts series.Points) error {
	if m.closed {
		return ErrClosed
	}
	if err := m.declareLocked(key, pts.Type); err != nil {
		return err
	}
	sk := memKey(ref, key)
	old := m.shards[sk]
	if old == nil {
		cp := series.Concat(pts) // own the memory: the caller's batch may be reused
		m.shards[sk] = &cp
		m.points += int64(cp.Len())
		return nil
	}
	before := old.Len()
	var merged series.Points
	if old.T[before-1] < pts.T[0] {
		merged = series.Concat(*old, pts) // in-order arrival: the common case
	} else {
		merged = series.Merge(*old, pts)
	}
	*old = merged
	m.points += int64(merged.Len() - before)
	return nil
}

// Read implements Querier.
func (m *Mem) Read(ref ShardRef, key string, from, to int64) (series.Points, bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return series.Points{}, false, ErrClosed
	}
	p := m.shards[memKey(ref, key)]
	if p == nil {
		return series.Points{}, false, nil
	}
	// Copy out: the stored columns change under later appends.
	return series.Concat(p.Trim(from, to)), true, nil
}

// DeclareType implements Registry.
func (m *Mem) DeclareType(key string, t series.Type) (series.Type, error) {
	d, err := m.DeclareSeries(key, Decl{Type: t, NoQuantum: true})
	return d.Type, err
}

func (m *Mem) declareLocked(key string, t series.Type) error {
	have, ok := m.types[key]
	if !ok {
		m.types[key] = t
		return nil
	}
	if have != t {
		return fmt.Errorf("series %q holds %s values, not %s: %w", key, have, t, series.ErrTypeMismatch)
	}
	return nil
}

// DeclareSeries implements Registry.
func (m *Mem) DeclareSeries(key string, d Decl) (Decl, error) {
	if err := validDeclaration(key, d.Type); err != nil {
		return Decl{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return Decl{}, ErrClosed
	}
	if err := m.declareLocked(key, d.Type); err != nil {
		return Decl{Type: m.types[key]}, err
	}
	if q, ok := m.quanta[key]; ok {
		return Decl{Type: d.Type, Quantum: q}, nil
	}
	if !d.NoQuantum {
		m.quanta[key] = d.Quantum
	}
	return d, nil
}

// SeriesDecl implements Registry.
func (m *Mem) SeriesDecl(key string) (Decl, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	t, ok := m.types[key]
	q, known := m.quanta[key]
	return Decl{Type: t, Quantum: q, NoQuantum: !known}, ok
}

// SeriesType implements Registry.
func (m *Mem) SeriesType(key string) (series.Type, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	t, ok := m.types[key]
	return t, ok
}

// Stats implements Store.
func (m *Mem) Stats() Stats {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return Stats{Shards: len(m.shards), Series: len(m.types), Points: m.points}
}

// Close implements Store.
func (m *Mem) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.shards = nil
	return nil
}
