package store

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/bloom"
	"github.com/cockroachdb/pebble/vfs"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/chunk"
)

// SyncMode says when an acknowledged Append reaches stable storage.
type SyncMode uint8

const (
	// SyncAlways makes every Append and DeclareType durable before it returns: the
	// batch is in the write-ahead log and fsynced, so an acknowledged point survives a
	// process kill and a power cut (on storage that honours fsync; eMMC does). Each call
	// waits for an fsync, but concurrent callers share one: pebble's commit pipeline
	// groups every batch queued behind an fsync in progress into the next one. An
	// append (or a catalog merge) waits for its fsync after releasing its pair's (or the
	// catalog's) lock, so the next writer of the same pair joins that fsync instead of
	// queueing behind it; its points are readable from the commit on, an fsync before
	// the append returns. A lone writer gets no grouping, so it should send batches,
	// not single points.
	SyncAlways SyncMode = iota
	// SyncBatch returns once the batch is in the write buffer (buffer.go) or pebble's
	// in-process WAL buffer and the memtable (readable at once either way); a background
	// loop drains the write buffer into pebble, then flushes and fsyncs the WAL, every
	// PebbleOptions.SyncInterval while there were writes. A process kill or a power cut
	// loses at most the writes acknowledged in the last SyncInterval plus one fsync
	// time; what survives is always a prefix of the acknowledged writes, never one with
	// holes.
	SyncBatch
	// SyncNone never fsyncs (pebble.NoSync). Appends wait in the write buffer for up
	// to PebbleOptions.BufferWait (buffer.go), then reach pebble. Measured with pebble
	// v1.1.5 (see TestKillLosesUnsyncedTail): a NoSync commit leaves its WAL record in
	// pebble's in-process 32 KiB block buffer, which reaches the file only when the block
	// fills, at a memtable rotation or at Close, so even a process kill (not only a power
	// cut) loses the write buffer and the unflushed tail: up to ~32 KiB of WAL, for a
	// trickle of writes hours old. A power cut loses in addition whatever the kernel had
	// not written back. A clean Close loses nothing. What survives is a prefix of the
	// acknowledged writes.
	SyncNone
)

// String returns "always", "batch" or "none", the names ParseSyncMode accepts.
func (m SyncMode) String() string {
	switch m {
	case SyncAlways:
		return "always"
	case SyncBatch:
		return "batch"
	case SyncNone:
		return "none"
	}
	return fmt.Sprintf("syncmode(%d)", uint8(m))
}

// ParseSyncMode parses "always", "batch" or "none", as a --sync flag would give it.
func ParseSyncMode(s string) (SyncMode, error) {
	for _, m := range []SyncMode{SyncAlways, SyncBatch, SyncNone} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("unknown sync mode %q: want always, batch or none", s)
}

// PebbleOptions configures OpenPebble. Zero fields take the defaults of
// DefaultPebbleOptions, so PebbleOptions{Sync: SyncBatch} is a complete configuration.
type PebbleOptions struct {
	// Sync is the durability of an acknowledged write; see SyncMode. Default SyncAlways.
	Sync SyncMode
	// RefuseWALLoss makes OpenPebble fail with an error wrapping ErrWALLoss, before
	// pebble replays anything, when a write-ahead log is damaged before records that
	// replay would drop (wal.go): for a node no other replica can refill. Without it
	// the loss is logged at ERROR and counted in Stats.WALBytesDropped, and the store
	// opens with what replay kept.
	RefuseWALLoss bool
	// SyncInterval is how often SyncBatch fsyncs the WAL: the most acknowledged writing
	// time a crash can lose in that mode. Default 100 ms.
	SyncInterval time.Duration
	// WriteBuffer is how many bytes of acknowledged appends SyncBatch and SyncNone may
	// hold in memory before they reach pebble (buffer.go): appends to series whose type
	// the store already knows wait there and reach pebble together, one block and one
	// summary per pair, instead of a pebble batch each. Every other call (reads,
	// statistics, seals, deletes, repair) first moves the buffer into pebble, so nothing
	// reads around it. Default 1 MiB; a full buffer is drained by the append that finds
	// it full. Negative turns the buffer off. SyncAlways never buffers.
	WriteBuffer int64
	// BufferWait is, with SyncNone, how long an acknowledged append may wait in the
	// write buffer before the buffer is drained into pebble. Default 1 s. SyncBatch
	// drains the buffer before every WAL sync instead, so its guarantee stays
	// SyncInterval.
	BufferWait time.Duration

	// Quantum is the cluster's quantum length; the store needs it to know when a
	// quantum has ended (ShardRef carries only its start). Default quanta.DefaultQuantum.
	Quantum quanta.Quantum
	// SealGrace is how long after a quantum's end the store waits for late points
	// before sealing it. Late points are still accepted after that, at the cost of a
	// re-seal. 0 means one quantum, at least 10 s: sealed that soon, most of a
	// quantum's blocks are replaced while still in the memtable and never reach a table
	// file, which keeps the store's garbage (and the flash it costs) small.
	SealGrace time.Duration
	// SealInterval is how often the background sealer looks for quanta to seal. A
	// negative value disables it (tests call SealNow). 0 means one quantum.
	SealInterval time.Duration
	// ChunkMaxPoints splits a sealed (shard, series) into chunks of at most this many
	// points (at most chunk.MaxPoints), so that a short read of a long quantum decodes
	// little. Default 2048.
	ChunkMaxPoints int

	// CacheSize is pebble's block cache in bytes. Default 16 MiB; `tsdht node` sizes it
	// from the memory it may use (CacheSizeFor).
	CacheSize int64
	// MemTableSize is the size of one pebble memtable in bytes; up to two are held in
	// RAM at once. Default 4 MiB. Every flushed memtable is a table that compactions
	// merge into the stored data, and every append rewrites its pair's summary: the
	// larger the memtable, the more of those rewrites die in it before a flush, and the
	// fewer tables compactions merge, so larger memtables cost less CPU and flash a
	// point (docs/http.md, "Memtables", says how to measure it). The WAL on disk does
	// not grow with it the way pebble's defaults make it (walfiles.go): it holds the
	// records of the memtables not yet flushed, at most about 2 × MemTableSize, nothing
	// preallocated or kept for reuse, and nothing once writes stop (idleflush.go); while
	// a stream flows, its share of the store's bytes depends on where in a memtable's
	// filling it is (BenchmarkPMUBytesPerPoint).
	MemTableSize int64
	// L0CompactionThreshold is how many flushed tables pile up before pebble compacts
	// them into the level below. Each such compaction rewrites the newest table below
	// (writes go to the newest quanta, at the end of the key space), so a larger
	// batch halves the flash written per point. Default 8.
	L0CompactionThreshold int
	// NoIdleCompaction turns off the compaction, once writes stop, of the key ranges
	// where seals replaced blocks that had already reached a table (idlecompact.go).
	// Left on, a node that took a bulk load of history comes back to the size of its
	// sealed data within a sealer pass or two of the load's end, at the cost of
	// rewriting that range once; off, the replaced blocks stay on disk until pebble's
	// own compactions reach them, which on an idle node may be never.
	NoIdleCompaction bool
	// TargetFileSize is the size of pebble's table files, which bounds what a
	// compaction of new data rewrites. Default 512 KiB.
	TargetFileSize int64
	// MaxOpenFiles bounds pebble's open table files. Default 256.
	MaxOpenFiles int
	// HotCacheSize bounds, in bytes, the decoded sealed chunks kept for repeated reads
	// of recent history (the hot tier). 0 takes the default, 8 MiB; negative disables.
	HotCacheSize int64
	// TypeCacheEntries bounds the series types kept in memory, so that appends need not
	// read the series' metadata. Default 65536 (a few MiB).
	TypeCacheEntries int
	// PairCacheEntries bounds the per-(shard, series) summaries kept in memory (point
	// count and time span), which let an in-order append skip the duplicate check.
	// Default 65536.
	PairCacheEntries int

	// Retention is how long the store keeps a quantum after it ended: a background
	// loop drops older quanta whole (EnforceRetention), and a write into such a
	// quantum is refused with an error wrapping ErrExpired, since storing it would
	// bring expired data back. 0 keeps everything.
	Retention time.Duration
	// MaxDisk is the disk budget in bytes (DiskUsage: tables, WAL, manifest). Above it
	// the background loop drops the oldest ended quanta, then compacts their range so
	// that the space is reclaimed (EnforceDiskBudget); a pass aims 1/16 under the
	// budget. 0 is unlimited. The budget includes the engine's fixed overhead, which
	// dropping data cannot reclaim: the WAL of the memtables not yet flushed, at most
	// about 2 × MemTableSize (8 MiB at the default; walfiles.go: pebble's preallocation
	// and reuse of WAL files are off). Between two passes (EnforceInterval) the usage
	// grows by what is written. A budget below the overhead drops every ended quantum
	// and says so in the log.
	MaxDisk int64
	// EnforceInterval is how often the background loop enforces Retention and MaxDisk.
	// A negative value disables the loop (tests call EnforceRetention and
	// EnforceDiskBudget). 0 means one quantum.
	EnforceInterval time.Duration
	// DiskReserve is the free space, in bytes, the store leaves on its filesystem for
	// the engine's own work (WAL rotation, flushes, compactions, manifest): an append,
	// a declaration or a seal that would eat into it is refused with an error wrapping
	// ErrDiskFull. Pebble cannot survive running out of space itself (see disk.go), so
	// this is what keeps a full disk a refused write instead of a hung or dead node. It
	// must exceed the largest compaction's output; 0 takes the default, the larger of
	// 64 MiB and 16 × MemTableSize (on a 4 GB eMMC, under 2 %).
	DiskReserve int64
	// NoDiskReserve turns the free-space check off (DiskReserve is then ignored), for
	// filesystems whose free space means nothing to this store.
	NoDiskReserve bool

	// Logger receives pebble's messages and the background loops' errors. Nil
	// discards them.
	Logger *slog.Logger
}

// DefaultPebbleOptions returns the options sized for a BeagleBone Black (512 MB RAM,
// eMMC): about 16 MiB of block cache, 2 × 4 MiB of memtables and 8 MiB of hot chunks.
func DefaultPebbleOptions() PebbleOptions {
	return PebbleOptions{
		Sync:                  SyncAlways,
		SyncInterval:          100 * time.Millisecond,
		WriteBuffer:           1 << 20,
		BufferWait:            time.Second,
		Quantum:               quanta.Quantum(quanta.DefaultQuantum / time.Second),
		ChunkMaxPoints:        2048,
		CacheSize:             16 << 20,
		MemTableSize:          4 << 20,
		L0CompactionThreshold: 8,
		TargetFileSize:        512 << 10,
		MaxOpenFiles:          256,
		HotCacheSize:          8 << 20,
		TypeCacheEntries:      1 << 16,
		PairCacheEntries:      1 << 16,
	}
}

// MaxAutoCacheSize is the largest block cache CacheSizeFor gives.
const MaxAutoCacheSize = 128 << 20

// CacheSizeFor returns the block cache for a process that may use budget bytes of
// memory (0: unknown): a 32nd of it, at least the default CacheSize (what a 512 MB
// board gets, and what an unknown budget gets) and at most MaxAutoCacheSize. A read of
// many series scans more blocks than a board's cache holds; a host with memory to
// spare keeps them.
func CacheSizeFor(budget int64) int64 {
	return min(max(budget/32, DefaultPebbleOptions().CacheSize), MaxAutoCacheSize)
}

// withDefaults returns o with its zero fields set to the defaults.
func (o PebbleOptions) withDefaults() PebbleOptions {
	d := DefaultPebbleOptions()
	if o.SyncInterval == 0 {
		o.SyncInterval = d.SyncInterval
	}
	if o.WriteBuffer == 0 {
		o.WriteBuffer = d.WriteBuffer
	}
	if o.BufferWait == 0 {
		o.BufferWait = d.BufferWait
	}
	if o.Quantum == 0 {
		o.Quantum = d.Quantum
	}
	if o.SealGrace == 0 {
		o.SealGrace = max(o.Quantum.Duration(), 10*time.Second)
	}
	if o.SealInterval == 0 {
		o.SealInterval = o.Quantum.Duration()
	}
	if o.ChunkMaxPoints == 0 {
		o.ChunkMaxPoints = d.ChunkMaxPoints
	}
	o.ChunkMaxPoints = min(o.ChunkMaxPoints, chunk.MaxPoints)
	if o.CacheSize == 0 {
		o.CacheSize = d.CacheSize
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = d.MemTableSize
	}
	if o.L0CompactionThreshold == 0 {
		o.L0CompactionThreshold = d.L0CompactionThreshold
	}
	if o.TargetFileSize == 0 {
		o.TargetFileSize = d.TargetFileSize
	}
	if o.MaxOpenFiles == 0 {
		o.MaxOpenFiles = d.MaxOpenFiles
	}
	if o.HotCacheSize == 0 {
		o.HotCacheSize = d.HotCacheSize
	}
	if o.TypeCacheEntries == 0 {
		o.TypeCacheEntries = d.TypeCacheEntries
	}
	if o.PairCacheEntries == 0 {
		o.PairCacheEntries = d.PairCacheEntries
	}
	if o.EnforceInterval == 0 {
		o.EnforceInterval = o.Quantum.Duration()
	}
	if o.DiskReserve == 0 {
		o.DiskReserve = max(64<<20, 16*o.MemTableSize)
	}
	if o.NoDiskReserve {
		o.DiskReserve = 0 // the space guard's "off"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Validate reports options that cannot work, naming the field; zero fields are valid
// (they take the defaults).
func (o PebbleOptions) Validate() error {
	var errs []error
	if o.Sync > SyncNone {
		errs = append(errs, fmt.Errorf("unknown sync mode %d", o.Sync))
	}
	if o.Quantum < 0 {
		errs = append(errs, errors.New("quantum must be at least 1 s"))
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"sync interval", int64(o.SyncInterval)}, {"buffer wait", int64(o.BufferWait)}, {"seal grace", int64(o.SealGrace)},
		{"chunk size", int64(o.ChunkMaxPoints)}, {"cache size", o.CacheSize}, {"memtable size", o.MemTableSize},
		{"open files", int64(o.MaxOpenFiles)}, {"type cache", int64(o.TypeCacheEntries)},
		{"pair cache", int64(o.PairCacheEntries)}, {"retention", int64(o.Retention)},
		{"disk budget", o.MaxDisk}, {"disk reserve", o.DiskReserve},
		{"L0 compaction threshold", int64(o.L0CompactionThreshold)}, {"target file size", o.TargetFileSize},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s %d: must not be negative (0 takes the default)", f.name, f.v))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("store: options: %w", err)
	}
	return nil
}

// pebbleOptions translates o for pebble. The caller owns the returned cache reference
// and must Unref it once pebble.Open has taken its own.
func (o PebbleOptions) pebbleOptions() *pebble.Options {
	po := &pebble.Options{
		Comparer:     wholeKeyComparer,
		Cache:        pebble.NewCache(o.CacheSize),
		MemTableSize: uint64(o.MemTableSize),
		MaxOpenFiles: o.MaxOpenFiles,
		Merger:       countersMerger,
		// New stores take the newest on-disk format this pebble knows.
		FormatMajorVersion: pebble.FormatNewest,
		// One compaction at a time: the board has a single core, and ingest must not
		// starve behind background work.
		MaxConcurrentCompactions: func() int { return 1 },
		Logger:                   pebbleLogger{o.Logger},
		EventListener:            o.eventListener(),
		// The WAL on disk holds what it must and no more (walfiles.go).
		FS:      noPreallocFS{vfs.Default},
		Cleaner: noRecycleCleaner{},
	}
	// Bloom filters make the point lookups of metadata and per-pair summaries cheap.
	po.Levels = make([]pebble.LevelOptions, 7)
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	po.L0CompactionThreshold = o.L0CompactionThreshold
	po.L0StopWritesThreshold = max(12, 2*o.L0CompactionThreshold)
	for i := range po.Levels {
		po.Levels[i].TargetFileSize = o.TargetFileSize
	}
	return po
}

// wholeKeyComparer is pebble's default comparer, of the same name and order (a store
// written without it opens with it, and the other way round), with a Split that makes
// every key its own prefix. The tables' bloom filters hold whole keys with or without
// it; with it they also serve an iterator's SeekPrefixGE (lookupMostlyAbsent), not
// only a Get.
var wholeKeyComparer = func() *pebble.Comparer {
	c := *pebble.DefaultComparer
	c.Split = func(k []byte) int { return len(k) }
	return &c
}()

// eventListener reports pebble's trouble: background errors (a flush or compaction
// that failed, for instance for want of space, and which pebble retries at once, so
// they are reported at most every 30 s with a count) and slow disk operations.
func (o PebbleOptions) eventListener() *pebble.EventListener {
	var (
		mu         sync.Mutex
		last       time.Time
		suppressed int
	)
	l := o.Logger
	return &pebble.EventListener{
		BackgroundError: func(err error) {
			mu.Lock()
			defer mu.Unlock()
			if time.Since(last) < 30*time.Second {
				suppressed++
				return
			}
			l.Error("pebble: background error (retried)", "err", err.Error(), "suppressed", suppressed)
			last, suppressed = time.Now(), 0
		},
		DiskSlow: func(info pebble.DiskSlowInfo) {
			l.Warn("pebble: slow disk operation", "info", info.String())
		},
	}
}

// pebbleLogger routes pebble's log into slog.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Info("pebble: " + fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("pebble: " + fmt.Sprintf(format, args...))
}

// Fatalf is called by pebble on an unrecoverable internal error; like pebble's own
// logger, it does not return.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := "pebble: " + fmt.Sprintf(format, args...)
	p.l.Error(msg)
	panic(msg)
}
