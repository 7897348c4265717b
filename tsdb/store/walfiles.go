package store

import (
	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
)

// What the write-ahead log keeps on disk.
//
// Left to itself, pebble v1.1.5 gives every WAL file 1.1 × MemTableSize of disk
// blocks up front (fallocate), and keeps up to three finished WAL files, full size, to
// reuse for the next ones (its log recycler). Both are a fixed cost in memtable sizes,
// whatever the data: with 2 MiB memtables, 1.78 bytes a point of an hour of 24 PMU
// channels (BenchmarkPMUBytesPerPoint), as much as the data itself. The store turns
// both off, so that the WAL on disk is what it holds: the records of the memtables
// not yet flushed, and nothing once they are. Reuse only spares the first fsyncs of a
// new WAL file an update of the file's size; preallocation only spares the file system
// some extent allocations.

// noPreallocFS makes Preallocate a no-op on the files pebble writes (only WAL files
// are preallocated).
type noPreallocFS struct{ vfs.FS }

func (fs noPreallocFS) Create(name string) (vfs.File, error) {
	f, err := fs.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return noPreallocFile{f}, nil
}

func (fs noPreallocFS) ReuseForWrite(oldname, newname string) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname)
	if err != nil {
		return nil, err
	}
	return noPreallocFile{f}, nil
}

type noPreallocFile struct{ vfs.File }

// Preallocate does nothing: the file takes the blocks its writes need.
func (noPreallocFile) Preallocate(offset, length int64) error { return nil }

// noRecycleCleaner deletes obsolete files, as pebble.DeleteCleaner does, and in
// addition stops pebble from keeping finished WAL files for reuse: pebble recycles no
// log when its Cleaner needs the files' contents, which it tells by an unexported
// method of pebble.ArchiveCleaner. The struct takes that method from ArchiveCleaner
// (embedded one level deeper) and Clean and String from DeleteCleaner, whose
// shallower methods win. TestWALNotRecycled checks that pebble sees it so.
type noRecycleCleaner struct {
	pebble.DeleteCleaner
	archiveMark
}

type archiveMark struct{ pebble.ArchiveCleaner }
