// Package store owns a node's local shard storage: the points of each (shard, series)
// sorted by time, the per-series metadata that fixes a series' value type, the records
// a rollup home keeps (rollups.go), the interface the time-series server uses to reach
// them, whatever engine sits underneath, and what the disk engine keeps and for how
// long: retention by age, a disk budget, and refused writes instead of a dead node when
// the disk is full.
package store

import (
	"errors"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/series"
)

// ShardRef names a shard and the quantum it covers. Start lets an engine seal, compress
// and expire whole quanta without decoding shard IDs.
type ShardRef struct {
	ID    quanta.ID
	Start int64 // quantum start, UNIX seconds
	// Q is the quantum's length, the series' own (Decl.Quantum); 0 is the store's
	// (PebbleOptions.Quantum, the cluster's). The sealer waits for the quantum's end.
	Q quanta.Quantum
}

// Decl is what a registry replica records of a series at its first write: the value
// type and the quantum length, both fixed from then on.
type Decl struct {
	Type series.Type
	// Quantum is the series' quantum length; 0 means the cluster's.
	Quantum quanta.Quantum
	// NoQuantum says the store learnt the type from an append, not from a declaration,
	// so it does not know the series' quantum: ask the other registry replicas.
	NoQuantum bool
}

// Appender adds points to shards.
type Appender interface {
	// Append stores a batch of points of one series into one shard. The batch need not
	// be sorted; a timestamp already stored takes the new value. Points of a type other
	// than the series' type in this store are refused with series.ErrTypeMismatch, and
	// nothing of the batch is stored. When Append returns nil the points are readable,
	// and durable as far as the engine promises.
	Append(ref ShardRef, key string, pts series.Points) error
}

// PairAppend is one (shard, series) pair's points in an AppendBatch.
type PairAppend struct {
	Ref    ShardRef
	Key    string
	Points series.Points
}

// BatchAppender stores the points of several pairs at once: what a replica does with a
// grouped write request, one engine commit (one WAL record) for the whole group where
// Append would pay one per pair. Both stores implement it.
type BatchAppender interface {
	// AppendBatch stores every pair's points as Append would, all or nothing: if one
	// pair is refused (invalid input, series.ErrTypeMismatch, ErrExpired, ErrDiskFull)
	// nothing of the batch is stored and the error names that pair. A pair may appear
	// more than once; where two of its entries hold one timestamp the later entry's
	// value wins, as two Appends in that order would leave it. Counts, statistics and
	// set hashes end exactly as after one Append per entry.
	AppendBatch(batch []PairAppend) error
}

// Querier reads points back.
type Querier interface {
	// Read returns the points of series key in the shard with from <= t < to, sorted by
	// time. held reports whether the store holds any point of that series in that shard
	// (before trimming): a store that never received the shard answers held=false, which
	// a reader must not mistake for "the shard is empty".
	Read(ref ShardRef, key string, from, to int64) (pts series.Points, held bool, err error)
}

// Registry fixes the value type of each series: the first declaration wins.
type Registry interface {
	// DeclareType records t as the series' type if it has none and returns the series'
	// type. If another type was recorded first, it returns that type and an error
	// wrapping series.ErrTypeMismatch.
	DeclareType(key string, t series.Type) (series.Type, error)
	// SeriesType returns the series' type, or false if this store has never seen it.
	SeriesType(key string) (series.Type, bool)
	// DeclareSeries is DeclareType that also records the series' quantum if this store
	// has none for it (Decl.NoQuantum); it returns what the store holds afterwards.
	DeclareSeries(key string, d Decl) (Decl, error)
	// SeriesDecl returns what the store holds of a series, or false if it has never
	// seen it.
	SeriesDecl(key string) (Decl, bool)
}

// Store is a node's local storage.
type Store interface {
	Appender
	Querier
	Registry
	Analyzer
	// Stats reports what the store holds.
	Stats() Stats
	// Close releases the store; no call may follow.
	Close() error
}

// Stats summarises a store's contents.
type Stats struct {
	Shards int   // (shard, series) pairs held
	Series int   // distinct series with a declared type
	Points int64 // points held

	// The disk and its policies; zero for a store in memory.
	DiskBytes     int64         // bytes the store's files take on disk
	Retention     time.Duration // quanta older than this are dropped; 0 keeps everything
	MaxDisk       int64         // disk budget in bytes: the oldest quanta go first; 0 is unlimited
	OldestQuantum int64         // start of the oldest quantum held, UNIX seconds; 0 if empty
	DroppedQuanta int64         // quanta dropped by retention or the disk budget since the store opened

	// Damage found since the store opened: reads that met a block failing its checksum or
	// not decoding (each also logged with the file or key and the range), and what the
	// WAL replay at open could not read back. Zero for a store in memory.
	Corruptions     int64
	WALBytesDropped int64 // bytes of valid WAL records found after the point where replay stopped

	// Flash wear, since the store opened. FlashBytesWritten counts every byte the
	// engine wrote to the device: WAL records, flushed tables, compacted tables (the
	// seals' and folds' rewrites reach the device that way too). AppendedPoints counts
	// the new points stored. FlashBytesWritten / AppendedPoints is what a point costs
	// the flash; divided by DiskBytes / Points (what a point occupies) it is the write
	// amplification: how many times each stored byte was written. Both are 0 for a
	// store in memory.
	FlashBytesWritten int64
	AppendedPoints    int64

	// The write buffer (--sync batch and none): appends that waited in it, and the
	// commits that brought them to the engine. Their ratio is how many appends share a
	// commit. Zero without a buffer.
	BufferedAppends int64
	BufferDrains    int64
}

// Counts returns the counting part of s (Shards, Series, Points): what two stores
// holding the same data agree on, whatever their engines and disks.
func (s Stats) Counts() Stats {
	return Stats{Shards: s.Shards, Series: s.Series, Points: s.Points}
}

// ErrClosed is returned by calls on a closed store.
var ErrClosed = errors.New("store is closed")

// ErrExpired is wrapped by the error of a write into a quantum the store has dropped,
// or would drop at once, under its retention or its disk budget: storing it would bring
// expired data back. The error's text names the policy.
var ErrExpired = errors.New("quantum expired")

// ErrDiskFull is wrapped, together with syscall.ENOSPC, by the error of a write refused
// because the store's filesystem is (nearly) full. Reads keep working; writes work
// again once space is freed, unless the error says the engine itself failed (then
// after a restart).
var ErrDiskFull = errors.New("disk full")
