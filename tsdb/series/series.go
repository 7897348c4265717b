// Package series owns the data model of a time series: keys, value types and batches of
// points, with the sorting, merging and trimming every layer above shares.
package series

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"unicode/utf8"
)

// MaxKeyLen is the longest series key, in bytes.
const MaxKeyLen = 256

// MaxStringValueLen is the longest string value, in bytes. A PMU or controller status
// string is short; the bound keeps a single point from filling a frame.
const MaxStringValueLen = 4096

// ValidateKey checks that a series key is 1–256 bytes of valid UTF-8.
func ValidateKey(key string) error {
	switch {
	case len(key) == 0:
		return errors.New("series key is empty")
	case len(key) > MaxKeyLen:
		return fmt.Errorf("series key is %d bytes; at most %d allowed", len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("series key %q is not valid UTF-8", key)
	}
	return nil
}

// Type is the value type of a series, fixed by its first write.
type Type uint8

const (
	// Unknown is the type of a batch with no points yet.
	Unknown Type = iota
	Float
	Int
	String
)

// String returns "float", "int" or "string".
func (t Type) String() string {
	switch t {
	case Float:
		return "float"
	case Int:
		return "int"
	case String:
		return "string"
	}
	return "unknown"
}

// ParseType is the inverse of Type.String.
func ParseType(s string) (Type, error) {
	switch s {
	case "float":
		return Float, nil
	case "int":
		return Int, nil
	case "string":
		return String, nil
	}
	return Unknown, fmt.Errorf("unknown value type %q: want float, int or string", s)
}

// ErrTypeMismatch is returned when a write's value type differs from the series' type.
var ErrTypeMismatch = errors.New("value type mismatch")

// Points is a batch of points of one series, stored by column: T holds the timestamps
// (ns since the epoch) and exactly one of F, I, S holds the values, by Type.
// Columns keep the wire and disk formats compact and the hot loops free of interfaces.
type Points struct {
	Type Type
	T    []int64
	F    []float64
	I    []int64
	S    []string
}

// Len returns the number of points.
func (p *Points) Len() int { return len(p.T) }

// Valid checks that the columns agree with the type.
func (p *Points) Valid() error {
	n := len(p.T)
	switch p.Type {
	case Unknown:
		if n != 0 || len(p.F)+len(p.I)+len(p.S) != 0 {
			return errors.New("points without a value type")
		}
	case Float:
		if len(p.F) != n || len(p.I)+len(p.S) != 0 {
			return errors.New("float points: column lengths disagree")
		}
	case Int:
		if len(p.I) != n || len(p.F)+len(p.S) != 0 {
			return errors.New("int points: column lengths disagree")
		}
	case String:
		if len(p.S) != n || len(p.F)+len(p.I) != 0 {
			return errors.New("string points: column lengths disagree")
		}
		for _, s := range p.S {
			if len(s) > MaxStringValueLen {
				return fmt.Errorf("string value of %d bytes; at most %d allowed", len(s), MaxStringValueLen)
			}
		}
	default:
		return fmt.Errorf("unknown value type %d", p.Type)
	}
	return nil
}

// AppendFloat appends one float point; the batch must be Float or empty.
func (p *Points) AppendFloat(t int64, v float64) {
	p.Type = Float
	p.T = append(p.T, t)
	p.F = append(p.F, v)
}

// AppendInt appends one int point; the batch must be Int or empty.
func (p *Points) AppendInt(t int64, v int64) {
	p.Type = Int
	p.T = append(p.T, t)
	p.I = append(p.I, v)
}

// AppendString appends one string point; the batch must be String or empty.
func (p *Points) AppendString(t int64, v string) {
	p.Type = String
	p.T = append(p.T, t)
	p.S = append(p.S, v)
}

// AppendFrom appends point i of q, which must have p's type (or p is empty).
func (p *Points) AppendFrom(q *Points, i int) {
	p.Type = q.Type
	p.T = append(p.T, q.T[i])
	switch q.Type {
	case Float:
		p.F = append(p.F, q.F[i])
	case Int:
		p.I = append(p.I, q.I[i])
	case String:
		p.S = append(p.S, q.S[i])
	}
}

// Set overwrites the value of point i with point j of q.
func (p *Points) Set(i int, q *Points, j int) {
	switch p.Type {
	case Float:
		p.F[i] = q.F[j]
	case Int:
		p.I[i] = q.I[j]
	case String:
		p.S[i] = q.S[j]
	}
}

// Value formats point i's value the way the CLI prints it.
func (p *Points) Value(i int) string {
	switch p.Type {
	case Float:
		return strconv.FormatFloat(p.F[i], 'g', -1, 64)
	case Int:
		return strconv.FormatInt(p.I[i], 10)
	case String:
		return p.S[i]
	}
	return ""
}

// Equal reports whether point i of p and point j of q have the same value.
func (p *Points) Equal(i int, q *Points, j int) bool {
	if p.Type != q.Type {
		return false
	}
	switch p.Type {
	case Float:
		return p.F[i] == q.F[j] || (p.F[i] != p.F[i] && q.F[j] != q.F[j])
	case Int:
		return p.I[i] == q.I[j]
	case String:
		return p.S[i] == q.S[j]
	}
	return true
}

// Sorted reports whether timestamps strictly ascend (sorted and free of duplicates).
func (p *Points) Sorted() bool {
	for i := 1; i < len(p.T); i++ {
		if p.T[i] <= p.T[i-1] {
			return false
		}
	}
	return true
}

// Normalize sorts the points by time and, where a timestamp repeats, keeps the value that
// came last in the batch: a retried or corrected write wins.
func (p *Points) Normalize() {
	if p.Sorted() {
		return
	}
	idx := make([]int, len(p.T))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return p.T[idx[a]] < p.T[idx[b]] })
	var out Points
	out.Type = p.Type
	for k, i := range idx {
		if k+1 < len(idx) && p.T[idx[k+1]] == p.T[i] {
			continue // a later duplicate follows: it wins
		}
		out.AppendFrom(p, i)
	}
	*p = out
}

// Trim returns the points with from <= t < to, sharing p's backing arrays. p must be sorted.
func (p *Points) Trim(from, to int64) Points {
	lo := sort.Search(len(p.T), func(i int) bool { return p.T[i] >= from })
	hi := sort.Search(len(p.T), func(i int) bool { return p.T[i] >= to })
	if hi < lo {
		hi = lo
	}
	return p.Slice(lo, hi)
}

// Slice returns points [lo, hi), sharing backing arrays.
func (p *Points) Slice(lo, hi int) Points {
	out := Points{Type: p.Type, T: p.T[lo:hi]}
	switch p.Type {
	case Float:
		out.F = p.F[lo:hi]
	case Int:
		out.I = p.I[lo:hi]
	case String:
		out.S = p.S[lo:hi]
	}
	return out
}

// Merge returns the union of two sorted batches of one type, sorted. Where both hold a
// timestamp, b's value wins: pass the newer data as b.
func Merge(a, b Points) Points {
	if a.Len() == 0 {
		return b
	}
	if b.Len() == 0 {
		return a
	}
	out := Points{Type: a.Type}
	out.T = make([]int64, 0, a.Len()+b.Len())
	i, j := 0, 0
	for i < a.Len() || j < b.Len() {
		switch {
		case j == b.Len() || (i < a.Len() && a.T[i] < b.T[j]):
			out.AppendFrom(&a, i)
			i++
		case i == a.Len() || b.T[j] < a.T[i]:
			out.AppendFrom(&b, j)
			j++
		default: // equal timestamps: b wins
			out.AppendFrom(&b, j)
			i++
			j++
		}
	}
	return out
}

// Concat appends sorted batches whose time ranges ascend and do not overlap.
func Concat(parts ...Points) Points {
	var out Points
	n := 0
	for i := range parts {
		n += parts[i].Len()
	}
	if n == 0 {
		return out
	}
	out.T = make([]int64, 0, n)
	for i := range parts { // the value column sized once too: a read's answer is long
		if parts[i].Len() > 0 {
			switch parts[i].Type {
			case Float:
				out.F = make([]float64, 0, n)
			case Int:
				out.I = make([]int64, 0, n)
			case String:
				out.S = make([]string, 0, n)
			}
			break
		}
	}
	for i := range parts {
		q := &parts[i]
		if q.Len() == 0 {
			continue
		}
		out.Type = q.Type
		out.T = append(out.T, q.T...)
		out.F = append(out.F, q.F...)
		out.I = append(out.I, q.I...)
		out.S = append(out.S, q.S...)
	}
	return out
}
