package store

// Pairs calls fn for every (shard, series) the store holds, in no particular order,
// until fn returns false. fn runs without the store's lock held, on a snapshot of the
// pairs, so it may call back into the store.
func (m *Mem) Pairs(fn func(ref ShardRef, key string) bool) error {
	m.mu.RLock()
	if m.closed {
		m.mu.RUnlock()
		return ErrClosed
	}
	keys := make([]shardKey, 0, len(m.shards))
	for sk := range m.shards {
		keys = append(keys, sk)
	}
	m.mu.RUnlock()
	for _, sk := range keys {
		if !fn(sk.ref, sk.key) {
			break
		}
	}
	return nil
}

// Delete drops one series' points in one shard.
func (m *Mem) Delete(ref ShardRef, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	sk := memKey(ref, key)
	if p := m.shards[sk]; p != nil {
		m.points -= int64(p.Len())
		delete(m.shards, sk)
	}
	return nil
}
