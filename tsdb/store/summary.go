package store

// Summary is what a store knows of a (shard, series) pair without reading its points.
type Summary struct {
	Count      int64 // points held
	MinT, MaxT int64 // first and last timestamp; meaningless when Count is 0
}

// Summary returns the pair's summary from the cache or one point read, and whether the
// store holds the pair at all. The time-series server answers whole-quantum digest
// requests with it, so a replica confirms a shard without reading its points.
func (p *Pebble) Summary(ref ShardRef, key string) (Summary, bool, error) {
	if err := p.settle(); err != nil {
		return Summary{}, false, err
	}
	if !p.enter() {
		return Summary{}, false, ErrClosed
	}
	defer p.state.RUnlock()
	id := pairID(ref, key)
	s, err := p.summary(id, string(id))
	if err != nil {
		return Summary{}, false, err
	}
	return Summary{Count: s.count, MinT: s.minT, MaxT: s.maxT}, s.count > 0, nil
}

// Summary implements the same for the memory store.
func (m *Mem) Summary(ref ShardRef, key string) (Summary, bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return Summary{}, false, ErrClosed
	}
	pts := m.shards[memKey(ref, key)]
	if pts == nil || pts.Len() == 0 {
		return Summary{}, false, nil
	}
	return Summary{Count: int64(pts.Len()), MinT: pts.T[0], MaxT: pts.T[pts.Len()-1]}, true, nil
}
