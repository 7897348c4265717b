package catalog

import (
	"bytes"
	"fmt"
	"math"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tsdht/tsdht/tsdb/series"
)

// Entry is what the catalog holds about one series. Its replicas (the series' registry
// replica set) may each hold a different copy; Merge combines copies so that every
// replica that has seen the same updates holds the same entry, in whatever order they
// arrived.
//
// Versions are hybrid timestamps (Clock): nanoseconds of the coordinator's wall clock,
// made strictly increasing per process. An entry has three parts, each merged on its own:
//   - the incarnation (Created, Type, First/Last): the copy with the highest Created
//     wins (on a tie, the lower type byte), and copies of the same incarnation widen
//     each other's bounds and advance each other's tail, ahead and newest (the highest wins);
//   - the metadata (Unit, Description, Tags, NominalRate): last writer wins by
//     MetaVersion (on a tie, the larger encoding);
//   - the deletion: Deleted is the version of the latest whole-series delete, the
//     highest seen. Every part not newer than it is dropped: a delete removes the type
//     (freeing the key for a new one), the bounds and the metadata, and an update of
//     any part made after the delete survives it.
type Entry struct {
	Key string

	Type    series.Type
	Created int64 // version of the incarnation: when its type was declared; 0 = none
	// First and Last bound the timestamps written to this incarnation (valid when
	// HasBounds). A range delete does not shrink them: they bound what was written.
	First, Last int64
	HasBounds   bool
	// Tail is the time of the newest point a coordinator acknowledged to this
	// incarnation and then reported (valid when HasTail): a hint, sent after the write
	// without waiting for a quorum, so it may lag or miss a replica. Never above Last.
	// Builds that keep Newest no longer send it; Latest uses it only for entries
	// without Newest (tsdb/bounds.go).
	Tail    int64
	HasTail bool
	// Ahead is the latest time written by a write stamped further ahead of its
	// coordinator's clock than the coordinator's slack (valid when HasAhead): kept at
	// quorum, before such points are written, so that Latest need not look past the
	// clock for points a clock that lies put there. Never above Last.
	Ahead    int64
	HasAhead bool
	// Newest is the time of the newest point of a write that reached a quantum newer
	// than any a write had reached before (valid when HasNewest): kept at the write's
	// quorum before that write is acknowledged, so no acknowledged point lies in a
	// quantum after Newest's. Latest reads Newest's quantum and walks back from there.
	// Never above Last.
	Newest    int64
	HasNewest bool

	Unit        string
	Description string
	Tags        []Tag   // sorted by key, keys unique
	NominalRate float64 // samples per second, 0 = not declared
	MetaVersion int64   // version of Unit, Description, Tags and NominalRate; 0 = never set

	Deleted int64 // version of the latest whole-series delete; 0 = never deleted
}

// Live reports whether the entry describes a series that exists: it has a type that
// no delete has removed.
func (e *Entry) Live() bool { return e.Created > 0 && e.Type != series.Unknown }

// HasMeta reports whether metadata has been set (and not deleted since).
func (e *Entry) HasMeta() bool { return e.MetaVersion > 0 }

// Validate checks an entry's fields against the limits and invariants. Decode calls
// it, so an entry from the wire or the disk is valid.
func (e *Entry) Validate() error {
	if err := series.ValidateKey(e.Key); err != nil {
		return err
	}
	switch {
	case e.Type > series.String:
		return fmt.Errorf("catalog entry %q: bad type %d", e.Key, e.Type)
	case (e.Type == series.Unknown) != (e.Created == 0):
		return fmt.Errorf("catalog entry %q: a type needs a creation version and vice versa", e.Key)
	case e.Created < 0 || e.MetaVersion < 0 || e.Deleted < 0:
		return fmt.Errorf("catalog entry %q: negative version", e.Key)
	case e.HasBounds && (e.First > e.Last || e.Created == 0):
		return fmt.Errorf("catalog entry %q: bad time bounds", e.Key)
	case e.HasTail && (!e.HasBounds || e.Tail < e.First || e.Tail > e.Last):
		return fmt.Errorf("catalog entry %q: tail outside the time bounds", e.Key)
	case e.HasAhead && (!e.HasBounds || e.Ahead < e.First || e.Ahead > e.Last):
		return fmt.Errorf("catalog entry %q: ahead outside the time bounds", e.Key)
	case e.HasNewest && (!e.HasBounds || e.Newest < e.First || e.Newest > e.Last):
		return fmt.Errorf("catalog entry %q: newest outside the time bounds", e.Key)
	case len(e.Unit) > MaxUnitLen || !utf8.ValidString(e.Unit):
		return fmt.Errorf("catalog entry %q: unit must be at most %d bytes of UTF-8", e.Key, MaxUnitLen)
	case len(e.Description) > MaxDescriptionLen || !utf8.ValidString(e.Description):
		return fmt.Errorf("catalog entry %q: description must be at most %d bytes of UTF-8", e.Key, MaxDescriptionLen)
	case math.IsNaN(e.NominalRate) || math.IsInf(e.NominalRate, 0) || e.NominalRate < 0:
		return fmt.Errorf("catalog entry %q: nominal rate must be a finite number >= 0", e.Key)
	case e.MetaVersion == 0 && (e.Unit != "" || e.Description != "" || len(e.Tags) > 0 || e.NominalRate != 0):
		return fmt.Errorf("catalog entry %q: metadata without a version", e.Key)
	case e.Created != 0 && e.Created <= e.Deleted, e.MetaVersion != 0 && e.MetaVersion <= e.Deleted:
		return fmt.Errorf("catalog entry %q: a part older than its deletion", e.Key)
	}
	if normalTags(e.Tags) {
		return nil // what NormalizeTags would return unchanged, checked without sorting a copy
	}
	norm, err := NormalizeTags(e.Tags)
	if err != nil {
		return fmt.Errorf("catalog entry %q: %w", e.Key, err)
	}
	if len(norm) != len(e.Tags) {
		return fmt.Errorf("catalog entry %q: tags not unique", e.Key)
	}
	for i := range norm {
		if norm[i] != e.Tags[i] {
			return fmt.Errorf("catalog entry %q: tags not sorted", e.Key)
		}
	}
	return nil
}

// Merge returns the merge of two copies of one series' entry (see Entry). It is
// commutative, associative and idempotent, so replicas converge whatever the order in
// which copies reach them. Copies of different keys are a caller's bug: a keeps its key.
func Merge(a, b Entry) Entry {
	out := Entry{Key: a.Key, Deleted: max(a.Deleted, b.Deleted)}

	// Incarnation: highest (Created, then lowest Type).
	inc, other := a, b
	if b.Created > a.Created || (b.Created == a.Created && b.Type < a.Type) {
		inc, other = b, a
	}
	out.Type, out.Created = inc.Type, inc.Created
	out.First, out.Last, out.HasBounds = inc.First, inc.Last, inc.HasBounds
	out.Tail, out.HasTail = inc.Tail, inc.HasTail
	out.Ahead, out.HasAhead = inc.Ahead, inc.HasAhead
	out.Newest, out.HasNewest = inc.Newest, inc.HasNewest
	if other.Created == inc.Created && other.Type == inc.Type && other.HasBounds {
		if !out.HasBounds {
			out.First, out.Last, out.HasBounds = other.First, other.Last, true
		} else {
			out.First, out.Last = min(out.First, other.First), max(out.Last, other.Last)
		}
		if other.HasTail && (!out.HasTail || other.Tail > out.Tail) {
			out.Tail, out.HasTail = other.Tail, true
		}
		if other.HasAhead && (!out.HasAhead || other.Ahead > out.Ahead) {
			out.Ahead, out.HasAhead = other.Ahead, true
		}
		if other.HasNewest && (!out.HasNewest || other.Newest > out.Newest) {
			out.Newest, out.HasNewest = other.Newest, true
		}
	}

	// Metadata: highest MetaVersion, then the larger encoding.
	meta := a
	if b.MetaVersion > a.MetaVersion || (b.MetaVersion == a.MetaVersion && bytes.Compare(metaBytes(&b), metaBytes(&a)) > 0) {
		meta = b
	}
	out.Unit, out.Description, out.NominalRate, out.MetaVersion = meta.Unit, meta.Description, meta.NominalRate, meta.MetaVersion
	out.Tags = append([]Tag(nil), meta.Tags...)
	if len(out.Tags) == 0 {
		out.Tags = nil
	}

	out.dropDeleted()
	return out
}

// dropDeleted clears every part not newer than the entry's deletion.
func (e *Entry) dropDeleted() {
	if e.Created != 0 && e.Created <= e.Deleted {
		e.Type, e.Created, e.First, e.Last, e.HasBounds = series.Unknown, 0, 0, 0, false
		e.Tail, e.HasTail, e.Ahead, e.HasAhead = 0, false, 0, false
		e.Newest, e.HasNewest = 0, false
	}
	if e.MetaVersion != 0 && e.MetaVersion <= e.Deleted {
		e.Unit, e.Description, e.Tags, e.NominalRate, e.MetaVersion = "", "", nil, 0, 0
	}
}

// metaBytes encodes the metadata part alone: the tie-breaker of equal MetaVersions.
func metaBytes(e *Entry) []byte {
	var w writer
	w.str(e.Unit)
	w.str(e.Description)
	w.f64(e.NominalRate)
	w.tags(e.Tags)
	return w.b
}

// Equal reports whether two entries are the same (tags compared in order).
func Equal(a, b Entry) bool {
	return bytes.Equal(a.Encode(nil), b.Encode(nil))
}

// Clock hands out versions: wall-clock nanoseconds, strictly increasing within the
// process, and never below a version it has observed (a hybrid logical clock's receive
// rule), so an update made after reading an entry outranks what it read even when
// this node's clock is behind. The zero value is ready to use.
type Clock struct {
	mu   sync.Mutex
	last int64
	now  func() int64 // tests; nil = time.Now
}

// Now returns a new version.
func (c *Clock) Now() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := time.Now().UnixNano()
	if c.now != nil {
		t = c.now()
	}
	if t <= c.last {
		t = c.last + 1
	}
	c.last = t
	return t
}

// Observe makes later versions exceed v.
func (c *Clock) Observe(v int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = max(c.last, v)
}
