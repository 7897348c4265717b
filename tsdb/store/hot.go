package store

import (
	"container/list"
	"sync"

	"github.com/tsdht/tsdht/tsdb/series"
)

// hotCache is the hot tier: an LRU of decoded sealed chunks, bounded in bytes, so that
// the controllers re-reading the last minutes of a series skip the decoding. Entries
// are keyed by chunk key and generation: a re-seal writes a new generation, so a stale
// entry can never be returned, it just ages out.
type hotCache struct {
	mu    sync.Mutex
	max   int64
	size  int64
	order *list.List // front: most recently used *hotEntry
	m     map[hotKey]*list.Element
}

type hotKey struct {
	key string // chunk key
	gen uint64
}

type hotEntry struct {
	k    hotKey
	pts  series.Points // shared by readers: never modified
	size int64
}

func newHotCache(max int64) *hotCache {
	return &hotCache{max: max, order: list.New(), m: make(map[hotKey]*list.Element)}
}

func (c *hotCache) get(k hotKey) (series.Points, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el := c.m[k]
	if el == nil {
		return series.Points{}, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*hotEntry).pts, true
}

func (c *hotCache) put(k hotKey, p series.Points) {
	size := pointsSize(p) + int64(len(k.key)) + 64
	if size > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[k] != nil {
		return
	}
	c.m[k] = c.order.PushFront(&hotEntry{k: k, pts: p, size: size})
	c.size += size
	for c.size > c.max {
		old := c.order.Remove(c.order.Back()).(*hotEntry)
		delete(c.m, old.k)
		c.size -= old.size
	}
}

// pointsSize estimates the memory a decoded batch holds.
func pointsSize(p series.Points) int64 {
	n := int64(p.Len())
	size := 16 * n // timestamp and value, or timestamp and string header
	for _, s := range p.S {
		size += 8 + int64(len(s))
	}
	return size
}
