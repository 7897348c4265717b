package httpapi

import (
	"sync"
	"sync/atomic"
)

// seriesCache remembers, across requests, the series a fast line's "measurement,tags
// field" names in a database: its key, tags and description. A request naming the
// series earlier requests named (a collector's every request) then reads no tags and
// builds no key. Entries are never wrong (the same bytes always name the same series);
// the cache starts over past maxCachedSeries.
type seriesCache struct {
	m atomic.Pointer[sync.Map] // string(db + "\x00" + line key) → *seriesProto
	n atomic.Int64
}

// seriesProto is what a new batch of a cached series starts from. Its tags are shared
// by every batch of the series and never modified.
type seriesProto struct {
	key, desc string
	tags      map[string]string
}

// maxCachedSeries bounds the series a handler's seriesCache holds (about 300 bytes each).
const maxCachedSeries = 1 << 16

func newSeriesCache() *seriesCache {
	c := &seriesCache{}
	c.m.Store(new(sync.Map))
	return c
}

func (c *seriesCache) get(k []byte) *seriesProto {
	if c == nil {
		return nil
	}
	v, ok := c.m.Load().Load(string(k))
	if !ok {
		return nil
	}
	return v.(*seriesProto)
}

func (c *seriesCache) put(k []byte, b *seriesBatch) {
	if c == nil {
		return
	}
	if c.n.Add(1) > maxCachedSeries {
		c.m.Store(new(sync.Map))
		c.n.Store(1)
	}
	c.m.Load().Store(string(k), &seriesProto{key: b.key, desc: b.desc, tags: b.tags})
}
