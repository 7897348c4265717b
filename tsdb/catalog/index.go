package catalog

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/series"
)

// The tag index. For every tag pair k=v, a posting list holds the series carrying it,
// stored under quanta.TagID(k, v) on that ID's replica set. Besides the user's tags,
// every series is posted under pseudo-tags, whose keys start with 0x00 so that no user
// tag (ValidateTagKey) can equal them:
//
//   - AllTag: one of AllBuckets buckets, chosen by the series key's hash. Listing every
//     series reads AllBuckets postings, on at most AllBuckets replica sets, not every node.
//   - PrefixTag: each '/'-terminated prefix of the key, up to MaxPrefixDepth segments
//     ("pmu17/", "pmu17/bus3/" for pmu17/bus3/freq). A listing by any prefix P reads
//     the posting of P's longest such prefix (PrefixQuery) and keeps the keys that
//     start with P; a P with no '/' reads the AllTag buckets instead.
//
// AllBuckets and MaxPrefixDepth are part of the layout: every node must use the same.
const (
	AllTagKey      = "\x00all"
	PrefixTagKey   = "\x00prefix"
	AllBuckets     = 16
	MaxPrefixDepth = 4
)

// AllTag returns the bucket of the all-series index that holds key.
func AllTag(key string) Tag {
	id := quanta.KeyID(key)
	return Tag{K: AllTagKey, V: strconv.Itoa(int(id[0]) % AllBuckets)}
}

// AllTags returns every bucket of the all-series index.
func AllTags() []Tag {
	out := make([]Tag, AllBuckets)
	for i := range out {
		out[i] = Tag{K: AllTagKey, V: strconv.Itoa(i)}
	}
	return out
}

// PrefixTags returns the prefix pseudo-tags of key.
func PrefixTags(key string) []Tag {
	var out []Tag
	for i := 0; i < len(key) && len(out) < MaxPrefixDepth; i++ {
		if key[i] == '/' {
			out = append(out, Tag{K: PrefixTagKey, V: key[:i+1]})
		}
	}
	return out
}

// PrefixQuery returns the posting to read for a listing by prefix p: its longest
// prefix that PrefixTags would post under. ok is false when p has none (no '/' within
// the first MaxPrefixDepth segments): read AllTags then. Either way keep only the keys
// that start with p.
func PrefixQuery(p string) (t Tag, ok bool) {
	tags := PrefixTags(p)
	if len(tags) == 0 {
		return Tag{}, false
	}
	return tags[len(tags)-1], true
}

// InternalPrefix begins the keys of series tsdht keeps for itself (an uplink's cursors):
// they are stored and read like any series but indexed by no tag, so no listing,
// prefix or match shows them.
const InternalPrefix = "__tsdht/"

// Internal reports whether key is one of tsdht's own series (InternalPrefix).
func Internal(key string) bool { return strings.HasPrefix(key, InternalPrefix) }

// IndexTags returns every tag pair whose posting lists the series: its tags, its prefix
// pseudo-tags and its all-series bucket; none for an internal series.
func IndexTags(key string, tags []Tag) []Tag {
	if Internal(key) {
		return nil
	}
	out := make([]Tag, 0, len(tags)+MaxPrefixDepth+1)
	out = append(out, tags...)
	out = append(out, PrefixTags(key)...)
	return append(out, AllTag(key))
}

// Pseudo reports whether t is one of the index's own tags.
func (t Tag) Pseudo() bool { return strings.HasPrefix(t.K, "\x00") }

// Member is one series in a posting list. Adding and removing are last-writer-wins
// by Version (a Clock value): the higher version wins, and on a tie the removal.
type Member struct {
	Key     string
	Version int64
	Removed bool
}

// MergeMember returns the winner of two states of one member.
func MergeMember(a, b Member) Member {
	if b.Version > a.Version || (b.Version == a.Version && b.Removed && !a.Removed) {
		return b
	}
	return a
}

// EncodeMemberState encodes a member's version and removal flag (the store's value
// of a member; the key is stored in the store's key).
func EncodeMemberState(m Member) []byte {
	b := binary.AppendVarint(nil, m.Version)
	if m.Removed {
		return append(b, 1)
	}
	return append(b, 0)
}

// DecodeMemberState is EncodeMemberState's inverse.
func DecodeMemberState(key string, b []byte) (Member, error) {
	v, n := binary.Varint(b)
	if n <= 0 || len(b) != n+1 || b[n] > 1 || v < 0 {
		return Member{}, fmt.Errorf("%w: posting member %q", ErrCorrupt, key)
	}
	return Member{Key: key, Version: v, Removed: b[n] == 1}, nil
}

// ValidateMember checks a member from the wire.
func ValidateMember(m Member) error {
	if err := series.ValidateKey(m.Key); err != nil {
		return err
	}
	if m.Version < 0 {
		return fmt.Errorf("posting member %q: negative version", m.Key)
	}
	return nil
}

// ValidateIndexTag checks a tag that names a posting list: a user tag or a pseudo-tag.
func ValidateIndexTag(t Tag) error {
	switch t.K {
	case AllTagKey:
		if n, err := strconv.Atoi(t.V); err != nil || n < 0 || n >= AllBuckets || strconv.Itoa(n) != t.V {
			return fmt.Errorf("bad all-series bucket %q", t.V)
		}
		return nil
	case PrefixTagKey:
		if t.V == "" || len(t.V) > series.MaxKeyLen || !strings.HasSuffix(t.V, "/") {
			return fmt.Errorf("bad prefix posting %q", t.V)
		}
		return nil
	}
	if err := ValidateTagKey(t.K); err != nil {
		return err
	}
	return ValidateTagValue(t.K, t.V)
}

// ID returns the ID of t's posting list.
func (t Tag) ID() quanta.ID { return quanta.TagID(t.K, t.V) }

// Intersect returns the keys present in every sorted list, sorted.
func Intersect(lists ...[]string) []string {
	if len(lists) == 0 {
		return nil
	}
	out := append([]string(nil), lists[0]...)
	for _, l := range lists[1:] {
		w, j := 0, 0
		for _, k := range out {
			for j < len(l) && l[j] < k {
				j++
			}
			if j < len(l) && l[j] == k {
				out[w] = k
				w++
			}
		}
		out = out[:w]
	}
	return out
}
