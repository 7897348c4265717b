// Package catalog owns what tsdht knows about a series besides its points: its catalog
// entry (value type, unit, description, tags, time bounds, nominal rate, deletion), how
// replicas' copies of an entry merge so that they converge, the tag postings that index
// series by tag pair and by key prefix, and the binary encodings of both, which check
// every declared length before allocating.
//
// It is pure data: no I/O. The node-local store persists entries and postings
// (tsdb/store); the time-series layer keeps them at quorum on their replica sets.
package catalog

import (
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
)

// Limits on tags and metadata, enforced by Validate and by the decoders.
const (
	MaxTags           = 64   // tags per series
	MaxTagKeyLen      = 128  // bytes of a tag key
	MaxTagValueLen    = 256  // bytes of a tag value
	MaxUnitLen        = 64   // bytes of a unit
	MaxDescriptionLen = 1024 // bytes of a description
)

// Tags the HTTP API's line-protocol mapping adds to a series' own tags (docs/http.md):
// the database, measurement and field a key was made of, so that other surfaces
// (InfluxQL, PromQL, export, uplinks) map the series back without parsing its key.
const (
	TagDB          = "__db"
	TagMeasurement = "__measurement"
	TagField       = "__field"
)

// Tag is one key=value pair.
type Tag struct {
	K, V string
}

// String returns "k=v".
func (t Tag) String() string { return t.K + "=" + t.V }

// ValidateTagKey checks a user tag key: 1..MaxTagKeyLen bytes of UTF-8 without '=', ','
// or control characters (the index's own pseudo-tags start with 0x00, so no user tag
// can collide with them).
func ValidateTagKey(k string) error {
	switch {
	case k == "":
		return fmt.Errorf("tag key is empty")
	case len(k) > MaxTagKeyLen:
		return fmt.Errorf("tag key of %d bytes; at most %d allowed", len(k), MaxTagKeyLen)
	case !utf8.ValidString(k):
		return fmt.Errorf("tag key %q is not valid UTF-8", k)
	case strings.ContainsAny(k, "=,"):
		return fmt.Errorf("tag key %q contains '=' or ','", k)
	}
	for _, r := range k {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("tag key %q contains a control character", k)
		}
	}
	return nil
}

// ValidateTagValue checks a tag value: 1..MaxTagValueLen bytes of UTF-8.
func ValidateTagValue(k, v string) error {
	switch {
	case v == "":
		return fmt.Errorf("tag %q has an empty value", k)
	case len(v) > MaxTagValueLen:
		return fmt.Errorf("tag %q: value of %d bytes; at most %d allowed", k, len(v), MaxTagValueLen)
	case !utf8.ValidString(v):
		return fmt.Errorf("tag %q: value is not valid UTF-8", k)
	}
	return nil
}

// normalTags reports whether tags are what NormalizeTags returns them as: valid, at
// most MaxTags, keys strictly ascending. Every stored entry's are, and a listing
// decodes thousands of entries: this checks them in one pass, without a sorted copy.
func normalTags(tags []Tag) bool {
	if len(tags) > MaxTags {
		return false
	}
	for i, t := range tags {
		if (i > 0 && tags[i-1].K >= t.K) || ValidateTagKey(t.K) != nil || ValidateTagValue(t.K, t.V) != nil {
			return false
		}
	}
	return true
}

// NormalizeTags validates tags and returns them sorted by key. A key given twice with
// the same value counts once; with two values it is an error.
func NormalizeTags(tags []Tag) ([]Tag, error) {
	if len(tags) == 0 {
		return nil, nil
	}
	out := append([]Tag(nil), tags...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].K < out[j].K })
	w := 0
	for i, t := range out {
		if err := ValidateTagKey(t.K); err != nil {
			return nil, err
		}
		if err := ValidateTagValue(t.K, t.V); err != nil {
			return nil, err
		}
		if i > 0 && t.K == out[w-1].K {
			if t.V != out[w-1].V {
				return nil, fmt.Errorf("tag %q given twice, as %q and %q", t.K, out[w-1].V, t.V)
			}
			continue
		}
		out[w] = t
		w++
	}
	out = out[:w]
	if len(out) > MaxTags {
		return nil, fmt.Errorf("%d tags; at most %d per series", len(out), MaxTags)
	}
	return out, nil
}

// ParseTags parses "k=v" strings, each possibly a comma-separated list ("a=1,b=2"),
// as the command line takes them, and normalizes the result. A value may contain '='
// (the first one splits) but not ','.
func ParseTags(args ...string) ([]Tag, error) {
	var tags []Tag
	for _, a := range args {
		for _, part := range strings.Split(a, ",") {
			if part = strings.TrimSpace(part); part == "" {
				continue
			}
			k, v, ok := strings.Cut(part, "=")
			if !ok {
				return nil, fmt.Errorf("tag %q: want key=value", part)
			}
			tags = append(tags, Tag{K: strings.TrimSpace(k), V: strings.TrimSpace(v)})
		}
	}
	return NormalizeTags(tags)
}

// FormatTags returns tags as "k=v,k=v".
func FormatTags(tags []Tag) string {
	parts := make([]string, len(tags))
	for i, t := range tags {
		parts[i] = t.String()
	}
	return strings.Join(parts, ",")
}

// Matches reports whether sorted tags carry every tag of match.
func Matches(tags, match []Tag) bool {
	for _, m := range match {
		i := sort.Search(len(tags), func(i int) bool { return tags[i].K >= m.K })
		if i == len(tags) || tags[i] != m {
			return false
		}
	}
	return true
}
