package httpapi

import "github.com/tsdht/tsdht/tsdb/series"

// rawTable is the values of a raw SELECT's output series kept column by column, as
// the points were read: a row is a time and, per column, an index into that column's
// points. The encoder writes it straight from the points, so an answer of millions of
// points boxes no value and builds no [][]any.
//
// The rows shown are [lo, hi) of the rows in time order, or of their reverse when
// desc is set: ORDER BY time DESC, OFFSET, LIMIT and chunking only move these bounds.
type rawTable struct {
	times  []int64 // the times of the rows, ascending
	cols   []rawColumn
	desc   bool
	lo, hi int
}

// rawColumn is one column of a rawTable.
type rawColumn struct {
	pts *series.Points
	// at[r] is the index in pts of row r's value, -1 for none (null); nil when row r is
	// point r of pts (a column alone, or one whose points have every row's time).
	at []int32
}

// newRawTable returns the table of every row of times, in ascending order.
func newRawTable(times []int64, cols []rawColumn) *rawTable {
	return &rawTable{times: times, cols: cols, hi: len(times)}
}

// Len is the number of rows shown.
func (t *rawTable) Len() int { return t.hi - t.lo }

// row returns the index in times of the k-th row shown.
func (t *rawTable) row(k int) int {
	if t.desc {
		return len(t.times) - 1 - (t.lo + k)
	}
	return t.lo + k
}

// reverse shows the rows in the opposite order.
func (t *rawTable) reverse() {
	n := len(t.times)
	t.lo, t.hi = n-t.hi, n-t.lo
	t.desc = !t.desc
}

// slice returns the table showing rows [a, b) of those t shows.
func (t *rawTable) slice(a, b int) *rawTable {
	s := *t
	s.lo, s.hi = t.lo+a, t.lo+b
	return &s
}

// value returns column c's value in row r (an index in times), nil for none.
func (t *rawTable) value(c, r int) any {
	col := &t.cols[c]
	i := r
	if col.at != nil {
		if i = int(col.at[r]); i < 0 {
			return nil
		}
	}
	return pointValue(col.pts, i)
}

// stringAt returns column c's value in row r (an index in times) when it is a string.
func (t *rawTable) stringAt(c, r int) (string, bool) {
	col := &t.cols[c]
	i := r
	if col.at != nil {
		if i = int(col.at[r]); i < 0 {
			return "", false
		}
	}
	if col.pts.Type != series.String {
		return "", false
	}
	return col.pts.S[i], true
}

// values returns the rows shown as encoding/json takes them, times as tsValue: for
// the paths that are not the encoder's (pretty printing, tag columns).
func (t *rawTable) values() [][]any {
	out := make([][]any, t.Len())
	for k := range out {
		r := t.row(k)
		v := make([]any, len(t.cols)+1)
		v[0] = tsValue(t.times[r])
		for c := range t.cols {
			v[c+1] = t.value(c, r)
		}
		out[k] = v
	}
	return out
}
