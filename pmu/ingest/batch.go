package ingest

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tsdht/tsdht/tsdb/series"
)

// Batch is the samples of one flush interval, per series: what one spool record holds
// and what the sender writes to the cluster (one Put per series).
type Batch struct {
	Keys   []string
	Points []series.Points
	index  map[string]int
}

// Len returns the number of samples.
func (b *Batch) Len() int {
	n := 0
	for i := range b.Points {
		n += b.Points[i].Len()
	}
	return n
}

func (b *Batch) slot(key string) *series.Points {
	if b.index == nil {
		b.index = map[string]int{}
	}
	i, ok := b.index[key]
	if !ok {
		i = len(b.Keys)
		b.index[key] = i
		b.Keys = append(b.Keys, key)
		b.Points = append(b.Points, series.Points{})
	}
	return &b.Points[i]
}

func (b *Batch) addFloat(key string, t int64, v float64) { b.slot(key).AppendFloat(t, v) }
func (b *Batch) addInt(key string, t int64, v int64)     { b.slot(key).AppendInt(t, v) }

const batchVersion = 1

// AppendBatch encodes b: version byte, uvarint series count, then per series its key
// (uvarint length, bytes) and its points in tsdb's packed form (uvarint length, bytes).
func AppendBatch(dst []byte, b *Batch) []byte {
	dst = append(dst, batchVersion)
	dst = binary.AppendUvarint(dst, uint64(len(b.Keys)))
	var packed []byte
	for i, k := range b.Keys {
		dst = binary.AppendUvarint(dst, uint64(len(k)))
		dst = append(dst, k...)
		packed = series.AppendPacked(packed[:0], &b.Points[i])
		dst = binary.AppendUvarint(dst, uint64(len(packed)))
		dst = append(dst, packed...)
	}
	return dst
}

var errBatch = errors.New("ingest: corrupt batch record")

// DecodeBatch decodes a record AppendBatch made. Every length is checked against the
// bytes that remain before anything is allocated.
func DecodeBatch(rec []byte) (*Batch, error) {
	if len(rec) < 2 || rec[0] != batchVersion {
		return nil, fmt.Errorf("%w: unknown version", errBatch)
	}
	rec = rec[1:]
	n, k := binary.Uvarint(rec)
	if k <= 0 || n > uint64(len(rec)) {
		return nil, fmt.Errorf("%w: series count", errBatch)
	}
	rec = rec[k:]
	b := &Batch{Keys: make([]string, 0, n), Points: make([]series.Points, 0, n)}
	take := func(what string) ([]byte, error) {
		l, k := binary.Uvarint(rec)
		if k <= 0 || l > uint64(len(rec)-k) {
			return nil, fmt.Errorf("%w: %s length", errBatch, what)
		}
		out := rec[k : k+int(l)]
		rec = rec[k+int(l):]
		return out, nil
	}
	for i := uint64(0); i < n; i++ {
		key, err := take("key")
		if err != nil {
			return nil, err
		}
		packed, err := take("points")
		if err != nil {
			return nil, err
		}
		pts, err := series.DecodePacked(packed)
		if err != nil {
			return nil, fmt.Errorf("%w: series %q: %v", errBatch, key, err)
		}
		b.Keys = append(b.Keys, string(key))
		b.Points = append(b.Points, pts)
	}
	if len(rec) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errBatch, len(rec))
	}
	return b, nil
}
