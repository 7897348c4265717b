// Package spool is a bounded, append-only, on-disk queue of records: the
// store-and-forward buffer of the PMU ingester. Records are appended to segment files,
// each framed with its length and a CRC-32C, read back in order, and acknowledged; a
// segment whose records are all acknowledged is deleted.
//
// Guarantees (see Config.NoSync for the weaker mode):
//   - Append returns only after the record is written and fsynced: a record Append
//     accepted survives kill -9 and power loss.
//   - On Open, each segment is scanned; a torn or corrupt tail (a crash mid-append) is
//     cut at the last whole record and reported in Stats.TornBytes — never replayed.
//   - Records come back in append order. The acknowledgement position is kept in a
//     small file without fsync: after a crash, records acknowledged since the last
//     write of that file come back again (at least once; the caller's writes must be
//     idempotent, as tsdht's are).
//   - Total size is bounded by Config.MaxBytes; Append at the limit fails with ErrFull
//     and counts the refusal in Stats.Refused — the caller logs and counts the drop.
//   - Memory is bounded by one record: the reader reads one record at a time.
package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Errors.
var (
	// ErrFull: the record would take the spool past MaxBytes; it was not written.
	// Drop it (and count the drop) or retry once the reader has caught up.
	ErrFull = errors.New("spool full")
	// ErrTooLarge: a record larger than MaxRecord; split it.
	ErrTooLarge = errors.New("spool record too large")
	// ErrClosed: the spool was closed.
	ErrClosed = errors.New("spool closed")
)

const (
	recHeader = 8 // u32 length, u32 CRC-32C of the payload
	segSuffix = ".seg"
	ackFile   = "ack"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Config configures a spool. The zero value of every field is the default.
type Config struct {
	// MaxBytes bounds the total size of the segment files; 0 means 256 MiB.
	MaxBytes int64
	// SegmentBytes is the size at which a new segment is started; 0 means
	// min(4 MiB, MaxBytes/8). Space is reclaimed a whole segment at a time.
	SegmentBytes int64
	// MaxRecord bounds one record; 0 means min(16 MiB, MaxBytes/2).
	MaxRecord int
	// NoSync skips the fsync after each Append: a process crash loses nothing (the
	// kernel has the bytes) but a power cut can lose the last seconds.
	NoSync bool
}

func (c Config) withDefaults() Config {
	if c.MaxBytes == 0 {
		c.MaxBytes = 256 << 20
	}
	if c.SegmentBytes == 0 {
		c.SegmentBytes = min(4<<20, c.MaxBytes/8)
	}
	if c.MaxRecord == 0 {
		c.MaxRecord = int(min(16<<20, c.MaxBytes/2))
	}
	return c
}

// Validate reports settings the spool cannot work with.
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.MaxBytes < 64<<10 {
		return fmt.Errorf("spool size limit %d bytes: at least 64 KiB", c.MaxBytes)
	}
	if c.SegmentBytes < 4<<10 || c.SegmentBytes > c.MaxBytes {
		return fmt.Errorf("spool segment size %d bytes: between 4 KiB and the size limit", c.SegmentBytes)
	}
	if c.MaxRecord < 1 || int64(c.MaxRecord) > c.MaxBytes {
		return fmt.Errorf("spool record limit %d bytes: between 1 and the size limit", c.MaxRecord)
	}
	return nil
}

// Stats are the spool's counters.
type Stats struct {
	Bytes     int64 // size of the segment files
	Records   int64 // records not yet acknowledged
	Appended  int64 // records accepted since Open
	Refused   int64 // Appends refused with ErrFull since Open
	TornBytes int64 // bytes cut from torn or corrupt tails at Open
}

// Pos is a position in the spool: the byte after a record.
type Pos struct {
	Seg uint64
	Off int64
}

type segment struct {
	seq  uint64
	size int64 // bytes of whole records
	recs int64
}

// Spool is an open spool. Append and Next may be called from different goroutines.
type Spool struct {
	dir string
	cfg Config

	mu     sync.Mutex
	cond   *sync.Cond
	segs   []*segment // ascending; the last one is appended to
	w      *os.File
	read   Pos      // the next record to hand out
	rf     *os.File // segment being read
	rfSeq  uint64
	ack    Pos
	stats  Stats
	closed bool
}

func segName(seq uint64) string { return fmt.Sprintf("%020d%s", seq, segSuffix) }

// Open opens (creating if needed) the spool in dir, cutting torn tails.
// Report reports what was cut; it may be nil.
func Open(dir string, cfg Config, report func(msg string)) (*Spool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if report == nil {
		report = func(string) {}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("spool directory: %w", err)
	}
	s := &Spool{dir: dir, cfg: cfg}
	s.cond = sync.NewCond(&s.mu)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var seqs []uint64
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, segSuffix) {
			continue
		}
		seq, err := strconv.ParseUint(strings.TrimSuffix(name, segSuffix), 10, 64)
		if err != nil {
			continue
		}
		seqs = append(seqs, seq)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	s.ack = s.loadAck()
	for _, seq := range seqs {
		if seq < s.ack.Seg {
			os.Remove(filepath.Join(dir, segName(seq)))
			continue
		}
		seg, torn, err := scan(filepath.Join(dir, segName(seq)), cfg.MaxRecord)
		if err != nil {
			return nil, err
		}
		if torn > 0 {
			s.stats.TornBytes += torn
			report(fmt.Sprintf("spool segment %s: cut %d bytes of a torn or corrupt tail after %d whole records", segName(seq), torn, seg.recs))
		}
		seg.seq = seq
		s.segs = append(s.segs, seg)
		s.stats.Bytes += seg.size
	}
	if len(s.segs) == 0 || s.ack.Seg > s.segs[0].seq {
		s.ack = Pos{}
	}
	if len(s.segs) > 0 && s.ack.Seg == s.segs[0].seq && s.ack.Off > s.segs[0].size {
		s.ack.Off = 0 // an ack beyond what survived: replay the segment
	}
	if len(s.segs) > 0 {
		s.read = Pos{Seg: s.segs[0].seq}
		if s.ack.Seg == s.segs[0].seq {
			s.read.Off = s.ack.Off
		}
	}
	for _, g := range s.segs {
		s.stats.Records += g.recs
	}
	if s.read.Off > 0 {
		// Records before the ack position in the first segment are done.
		n, err := countRecords(filepath.Join(dir, segName(s.read.Seg)), s.read.Off)
		if err != nil {
			return nil, err
		}
		s.stats.Records -= n
	}
	next := uint64(1)
	if len(s.segs) > 0 {
		next = s.segs[len(s.segs)-1].seq + 1
		if s.segs[len(s.segs)-1].size == 0 { // reuse an empty last segment
			next--
			s.segs = s.segs[:len(s.segs)-1]
		}
	}
	if err := s.startSegment(next); err != nil {
		return nil, err
	}
	if len(s.segs) == 1 {
		s.read = Pos{Seg: next}
	}
	return s, nil
}

// scan validates the records of one segment file and truncates it after the last
// whole, checksum-correct record.
func scan(path string, maxRecord int) (*segment, int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	seg := &segment{}
	var hdr [recHeader]byte
	buf := []byte(nil)
	for {
		if _, err := f.ReadAt(hdr[:], seg.size); err != nil {
			break
		}
		n := int64(binary.LittleEndian.Uint32(hdr[:]))
		// A zero length is never written: a zero-filled tail (what a power cut can leave
		// on ext4) must not read as empty records.
		if n == 0 || n > int64(maxRecord) || seg.size+recHeader+n > fi.Size() {
			break
		}
		if int64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := f.ReadAt(buf, seg.size+recHeader); err != nil {
			break
		}
		if crc32.Checksum(buf, castagnoli) != binary.LittleEndian.Uint32(hdr[4:]) {
			break
		}
		seg.size += recHeader + n
		seg.recs++
	}
	torn := fi.Size() - seg.size
	if torn > 0 {
		if err := f.Truncate(seg.size); err != nil {
			return nil, 0, fmt.Errorf("cut torn tail of %s: %w", path, err)
		}
		if err := f.Sync(); err != nil {
			return nil, 0, err
		}
	}
	return seg, torn, nil
}

func countRecords(path string, upTo int64) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var hdr [recHeader]byte
	var off, n int64
	for off < upTo {
		if _, err := f.ReadAt(hdr[:], off); err != nil {
			return n, err
		}
		off += recHeader + int64(binary.LittleEndian.Uint32(hdr[:]))
		n++
	}
	return n, nil
}

func (s *Spool) loadAck() Pos {
	b, err := os.ReadFile(filepath.Join(s.dir, ackFile))
	if err != nil {
		return Pos{}
	}
	var p Pos
	if _, err := fmt.Sscanf(string(b), "%d %d", &p.Seg, &p.Off); err != nil {
		return Pos{}
	}
	return p
}

func (s *Spool) startSegment(seq uint64) error {
	if s.w != nil {
		if err := s.w.Close(); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(filepath.Join(s.dir, segName(seq)), os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("spool segment: %w", err)
	}
	if !s.cfg.NoSync {
		if d, err := os.Open(s.dir); err == nil {
			d.Sync()
			d.Close()
		}
	}
	s.w = f
	s.segs = append(s.segs, &segment{seq: seq})
	return nil
}

// Append writes one record, fsyncs it (unless NoSync) and makes it readable.
func (s *Spool) Append(rec []byte) error {
	if len(rec) == 0 {
		return fmt.Errorf("spool: empty record")
	}
	if len(rec) > s.cfg.MaxRecord {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(rec), s.cfg.MaxRecord)
	}
	n := int64(recHeader + len(rec))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.stats.Bytes+n > s.cfg.MaxBytes {
		s.stats.Refused++
		return fmt.Errorf("%w: %d of %d bytes used", ErrFull, s.stats.Bytes, s.cfg.MaxBytes)
	}
	last := s.segs[len(s.segs)-1]
	if last.size > 0 && last.size+n > s.cfg.SegmentBytes {
		if err := s.startSegment(last.seq + 1); err != nil {
			return err
		}
		last = s.segs[len(s.segs)-1]
	}
	buf := make([]byte, recHeader, n)
	binary.LittleEndian.PutUint32(buf, uint32(len(rec)))
	binary.LittleEndian.PutUint32(buf[4:], crc32.Checksum(rec, castagnoli))
	buf = append(buf, rec...)
	if _, err := s.w.Write(buf); err != nil {
		// Cut whatever part was written so the segment stays whole.
		s.w.Truncate(last.size)
		return fmt.Errorf("spool append: %w", err)
	}
	if !s.cfg.NoSync {
		if err := s.w.Sync(); err != nil {
			return fmt.Errorf("spool fsync: %w", err)
		}
	}
	last.size += n
	last.recs++
	s.stats.Bytes += n
	s.stats.Records++
	s.stats.Appended++
	s.cond.Broadcast()
	return nil
}

// Next returns the next record in append order, waiting while there is none, and the
// position to Ack once the record is safely elsewhere. Records handed out but not
// acknowledged are handed out again only after a reopen. stop, when closed, makes
// Next return ErrClosed.
func (s *Spool) Next(stop <-chan struct{}) ([]byte, Pos, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if stop != nil {
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-stop:
				s.mu.Lock()
				s.cond.Broadcast()
				s.mu.Unlock()
			case <-done:
			}
		}()
	}
	for {
		if s.closed {
			return nil, Pos{}, ErrClosed
		}
		select {
		case <-stop:
			return nil, Pos{}, ErrClosed
		default:
		}
		seg := s.segment(s.read.Seg)
		if seg == nil {
			// The read segment is gone (acknowledged and deleted): move to the next one.
			if nx := s.after(s.read.Seg); nx != nil {
				s.read = Pos{Seg: nx.seq}
				continue
			}
			s.cond.Wait()
			continue
		}
		if s.read.Off < seg.size {
			rec, next, err := s.readAt(seg)
			if err != nil {
				return nil, Pos{}, err
			}
			s.read = next
			return rec, next, nil
		}
		if nx := s.after(seg.seq); nx != nil {
			s.read = Pos{Seg: nx.seq}
			continue
		}
		s.cond.Wait()
	}
}

func (s *Spool) segment(seq uint64) *segment {
	for _, g := range s.segs {
		if g.seq == seq {
			return g
		}
	}
	return nil
}

func (s *Spool) after(seq uint64) *segment {
	for _, g := range s.segs {
		if g.seq > seq {
			return g
		}
	}
	return nil
}

func (s *Spool) readAt(seg *segment) ([]byte, Pos, error) {
	if s.rf == nil || s.rfSeq != seg.seq {
		if s.rf != nil {
			s.rf.Close()
		}
		f, err := os.Open(filepath.Join(s.dir, segName(seg.seq)))
		if err != nil {
			return nil, Pos{}, err
		}
		s.rf, s.rfSeq = f, seg.seq
	}
	var hdr [recHeader]byte
	if _, err := s.rf.ReadAt(hdr[:], s.read.Off); err != nil {
		return nil, Pos{}, fmt.Errorf("spool read: %w", err)
	}
	n := int64(binary.LittleEndian.Uint32(hdr[:]))
	if n > int64(s.cfg.MaxRecord) || s.read.Off+recHeader+n > seg.size {
		return nil, Pos{}, fmt.Errorf("spool read: record of %d bytes at %s:%d overruns the segment", n, segName(seg.seq), s.read.Off)
	}
	rec := make([]byte, n)
	if _, err := io.ReadFull(io.NewSectionReader(s.rf, s.read.Off+recHeader, n), rec); err != nil {
		return nil, Pos{}, fmt.Errorf("spool read: %w", err)
	}
	if crc32.Checksum(rec, castagnoli) != binary.LittleEndian.Uint32(hdr[4:]) {
		return nil, Pos{}, fmt.Errorf("spool read: checksum mismatch at %s:%d", segName(seg.seq), s.read.Off)
	}
	return rec, Pos{Seg: seg.seq, Off: s.read.Off + recHeader + n}, nil
}

// Ack records that every record up to pos is safely elsewhere; segments wholly before
// pos are deleted. Call it once per record Next returned, in order.
func (s *Spool) Ack(pos Pos) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.ack = pos
	s.stats.Records--
	for len(s.segs) > 1 && s.segs[0].seq < pos.Seg {
		g := s.segs[0]
		if err := os.Remove(filepath.Join(s.dir, segName(g.seq))); err != nil && !os.IsNotExist(err) {
			return err
		}
		if s.rf != nil && s.rfSeq == g.seq {
			s.rf.Close()
			s.rf = nil
		}
		s.stats.Bytes -= g.size
		s.segs = s.segs[1:]
	}
	// A fully read segment that is not the one being appended to goes as well.
	if len(s.segs) > 1 && s.segs[0].seq == pos.Seg && pos.Off >= s.segs[0].size {
		g := s.segs[0]
		os.Remove(filepath.Join(s.dir, segName(g.seq)))
		if s.rf != nil && s.rfSeq == g.seq {
			s.rf.Close()
			s.rf = nil
		}
		s.stats.Bytes -= g.size
		s.segs = s.segs[1:]
	}
	tmp := filepath.Join(s.dir, ackFile+".tmp")
	if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%d %d\n", pos.Seg, pos.Off)), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(s.dir, ackFile))
}

// Stats returns the counters.
func (s *Spool) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Close closes the files; records not acknowledged stay for the next Open.
func (s *Spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.cond.Broadcast()
	if s.rf != nil {
		s.rf.Close()
	}
	return s.w.Close()
}

// ReadAll returns every record of a spool directory that is not acknowledged, in order,
// without modifying anything (torn tails are skipped, not cut). Tools and tests use it
// to see what a stopped ingester left behind.
func ReadAll(dir string) ([][]byte, error) {
	ack := (&Spool{dir: dir}).loadAck()
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var seqs []uint64
	for _, e := range ents {
		if seq, err := strconv.ParseUint(strings.TrimSuffix(e.Name(), segSuffix), 10, 64); err == nil && strings.HasSuffix(e.Name(), segSuffix) {
			seqs = append(seqs, seq)
		}
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	var out [][]byte
	for _, seq := range seqs {
		if seq < ack.Seg {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, segName(seq)))
		if err != nil {
			return nil, err
		}
		off := int64(0)
		if seq == ack.Seg {
			off = ack.Off
		}
		for off+recHeader <= int64(len(b)) {
			n := int64(binary.LittleEndian.Uint32(b[off:]))
			if n == 0 || off+recHeader+n > int64(len(b)) {
				break
			}
			rec := b[off+recHeader : off+recHeader+n]
			if crc32.Checksum(rec, castagnoli) != binary.LittleEndian.Uint32(b[off+4:]) {
				break
			}
			out = append(out, rec)
			off += recHeader + n
		}
	}
	return out, nil
}
