package store

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/sstable"
)

// FsckReport is what Fsck found in a stopped node's store.
type FsckReport struct {
	Tables, DamagedTables int   // table files read, and those failing a block checksum
	Pairs, DamagedPairs   int   // (shard, series) pairs read, and those that could not be read whole
	Points                int64 // points read
	Series                int   // series with a declared type
	WALBytesDropped       int64 // valid write-ahead log records after a damaged one
	Problems              []string
}

// Damaged reports whether anything was found.
func (r *FsckReport) Damaged() bool { return len(r.Problems) > 0 }

func (r *FsckReport) problem(format string, args ...any) {
	if len(r.Problems) < maxFsckProblems {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	} else if len(r.Problems) == maxFsckProblems {
		r.Problems = append(r.Problems, "… (more problems not listed)")
	}
}

// maxFsckProblems bounds the problems a report lists.
const maxFsckProblems = 1000

// Fsck verifies the store in dir, which no process may have open, without changing it:
// the write-ahead logs as a replay reads them (damage before valid records), every
// block of every table file against its checksum, the LSM tree's invariants, and every
// pair — its points decoded and counted against its summary — and every series type.
// Progress and problems go to w. It returns an error only when it could not check; the
// report says whether the store is damaged. A damaged node is best emptied (move the
// directory away) and restarted: repair refills it from its replicas.
func Fsck(dir string, w io.Writer) (*FsckReport, error) {
	r := &FsckReport{}
	if _, err := os.Stat(filepath.Join(dir, "CURRENT")); err != nil {
		return nil, fmt.Errorf("%s holds no store (no CURRENT file): %w", dir, err)
	}

	// Opening takes the store's lock first, so a running node's files are not read
	// while they change.
	o := DefaultPebbleOptions()
	o.Logger = slog.New(slog.DiscardHandler)
	po := o.pebbleOptions()
	defer po.Cache.Unref()
	po.ReadOnly = true
	db, openErr := openRecovering(dir, po)
	if errors.Is(openErr, syscall.EAGAIN) || openErr != nil && strings.Contains(openErr.Error(), "lock held") {
		return nil, fmt.Errorf("%s is in use (%v): stop the node first", dir, openErr)
	}
	if openErr == nil {
		defer db.Close()
	}
	if m := manifestDamage(dir); m != "" {
		r.problem("%s", m)
	}
	losses, err := scanWALs(dir)
	if err != nil {
		return nil, err
	}
	damaged := 0
	for _, l := range losses {
		if l.records == 0 {
			fmt.Fprintf(w, "warning: %s\n", l)
			continue
		}
		damaged++
		r.WALBytesDropped += l.bytes
		r.problem("%s by replay", l)
	}
	fmt.Fprintf(w, "write-ahead logs: %d damaged\n", damaged)

	tables, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	if err != nil {
		return nil, err
	}
	sort.Strings(tables)
	for _, path := range tables {
		r.Tables++
		if err := checkTable(path); err != nil {
			r.DamagedTables++
			r.problem("table %s: %v", filepath.Base(path), err)
		}
	}
	fmt.Fprintf(w, "tables: %d read, %d damaged\n", r.Tables, r.DamagedTables)

	if openErr != nil {
		r.problem("the store cannot be opened: %v", openErr)
		return r, nil
	}
	if err := db.CheckLevels(nil); err != nil {
		r.problem("LSM levels: %v", err)
	}
	p := &Pebble{dir: dir, opts: o, db: db, hot: newHotCache(-1)}
	if err := p.fsckPairs(r); err != nil {
		r.problem("walking the pairs stopped: %v", err)
	}
	fmt.Fprintf(w, "pairs: %d read, %d damaged, %d points; series: %d\n", r.Pairs, r.DamagedPairs, r.Points, r.Series)
	return r, nil
}

// openRecovering opens pebble, turning the panics some damage causes into errors.
func openRecovering(dir string, po *pebble.Options) (db *pebble.DB, err error) {
	defer func() {
		if rec := recover(); rec != nil {
			db, err = nil, fmt.Errorf("%v", rec)
		}
	}()
	return pebble.Open(dir, po)
}

// checkTable reads every block of one table file and checks its checksum.
func checkTable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		f.Close()
		return err
	}
	rd, err := sstable.NewReader(readable, sstable.ReaderOptions{}, sstable.Mergers{countersMerger.Name: countersMerger})
	if err != nil {
		readable.Close()
		return err
	}
	defer rd.Close()
	return rd.ValidateBlockChecksums()
}

// fsckPairs reads every pair whole and every series type.
func (p *Pebble) fsckPairs(r *FsckReport) error {
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: []byte{famPair}, UpperBound: []byte{famPair + 1}})
	if err != nil {
		return err
	}
	defer it.Close()
	for valid := it.First(); valid; {
		k := it.Key()
		if len(k) < 2 || k[len(k)-1] != kindSummary || !validPairID(k[1:len(k)-1]) {
			// Not a summary: a pair whose summary is missing, or a key of another kind
			// met while skipping. Move to the next pair.
			valid = it.Next()
			continue
		}
		id := append([]byte(nil), k[1:len(k)-1]...)
		r.Pairs++
		sum, serr := decodeSummary(it.Value())
		pts, _, rerr := p.readPair(id, math.MinInt64, math.MaxInt64)
		switch {
		case rerr != nil:
			r.DamagedPairs++
			r.problem("pair %s: %v", describePair(id), rerr)
		case serr != nil:
			r.DamagedPairs++
			r.problem("pair %s: summary: %v", describePair(id), serr)
		case int64(pts.Len()) != sum.count:
			r.DamagedPairs++
			r.problem("pair %s: %d points readable, the summary counts %d", describePair(id), pts.Len(), sum.count)
		case sum.hasStats && !statsAgree(&sum.stats, &pts):
			r.DamagedPairs++
			r.problem("pair %s: its statistics disagree with its points", describePair(id))
		}
		r.Points += int64(pts.Len())
		valid = it.SeekGE(pairKey(nil, id, kindEnd))
	}
	if err := it.Error(); err != nil {
		return err
	}
	mit, err := p.db.NewIter(&pebble.IterOptions{LowerBound: []byte{famMeta}, UpperBound: []byte{famMeta + 1}})
	if err != nil {
		return err
	}
	defer mit.Close()
	for valid := mit.First(); valid; valid = mit.Next() {
		if _, err := decodeMeta(mit.Value()); err != nil {
			r.problem("series %q: type record: %v", mit.Key()[1:], err)
			continue
		}
		r.Series++
	}
	return mit.Error()
}

// describePair names a pair for a person: series, quantum start and shard ID.
func describePair(id []byte) string {
	const fixed = 8 + 20 + 1
	if len(id) <= fixed {
		return fmt.Sprintf("%x", id)
	}
	return fmt.Sprintf("%q at quantum %d (shard %x)", id[fixed:], getSortable(id[:8]), id[8:28])
}
