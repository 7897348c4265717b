// Package backup owns tsdht's backup format and the two programs over it: Backup,
// which copies a consistent cut of a cluster's series, catalog included, into a
// directory (a second run into the same directory writes only what changed), and
// Restore, which writes a backup into any cluster, re-placed by that cluster's IDs,
// or only verifies it. It speaks to a cluster through the thin client's calls
// (the Cluster interface), never through a node's store: a backup holds points, not
// pebble's files, so it restores onto other node IDs, replication factors and
// quantum layouts. docs/backup.md describes the format.
package backup

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/tsdht/tsdht/tsdb/series"
)

// FormatVersion is the version of the data files and of the manifest this build
// writes; it reads this version only.
const FormatVersion = 1

// fileMagic opens every data file, followed by one byte: FormatVersion.
const fileMagic = "TSDHTBAK"

// headerLen is the length of a data file's header.
const headerLen = len(fileMagic) + 1

// MaxBlockPoints bounds the points of one block: a quantum holding more is split into
// several blocks (Backup) and a block claiming more is refused before anything is
// allocated for it (decodeBlock).
const MaxBlockPoints = 1 << 20

// MaxBlockBytes bounds a block's packed points, checked before they are read.
const MaxBlockBytes = 64 << 20

// MaxFileBytes is the size past which Backup starts a new data file.
const MaxFileBytes = 256 << 20

// castagnoli is the CRC-32C table each block's checksum uses.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Block is the points of one series in one quantum, or part of one, as a data file
// holds them: the unit a backup writes, skips when unchanged, and restores.
type Block struct {
	Key     string
	Start   int64 // the quantum's start, UNIX seconds
	Quantum int64 // the series' quantum length, seconds
	// From and To bound the time the block covers, [From, To) in ns: the quantum cut
	// by the backup's range and cut. Every point lies inside.
	From, To int64
	Points   series.Points
}

// appendFileHeader appends a data file's header.
func appendFileHeader(dst []byte) []byte {
	return append(append(dst, fileMagic...), FormatVersion)
}

// checkFileHeader checks the header at the start of b (at least headerLen bytes).
func checkFileHeader(b []byte) error {
	if len(b) < headerLen || string(b[:len(fileMagic)]) != fileMagic {
		return errors.New("not a tsdht backup data file (no TSDHTBAK header)")
	}
	if v := b[len(fileMagic)]; v != FormatVersion {
		return fmt.Errorf("data file of format version %d; this build reads version %d: restore it with the tsdht that wrote it", v, FormatVersion)
	}
	return nil
}

// appendBlock appends the encoding of b: key, quantum start and length, the range
// covered, the point count, the points packed (series.AppendPacked), and a CRC-32C of
// all of it.
func appendBlock(dst []byte, b *Block) []byte {
	start := len(dst)
	dst = binary.AppendUvarint(dst, uint64(len(b.Key)))
	dst = append(dst, b.Key...)
	dst = binary.AppendVarint(dst, b.Start)
	dst = binary.AppendUvarint(dst, uint64(b.Quantum))
	dst = binary.AppendVarint(dst, b.From)
	dst = binary.AppendVarint(dst, b.To)
	dst = binary.AppendUvarint(dst, uint64(b.Points.Len()))
	packed := series.AppendPacked(nil, &b.Points)
	dst = binary.AppendUvarint(dst, uint64(len(packed)))
	dst = append(dst, packed...)
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// byteCounter is an io.ByteReader that keeps the bytes it read, for the checksum.
type byteCounter struct {
	r   *bufio.Reader
	buf []byte
}

func (c *byteCounter) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.buf = append(c.buf, b)
	}
	return b, err
}

func (c *byteCounter) read(n int) ([]byte, error) {
	at := len(c.buf)
	c.buf = append(c.buf, make([]byte, n)...)
	if _, err := io.ReadFull(c.r, c.buf[at:]); err != nil {
		return nil, err
	}
	return c.buf[at:], nil
}

// readBlock decodes the next block of r. It returns io.EOF at a clean end, and an
// error naming what is wrong otherwise; every length is checked against its limit
// before anything is allocated for it.
func readBlock(r *bufio.Reader) (Block, int, error) {
	c := &byteCounter{r: r}
	var b Block
	n, err := binary.ReadUvarint(c)
	if err == io.EOF {
		return b, 0, io.EOF
	}
	if err != nil || n < 1 || n > series.MaxKeyLen {
		return b, 0, corrupt(err, "series key length %d (1..%d)", n, series.MaxKeyLen)
	}
	key, err := c.read(int(n))
	if err != nil {
		return b, 0, corrupt(err, "series key")
	}
	b.Key = string(key)
	if b.Start, err = binary.ReadVarint(c); err != nil {
		return b, 0, corrupt(err, "quantum start")
	}
	q, err := binary.ReadUvarint(c)
	if err != nil || q < 1 || q > 1<<40 {
		return b, 0, corrupt(err, "quantum length %d", q)
	}
	b.Quantum = int64(q)
	if b.From, err = binary.ReadVarint(c); err != nil {
		return b, 0, corrupt(err, "range start")
	}
	if b.To, err = binary.ReadVarint(c); err != nil || b.To < b.From {
		return b, 0, corrupt(err, "range end %d before start %d", b.To, b.From)
	}
	count, err := binary.ReadUvarint(c)
	if err != nil || count > MaxBlockPoints {
		return b, 0, corrupt(err, "point count %d (at most %d)", count, MaxBlockPoints)
	}
	plen, err := binary.ReadUvarint(c)
	if err != nil || plen > MaxBlockBytes {
		return b, 0, corrupt(err, "packed length %d (at most %d)", plen, MaxBlockBytes)
	}
	packed, err := c.read(int(plen))
	if err != nil {
		return b, 0, corrupt(err, "%d bytes of packed points", plen)
	}
	var sum [4]byte
	if _, err := io.ReadFull(r, sum[:]); err != nil {
		return b, 0, corrupt(err, "block checksum")
	}
	if got, want := crc32.Checksum(c.buf, castagnoli), binary.LittleEndian.Uint32(sum[:]); got != want {
		return b, 0, fmt.Errorf("block of %q at quantum %d: checksum %08x, recorded %08x: the block is damaged", b.Key, b.Start, got, want)
	}
	if b.Points, err = series.DecodePacked(packed); err != nil {
		return b, 0, fmt.Errorf("block of %q at quantum %d: %w", b.Key, b.Start, err)
	}
	if b.Points.Len() != int(count) {
		return b, 0, fmt.Errorf("block of %q at quantum %d: %d points, header says %d", b.Key, b.Start, b.Points.Len(), count)
	}
	if k := b.Points.Len(); k > 0 && (b.Points.T[0] < b.From || b.Points.T[k-1] >= b.To) {
		return b, 0, fmt.Errorf("block of %q at quantum %d: points outside its range [%d, %d)", b.Key, b.Start, b.From, b.To)
	}
	return b, len(c.buf) + len(sum), nil
}

// corrupt names a block field that could not be decoded.
func corrupt(err error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return fmt.Errorf("block: bad %s: %v", msg, err)
	}
	if err != nil {
		return fmt.Errorf("block: %s cut short: the file is truncated", msg)
	}
	return fmt.Errorf("block: bad %s", msg)
}
