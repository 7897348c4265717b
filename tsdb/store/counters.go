package store

import (
	"encoding/binary"
	"io"

	"github.com/cockroachdb/pebble"
)

// counters are the store's Stats as deltas. Every batch that changes them carries a
// merge operand on the 's' key, in the same atomic batch as the data, so the persisted
// totals match the persisted data after any crash and opening a store needs one point
// read instead of a scan. Concurrent appenders never read-modify-write the totals:
// pebble sums the operands (countersMerger) when the key is read or compacted.
type counters struct {
	shards, series, points int64
}

const countersLen = 24

func (c counters) zero() bool { return c == counters{} }

func (c counters) encode() []byte {
	b := make([]byte, 0, countersLen)
	b = binary.LittleEndian.AppendUint64(b, uint64(c.shards))
	b = binary.LittleEndian.AppendUint64(b, uint64(c.series))
	return binary.LittleEndian.AppendUint64(b, uint64(c.points))
}

func (c *counters) add(v []byte) error {
	if len(v) != countersLen {
		return errCorruptValue("counters")
	}
	c.shards += int64(binary.LittleEndian.Uint64(v))
	c.series += int64(binary.LittleEndian.Uint64(v[8:]))
	c.points += int64(binary.LittleEndian.Uint64(v[16:]))
	return nil
}

// countersMerger sums counter operands. Its name is recorded in the store's OPTIONS
// file: pebble refuses to open the store with a merger of another name, so it must
// never change.
var countersMerger = &pebble.Merger{
	Name: "tsdht.counters.v1",
	Merge: func(_, value []byte) (pebble.ValueMerger, error) {
		m := &counterMerger{}
		return m, m.sum.add(value)
	},
}

// counterMerger implements pebble.ValueMerger; addition is associative and
// commutative, so operand order does not matter.
type counterMerger struct{ sum counters }

func (m *counterMerger) MergeNewer(v []byte) error { return m.sum.add(v) }
func (m *counterMerger) MergeOlder(v []byte) error { return m.sum.add(v) }
func (m *counterMerger) Finish(bool) ([]byte, io.Closer, error) {
	return m.sum.encode(), nil, nil
}
