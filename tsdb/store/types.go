package store

import (
	"fmt"
	"sync"

	"github.com/tsdht/tsdht/tsdb/series"
)

// typeCache keeps series types in memory so that an append checks its type without a
// read, and arbitrates first declarations: the first caller to insert a series' entry
// decides its type, before any batch is committed, so two first writers of different
// types racing cannot both succeed. The lock is never held across I/O.
type typeCache struct {
	mu        sync.Mutex
	m         map[string]*typeEntry
	max       int
	evictions uint64 // bumped on every eviction: a reader's load may be stale
}

type typeEntry struct {
	t series.Type
	// durable: the type is in the store. Until then every writer of the series writes
	// the metadata record in its own batch, so whichever commits first records it.
	durable bool
	// counted: some in-flight writer carries the series' +1 in the counters. Released
	// if its commit fails, so that the next writer counts it instead.
	counted bool
}

// typeClaim is what a writer must add to its batch.
type typeClaim struct {
	writeMeta bool // write the metadata record
	count     bool // add 1 to the series counter
}

func newTypeCache(max int) *typeCache {
	return &typeCache{m: make(map[string]*typeEntry), max: max}
}

// validDeclaration checks a DeclareType call: a valid key and a concrete value type
// (recording Unknown would make every later write a mismatch).
func validDeclaration(key string, t series.Type) error {
	if err := series.ValidateKey(key); err != nil {
		return err
	}
	if t != series.Float && t != series.Int && t != series.String {
		return fmt.Errorf("series %q: cannot declare value type %s", key, t)
	}
	return nil
}

func mismatch(key string, have, want series.Type) error {
	return fmt.Errorf("series %q holds %s values, not %s: %w", key, have, want, series.ErrTypeMismatch)
}

// claim checks that t may be written to series key, declaring it if the series is new.
// load reads the stored type. On a mismatch it returns the series' type and an error
// wrapping series.ErrTypeMismatch.
func (c *typeCache) claim(key string, t series.Type, load func(string) (series.Type, bool, error)) (typeClaim, series.Type, error) {
	for {
		c.mu.Lock()
		if e := c.m[key]; e != nil {
			// No defer: in a loop, each would be an allocation on every append.
			if e.t != t {
				c.mu.Unlock()
				return typeClaim{}, e.t, mismatch(key, e.t, t)
			}
			cl := typeClaim{writeMeta: !e.durable, count: !e.durable && !e.counted}
			if cl.count {
				e.counted = true
			}
			c.mu.Unlock()
			return cl, t, nil
		}
		evictions := c.evictions
		c.mu.Unlock()

		stored, ok, err := load(key)
		if err != nil {
			return typeClaim{}, series.Unknown, err
		}

		c.mu.Lock()
		if c.m[key] != nil || c.evictions != evictions {
			// Another caller declared the series meanwhile, or an entry that was durable
			// after our load began may have been evicted: look again.
			c.mu.Unlock()
			continue
		}
		if ok {
			c.insert(key, &typeEntry{t: stored, durable: true})
			c.mu.Unlock()
			if stored != t {
				return typeClaim{}, stored, mismatch(key, stored, t)
			}
			return typeClaim{}, t, nil
		}
		c.insert(key, &typeEntry{t: t, counted: true})
		c.mu.Unlock()
		return typeClaim{writeMeta: true, count: true}, t, nil
	}
}

// settle records the outcome of a batch that carried cl.
func (c *typeCache) settle(key string, cl typeClaim, committed bool) {
	if !cl.writeMeta {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[key]
	if e == nil {
		return // made durable by another writer, then evicted
	}
	switch {
	case committed:
		e.durable = true
	case cl.count:
		// The type stays reserved in memory (the writer asked for it); the next writer
		// of the series writes the metadata and counts the series.
		e.counted = false
	}
}

// lookup returns the cached type of key.
func (c *typeCache) lookup(key string) (series.Type, bool, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[key]; e != nil {
		return e.t, true, c.evictions
	}
	return series.Unknown, false, c.evictions
}

// durableType returns key's type if the cache holds it as stored: an append of that
// type needs no type write, so it may wait in the write buffer.
func (c *typeCache) durableType(key string) (series.Type, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[key]; e != nil && e.durable {
		return e.t, true
	}
	return series.Unknown, false
}

// remember caches a type read from the store, unless the cache changed since lookup.
func (c *typeCache) remember(key string, t series.Type, evictions uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[key] == nil && c.evictions == evictions {
		c.insert(key, &typeEntry{t: t, durable: true})
	}
}

// forget drops key's entry: its type was deleted.
func (c *typeCache) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; ok {
		delete(c.m, key)
		c.evictions++
	}
}

// insert adds an entry, evicting a durable one if the cache is full. Entries not yet
// durable are reservations and stay; there are at most as many as writers in flight.
func (c *typeCache) insert(key string, e *typeEntry) {
	if len(c.m) >= c.max {
		for k, old := range c.m { // map order is random: a random durable victim
			if old.durable {
				delete(c.m, k)
				c.evictions++
				break
			}
		}
	}
	c.m[key] = e
}

// prepareAppend checks an append's arguments and sorts its points; empty reports that
// there is nothing to store.
func prepareAppend(key string, pts *series.Points) (empty bool, err error) {
	if err := series.ValidateKey(key); err != nil {
		return false, err
	}
	if err := pts.Valid(); err != nil {
		return false, err
	}
	if pts.Len() == 0 {
		return true, nil
	}
	pts.Normalize()
	return false, nil
}
