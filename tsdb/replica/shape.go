package replica

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// A measurement's shape (catalog.Shape) as this registry replica's entries give it. It
// is computed by one scan of the entries under the query's key prefix and kept until an
// entry of the store changes (store.EntriesVersioner), so that the queries of a
// dashboard, which ask for the same measurements' fields again and again, cost a map
// lookup each while nothing is written to the catalog.

// maxCachedShapes and maxCachedShapeRows bound the shapes a replica keeps and their
// fields and tag keys all told (a few MB at most); past either, it starts over.
const (
	maxCachedShapes    = 64
	maxCachedShapeRows = 32768
)

type shapeCache struct {
	mu     sync.Mutex
	shapes map[catalog.ShapeQuery]cachedShape
	rows   int // fields and tag keys of the shapes kept
}

// shapeRows is what a shape counts against maxCachedShapeRows.
func shapeRows(s catalog.Shape) int {
	n := len(s.Fields)
	for _, ks := range s.TagKeys {
		n += len(ks)
	}
	for _, vs := range s.Values {
		n += len(vs)
	}
	return n
}

type cachedShape struct {
	version uint64
	shape   catalog.Shape // shared: read only
}

func (c *shapeCache) get(q catalog.ShapeQuery, version uint64) (catalog.Shape, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.shapes[q]
	return s.shape, ok && s.version == version
}

func (c *shapeCache) put(q catalog.ShapeQuery, version uint64, s catalog.Shape) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := shapeRows(s)
	if old, ok := c.shapes[q]; ok {
		c.rows -= shapeRows(old.shape)
		delete(c.shapes, q)
	}
	if c.shapes == nil || len(c.shapes) >= maxCachedShapes || c.rows+n > maxCachedShapeRows {
		c.shapes, c.rows = make(map[catalog.ShapeQuery]cachedShape), 0
	}
	c.shapes[q] = cachedShape{version, s}
	c.rows += n
}

// shapeCheckEvery is how many entries a shape's scan reads between looks at its context.
const shapeCheckEvery = 256

// Shape implements cluster.MetaReplica. The shape answered may be shared with other
// callers: it must not be modified (catalog.Shape.Merge copies what it keeps).
func (l *Local) Shape(ctx context.Context, q catalog.ShapeQuery) (catalog.Shape, error) {
	if err := q.Validate(); err != nil {
		return catalog.Shape{}, rpc.Errorf(wire.CodeBadInput, "%v", err)
	}
	cs, err := l.catalog()
	if err != nil {
		return catalog.Shape{}, err
	}
	vs, versioned := cs.(store.EntriesVersioner)
	var version uint64
	if versioned {
		// Read before the scan: a change made during it moves the version past this one.
		version = vs.EntriesVersion()
		if s, ok := l.shapes.get(q, version); ok {
			return s, nil
		}
	}
	var (
		s      catalog.Shape
		addErr error
		n      int
	)
	// Keys are sorted: start just below the prefix, stop past the last key with it.
	err = cs.Entries(q.Prefix[:len(q.Prefix)-1], func(e catalog.Entry) bool {
		if !strings.HasPrefix(e.Key, q.Prefix) {
			return e.Key < q.Prefix
		}
		if n++; n%shapeCheckEvery == 0 {
			if addErr = ctx.Err(); addErr != nil {
				return false
			}
		}
		addErr = s.Add(q, e)
		return addErr == nil
	})
	if err = errors.Join(err, addErr); err != nil {
		if errors.Is(err, catalog.ErrShapeTooLarge) {
			return catalog.Shape{}, rpc.Errorf(wire.CodeTooLarge, "%v: list the measurement's series instead", err)
		}
		if ctx.Err() != nil {
			return catalog.Shape{}, err
		}
		return catalog.Shape{}, storeError(err)
	}
	s.HasValues = q.ValuesOf != ""
	if versioned {
		l.shapes.put(q, version, s)
	}
	return s, nil
}
