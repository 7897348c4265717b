// Package quanta owns the arithmetic of time quanta and the frozen layout of shard IDs.
//
// A series' history is cut into fixed quanta of Q whole seconds. Each (series, quantum)
// pair is one shard whose 160-bit ID is built from SHA-1 halves of the quantum identifier
// and of the series key, in one of two orders (QFI or KFI), or is the whole SHA-1 of the
// two together (HFI). Everything here is a pure function: every node and client must
// compute the same IDs, forever. The same holds for KeyID (a series' registry record) and
// TagID (a tag pair's postings).
package quanta

import (
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// IDLen is the length of a shard ID in bytes (160 bits).
const IDLen = 20

// DefaultQuantum is the quantum length used when none is configured.
const DefaultQuantum = 10 * time.Second

// ID is a 160-bit shard ID.
type ID [IDLen]byte

// String returns the ID as 40 lowercase hex digits.
func (id ID) String() string { return hex.EncodeToString(id[:]) }

// ParseID parses 40 hex digits.
func ParseID(s string) (ID, error) {
	var id ID
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != IDLen {
		return id, fmt.Errorf("shard ID %q: want 40 hex digits", s)
	}
	copy(id[:], b)
	return id, nil
}

// Format is the order in which the two hash halves are laid out in a shard ID.
type Format uint8

const (
	// QFI (Quanta-First ID) = H(quantum)[0:10] ‖ H(key)[0:10]: a series' shards spread over the cluster.
	QFI Format = iota + 1
	// KFI (Key-First ID) = H(key)[0:10] ‖ H(quantum)[0:10]: a series' shards stay on one neighbourhood.
	KFI
	// HFI (Hashed ID) = H(quantum ‖ 0x00 ‖ key), all 160 bits: every (series, quantum)
	// placed independently, spreading a cluster's ingest across series and across time.
	// The 0x00 cannot occur in a quantum identifier, so no two (quantum, key) pairs
	// hash the same input.
	HFI
)

// Formats lists every shard ID layout, in the order of their values.
var Formats = []Format{QFI, KFI, HFI}

// String returns "qfi", "kfi" or "hfi".
func (f Format) String() string {
	switch f {
	case QFI:
		return "qfi"
	case KFI:
		return "kfi"
	case HFI:
		return "hfi"
	}
	return fmt.Sprintf("format(%d)", uint8(f))
}

// Valid reports whether f is one of the known layouts.
func (f Format) Valid() bool { return f >= QFI && f <= HFI }

// ParseFormat accepts "qfi", "kfi" or "hfi" (case-sensitive, as on the command line).
func ParseFormat(s string) (Format, error) {
	switch s {
	case "qfi":
		return QFI, nil
	case "kfi":
		return KFI, nil
	case "hfi":
		return HFI, nil
	}
	return 0, fmt.Errorf("unknown ID format %q: want qfi, kfi or hfi", s)
}

// Quantum is a quantum length in whole seconds (>= 1).
type Quantum int64

// NewQuantum validates a duration as a quantum length: a whole number of seconds, at least 1 s.
func NewQuantum(d time.Duration) (Quantum, error) {
	if d < time.Second || d%time.Second != 0 {
		return 0, fmt.Errorf("quantum %v: must be a whole number of seconds, at least 1s", d)
	}
	return Quantum(d / time.Second), nil
}

// Duration returns the quantum length as a time.Duration.
func (q Quantum) Duration() time.Duration { return time.Duration(q) * time.Second }

// nanos is the quantum length in nanoseconds.
func (q Quantum) nanos() int64 { return int64(q) * 1e9 }

// Start returns the start, in UNIX seconds, of the quantum holding timestamp t (ns),
// flooring toward −∞ so that negative timestamps land in the quantum before zero.
func (q Quantum) Start(t int64) int64 {
	n := q.nanos()
	s := t / n
	if t%n != 0 && t < 0 {
		s--
	}
	return s * int64(q)
}

// StartNanos returns the start of the quantum holding t, in nanoseconds. Quanta at the
// extreme ends of int64 may start before math.MinInt64; StartNanos saturates there.
func (q Quantum) StartNanos(t int64) int64 {
	return q.BeginNanos(q.Start(t))
}

// BeginNanos returns the start, in nanoseconds, of the quantum that starts at start (UNIX
// seconds), saturating at math.MinInt64.
func (q Quantum) BeginNanos(start int64) int64 {
	if start < math.MinInt64/int64(1e9) {
		return math.MinInt64
	}
	return start * 1e9
}

// EndNanos returns the exclusive end, in nanoseconds, of the quantum that starts at
// start (UNIX seconds), saturating at math.MaxInt64.
func (q Quantum) EndNanos(start int64) int64 {
	end := start + int64(q)
	if end > math.MaxInt64/int64(1e9) {
		return math.MaxInt64
	}
	return end * 1e9
}

// Identifier is the quantum identifier: the decimal ASCII of its start in UNIX seconds.
func Identifier(start int64) string { return strconv.FormatInt(start, 10) }

// ShardID returns the ID of the shard holding series key at quantum start (UNIX seconds).
func ShardID(f Format, key string, start int64) ID {
	ids := NewSeriesIDs(f, key)
	return ids.At(start)
}

// SeriesIDs computes the shard IDs of one series at many quanta, hashing the key once:
// At(start) == ShardID(f, key, start). The zero value is not usable; NewSeriesIDs makes one.
type SeriesIDs struct {
	f   Format
	key string
	hk  [sha1.Size]byte // SHA-1 of key (KFI, QFI)
}

// NewSeriesIDs returns the shard IDs of series key under format f.
func NewSeriesIDs(f Format, key string) SeriesIDs {
	s := SeriesIDs{f: f, key: key}
	if f != HFI {
		s.hk = sha1.Sum([]byte(key))
	}
	return s
}

// At returns the ID of the series' shard at quantum start (UNIX seconds).
func (s *SeriesIDs) At(start int64) ID {
	var buf [24]byte
	q := strconv.AppendInt(buf[:0], start, 10) // Identifier(start), without allocating
	var id ID
	if s.f == HFI {
		h := sha1.New()
		h.Write(q)
		h.Write([]byte{0})
		h.Write([]byte(s.key))
		h.Sum(id[:0])
		return id
	}
	hq := sha1.Sum(q)
	switch s.f {
	case KFI:
		copy(id[:10], s.hk[:10])
		copy(id[10:], hq[:10])
	default:
		copy(id[:10], hq[:10])
		copy(id[10:], s.hk[:10])
	}
	return id
}

// KeyID returns SHA-1 of a series key: the ID of the series' own metadata record.
func KeyID(key string) ID { return ID(sha1.Sum([]byte(key))) }

// tagDomain starts every tag ID's hash input, so that a tag ID is never the KeyID of
// some series key by construction of the input.
const tagDomain = "tsdht/tag\x00"

// TagID returns the ID under which the postings of tag pair k=v (the series carrying
// it) are stored: SHA-1 of "tsdht/tag" ‖ 0x00 ‖ len(k) as 4 bytes big-endian ‖ k ‖ v.
// The explicit length of k makes the encoding unambiguous: "a=b,c" and "a,b=c" never
// share an input, whatever bytes k and v hold.
func TagID(k, v string) ID {
	h := sha1.New()
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(k)))
	h.Write([]byte(tagDomain))
	h.Write(n[:])
	h.Write([]byte(k))
	h.Write([]byte(v))
	var id ID
	h.Sum(id[:0])
	return id
}

// ErrBadRange is returned for a range whose from is after its to.
var ErrBadRange = errors.New("range: from is after to")

// MaxQuantaPerRange bounds how many quanta one range may cover, so that a typo in a
// timestamp cannot make a node allocate billions of shard IDs.
const MaxQuantaPerRange = 1 << 20

// Covering returns the starts (UNIX seconds) of the quanta covering the half-open range
// [from, to) in ns: from quantum(from) to quantum(to−1) inclusive, ascending. An empty
// range covers nothing.
func (q Quantum) Covering(from, to int64) ([]int64, error) {
	if from > to {
		return nil, fmt.Errorf("%w (from %d > to %d)", ErrBadRange, from, to)
	}
	if from == to {
		return nil, nil
	}
	first, last := q.Start(from), q.Start(to-1)
	n := (last-first)/int64(q) + 1
	if n > MaxQuantaPerRange || n <= 0 {
		return nil, fmt.Errorf("range [%d, %d) covers %d quanta of %v; at most %d per request", from, to, uint64(n), q.Duration(), MaxQuantaPerRange)
	}
	starts := make([]int64, 0, n)
	for s := first; s <= last; s += int64(q) {
		starts = append(starts, s)
	}
	return starts, nil
}

// MaxQuantum is the longest quantum a series may have: a week, InfluxDB's longest
// default shard duration. Longer quanta would make a read of a few seconds of a dense
// series scan days of it.
const MaxQuantum Quantum = 7 * 24 * 3600

// Or returns q, or def if q is 0: a series' recorded quantum where 0 means the
// cluster's.
func (q Quantum) Or(def Quantum) Quantum {
	if q == 0 {
		return def
	}
	return q
}

// Ladder is the quantum lengths Fit chooses from: each a whole number of the shorter
// ones, so the quanta of one never straddle those of a shorter one.
var Ladder = []Quantum{10, 60, 600, 3600, 6 * 3600, 24 * 3600}

// FitPoints is how many points Fit aims to put in one quantum: what a 60 Hz channel
// holds in the default 10 s quantum, which the store is tuned for.
const FitPoints = 600

// Fit returns the quantum for a series whose points arrive every interval: the longest
// length of Ladder that holds at most FitPoints of them, and never shorter than base
// (the cluster's quantum). A non-positive interval (unknown rate) gives base.
func Fit(interval time.Duration, base Quantum) Quantum {
	if interval <= 0 {
		return base
	}
	best := base
	for _, l := range Ladder {
		if l > best && l.Duration()/interval <= FitPoints {
			best = l
		}
	}
	return best
}
