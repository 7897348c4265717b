package httpapi

import (
	"encoding/json"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/tsdht/tsdht/tsdb/series"
)

// answerWriter writes /query answers in InfluxDB 1.x's JSON: byte for byte what
// encoding/json's Encoder makes of {"results": […]} (InfluxDB's own encoder), but
// written by hand into one reused buffer that goes out whenever it fills. A raw
// answer's values come straight from its points (rawTable) and times are formatted
// without a time.Time per point: encoding/json's reflection, a boxed value per point
// and a string per time cost several times what reading the points does.
type answerWriter struct {
	w    io.Writer
	buf  []byte
	unit int64 // nanoseconds per unit of the epoch parameter; 0 for RFC 3339 strings
	day  int64 // the day whose `"2006-01-02T` is dayP
	dayP []byte
	sec  int64    // the second whose `"2006-01-02T15:04:05` is secP
	secP [32]byte // its 20 bytes (years 1677 to 2262 have four digits), then room
	// The last time written as an integer (the epoch parameter) and its digits, in
	// epochP[:epochN]; epochN is 0 until one was.
	epochV int64
	epochP [32]byte
	epochN int
	places int            // the decimal places of the last value written as a short decimal
	err    error          // the first write error; later writes are dropped
	csv    *csvState      // not nil: the answer is CSV (csv.go)
	loc    *time.Location // the zone of the result being written (tz()); nil: UTC
}

// flushAt is the buffer length at which the answer goes out to the connection.
const flushAt = 64 << 10

// answerBufs recycles answer writers' buffers: a small answer should not cost the
// allocation and zeroing of one.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, flushAt+4<<10); return &b }}

func newAnswerWriter(w io.Writer, unit int64) *answerWriter {
	return &answerWriter{w: w, buf: (*answerBufs.Get().(*[]byte))[:0], unit: unit, day: math.MinInt64, sec: math.MinInt64}
}

// release flushes what is left and returns the buffer; the writer is not used again.
func (a *answerWriter) release() error {
	err := a.flush()
	if cap(a.buf) <= 2*flushAt {
		b := a.buf[:0]
		answerBufs.Put(&b)
	}
	a.buf = nil
	return err
}

// flush writes out what the buffer holds.
func (a *answerWriter) flush() error {
	if a.err == nil && len(a.buf) > 0 {
		_, a.err = a.w.Write(a.buf)
	}
	a.buf = a.buf[:0]
	return a.err
}

// answer appends one JSON document {"results":[…]} and its newline.
func (a *answerWriter) answer(results []*result) {
	a.buf = append(a.buf, `{"results":[`...)
	for i, res := range results {
		if i > 0 {
			a.buf = append(a.buf, ',')
		}
		a.result(res)
	}
	a.buf = append(a.buf, "]}\n"...)
}

// result appends one result in the field order and with the omitempty rules of its
// struct tags.
func (a *answerWriter) result(res *result) {
	a.loc = res.loc
	a.buf = append(a.buf, `{"statement_id":`...)
	a.buf = strconv.AppendInt(a.buf, int64(res.StatementID), 10)
	if len(res.Series) > 0 {
		a.buf = append(a.buf, `,"series":[`...)
		for i, r := range res.Series {
			if i > 0 {
				a.buf = append(a.buf, ',')
			}
			a.row(r)
		}
		a.buf = append(a.buf, ']')
	}
	if len(res.Messages) > 0 {
		a.buf = append(a.buf, `,"messages":[`...)
		for i, m := range res.Messages {
			if i > 0 {
				a.buf = append(a.buf, ',')
			}
			a.buf = append(a.buf, `{"level":`...)
			a.buf = appendJSONString(a.buf, m.Level)
			a.buf = append(a.buf, `,"text":`...)
			a.buf = appendJSONString(a.buf, m.Text)
			a.buf = append(a.buf, '}')
		}
		a.buf = append(a.buf, ']')
	}
	if res.Partial {
		a.buf = append(a.buf, `,"partial":true`...)
	}
	if res.Err != "" {
		a.buf = append(a.buf, `,"error":`...)
		a.buf = appendJSONString(a.buf, res.Err)
	}
	a.buf = append(a.buf, '}')
}

func (a *answerWriter) row(r *row) {
	a.buf = append(a.buf, '{')
	if r.Name != "" {
		a.buf = append(a.buf, `"name":`...)
		a.buf = appendJSONString(a.buf, r.Name)
		a.buf = append(a.buf, ',')
	}
	if len(r.Tags) > 0 {
		keys := make([]string, 0, len(r.Tags))
		for k := range r.Tags {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		a.buf = append(a.buf, `"tags":{`...)
		for i, k := range keys {
			if i > 0 {
				a.buf = append(a.buf, ',')
			}
			a.buf = appendJSONString(a.buf, k)
			a.buf = append(a.buf, ':')
			a.buf = appendJSONString(a.buf, r.Tags[k])
		}
		a.buf = append(a.buf, "},"...)
	}
	a.buf = append(a.buf, `"columns":`...)
	if r.Columns == nil {
		a.buf = append(a.buf, "null"...)
	} else {
		a.buf = append(a.buf, '[')
		for i, c := range r.Columns {
			if i > 0 {
				a.buf = append(a.buf, ',')
			}
			a.buf = appendJSONString(a.buf, c)
		}
		a.buf = append(a.buf, ']')
	}
	switch {
	case r.table != nil && r.table.Len() > 0:
		a.buf = append(a.buf, `,"values":[`...)
		a.table(r.table)
		a.buf = append(a.buf, ']')
	case r.table == nil && len(r.Values) > 0:
		a.buf = append(a.buf, `,"values":[`...)
		a.values(r.Values)
		a.buf = append(a.buf, ']')
	}
	if r.Partial {
		a.buf = append(a.buf, `,"partial":true`...)
	}
	a.buf = append(a.buf, '}')
}

// table appends the rows a rawTable shows, each [time, values…] (a CSV line).
func (a *answerWriter) table(t *rawTable) {
	if len(t.cols) == 1 && t.cols[0].at == nil && t.cols[0].pts.Type == series.Float {
		a.floatColumn(t)
		return
	}
	for k := 0; k < t.Len(); k++ {
		r := t.row(k)
		a.rowStart(k)
		a.time(t.times[r])
		for c := range t.cols {
			a.buf = append(a.buf, ',')
			col := &t.cols[c]
			i := r
			if col.at != nil {
				if i = int(col.at[r]); i < 0 {
					a.null()
					continue
				}
			}
			switch col.pts.Type {
			case series.Float:
				a.float(col.pts.F[i])
			case series.Int:
				a.buf = strconv.AppendInt(a.buf, col.pts.I[i], 10)
			case series.String:
				a.str(col.pts.S[i])
			default:
				a.null()
			}
		}
		if !a.rowEnd() {
			return
		}
	}
}

// floatColumn is table for the commonest raw answer, one float field: the loop
// without the per-value dispatch.
func (a *answerWriter) floatColumn(t *rawTable) {
	f := t.cols[0].pts.F
	for k := 0; k < t.Len(); k++ {
		r := t.row(k)
		a.rowStart(k)
		a.time(t.times[r])
		a.buf = append(a.buf, ',')
		a.float(f[r])
		if !a.rowEnd() {
			return
		}
	}
}

// values appends rows built as [][]any.
func (a *answerWriter) values(vals [][]any) {
	for k, v := range vals {
		a.rowStart(k)
		for j, x := range v {
			if j > 0 {
				a.buf = append(a.buf, ',')
			}
			a.value(x)
		}
		if !a.rowEnd() {
			return
		}
	}
}

// rowStart begins the k-th row of a series' values: '[' after a ',' but for the first
// in JSON, the series' name and tags in CSV.
func (a *answerWriter) rowStart(k int) {
	if a.csv != nil {
		a.buf = append(a.buf, a.csv.prefix...)
		return
	}
	if k > 0 {
		a.buf = append(a.buf, ',')
	}
	a.buf = append(a.buf, '[')
}

// rowEnd ends a row, and sends the buffer on when it is full. It reports false once a
// write failed (the client went away): the rest of the answer is not worth encoding.
func (a *answerWriter) rowEnd() bool {
	if a.csv != nil {
		a.buf = append(a.buf, '\n')
	} else {
		a.buf = append(a.buf, ']')
	}
	if len(a.buf) >= flushAt {
		a.flush()
		heavyYield() // encoding goes several times faster than parsing: one interval (yield.go)
	}
	return a.err == nil
}

func (a *answerWriter) null() {
	if a.csv == nil {
		a.buf = append(a.buf, "null"...)
	}
}

func (a *answerWriter) float(f float64) {
	if a.csv != nil {
		a.buf = appendCSVFloat(a.buf, f)
	} else {
		a.buf = appendJSONFloatHint(a.buf, f, &a.places)
	}
}

func (a *answerWriter) str(s string) {
	if a.csv != nil {
		a.buf = appendCSVField(a.buf, s)
	} else {
		a.buf = appendJSONString(a.buf, s)
	}
}

// value appends one value of a row built as [][]any, as encoding/json (or InfluxDB's
// CSV writer) would.
func (a *answerWriter) value(x any) {
	switch v := x.(type) {
	case nil:
		a.null()
	case tsValue:
		a.time(int64(v))
	case float64:
		a.float(v)
	case int64:
		a.buf = strconv.AppendInt(a.buf, v, 10)
	case int:
		a.buf = strconv.AppendInt(a.buf, int64(v), 10)
	case string:
		a.str(v)
	case bool:
		a.buf = strconv.AppendBool(a.buf, v)
	default:
		b, err := json.Marshal(v)
		if err != nil {
			b = []byte("null")
		}
		if a.csv != nil {
			a.str(string(b))
		} else {
			a.buf = append(a.buf, b...)
		}
	}
}

// time appends a time as the epoch parameter asks: an integer in its unit, or
// InfluxDB's default (in JSON), an RFC 3339 string with nanoseconds (time.RFC3339Nano in UTC).
// Points of one second share its formatted date and clock, points of one day the
// date; the clock is written from the offset into the day (Go's UTC has neither leap
// seconds nor daylight saving).
func (a *answerWriter) time(t int64) {
	switch {
	case a.unit != 0:
		a.epochInt(floorDiv(t, a.unit))
		return
	case a.csv != nil:
		// InfluxDB's CSV writes times without epoch as nanoseconds.
		a.buf = strconv.AppendInt(a.buf, t, 10)
		return
	}
	const day = int64(24 * time.Hour)
	if a.loc != nil {
		a.buf = append(a.buf, '"')
		a.buf = time.Unix(0, t).In(a.loc).AppendFormat(a.buf, time.RFC3339Nano)
		a.buf = append(a.buf, '"')
		return
	}
	if t < math.MinInt64+day {
		// The day's start is out of int64's range.
		a.buf = append(a.buf, '"')
		a.buf = time.Unix(0, t).UTC().AppendFormat(a.buf, time.RFC3339Nano)
		a.buf = append(a.buf, '"')
		return
	}
	if uint64(t-a.sec) >= 1e9 {
		d := floorDiv(t, day) * day
		if d != a.day {
			a.dayP = time.Unix(0, d).UTC().AppendFormat(append(a.dayP[:0], '"'), "2006-01-02T")
			a.day = d
		}
		secs := (t - d) / 1e9
		a.sec = d + secs*1e9
		h, m, s := secs/3600*2, secs/60%60*2, secs%60*2
		c := &a.secP
		copy(c[:12], a.dayP) // `"2006-01-02T`, then `15:04:05`
		c[12], c[13], c[14], c[15], c[16] = digits2[h], digits2[h+1], ':', digits2[m], digits2[m+1]
		c[17], c[18], c[19] = ':', digits2[s], digits2[s+1]
	}
	// Built in an array and appended whole: no call to copy a few bytes.
	f := a.secP
	n := 20
	if frac := uint32(t - a.sec); frac != 0 {
		f[20] = '.'
		f[29] = byte('0' + frac%10)
		frac /= 10
		for i := 27; i >= 21; i -= 2 {
			p := frac % 100 * 2
			f[i], f[i+1] = digits2[p], digits2[p+1]
			frac /= 100
		}
		n = 30
		for f[n-1] == '0' {
			n--
		}
	}
	f[n], f[n+1] = 'Z', '"'
	a.buf = appendFixed(a.buf, &f, n+2)
}

// epochInt appends v, a time in the epoch parameter's unit, from the last one's digits
// when only its last two differ (points a few units apart, the commonest case), else
// formatted whole.
func (a *answerWriter) epochInt(v int64) {
	if last := a.epochV; a.epochN > 0 && last >= 100 && v >= last && last%100+(v-last) < 100 {
		p := (last%100 + v - last) * 2
		a.epochP[a.epochN-2], a.epochP[a.epochN-1] = digits2[p], digits2[p+1]
	} else {
		a.epochN = len(strconv.AppendInt(a.epochP[:0], v, 10))
	}
	a.epochV = v
	a.buf = appendFixed(a.buf, &a.epochP, a.epochN)
}

// appendFixed appends the first n bytes of d, copying the whole array: a fixed-size
// copy is a few moves, where appending a short slice is a call.
func appendFixed(b []byte, d *[32]byte, n int) []byte {
	if cap(b)-len(b) < len(d) {
		b = slices.Grow(b, len(d))
	}
	l := len(b)
	*(*[32]byte)(b[l : l+32]) = *d
	return b[:l+n]
}

// digits2 holds the two digits of 0 to 99 at twice the number.
const digits2 = "00010203040506070809101112131415161718192021222324252627282930313233343536373839" +
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879" +
	"8081828384858687888990919293949596979899"

// appendJSONFloat appends f as encoding/json does (ES6 number formatting: shortest
// 'f' form, 'e' form below 1e-6 or from 1e21 on). encoding/json refuses NaN and
// infinities, failing the whole answer; they are written as null instead.
func appendJSONFloat(b []byte, f float64) []byte {
	var places int
	return appendJSONFloatHint(b, f, &places)
}

// appendJSONFloatHint is appendJSONFloat trying *places decimal places first (a series'
// values mostly have as many) and setting it to those of a short decimal it wrote.
func appendJSONFloatHint(b []byte, f float64, places *int) []byte {
	if d, ok := appendShortDecimalHint(b, f, places); ok {
		return d
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 to e-9, as encoding/json cleans it up.
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendShortDecimal appends f in strconv's shortest 'f' form when f is n/10^k for an
// integer n ≠ 0 of at most 15 digits and k ≤ 6 — what sensors and line protocol mostly
// carry — written from n: a decimal of at most 15 significant digits that rounds to f
// is the only one of its length or shorter that does (doubles tell 15-digit decimals
// apart), so it is the shortest form. ok is false for any other f.
func appendShortDecimal(b []byte, f float64) (_ []byte, ok bool) {
	var places int
	return appendShortDecimalHint(b, f, &places)
}

// appendShortDecimalHint is appendShortDecimal trying *places decimal places first, and
// setting it to those it wrote with. n/10^k with n not a multiple of 10 is the shortest
// form when it rounds to f: a shorter decimal would be the same number (n would end
// in a zero), and no other decimal of at most 15 digits rounds to the same double.
func appendShortDecimalHint(b []byte, f float64, places *int) (_ []byte, ok bool) {
	if f == 0 {
		return b, false
	}
	if k := *places; k > 0 && k < 7 {
		p := pow10[k]
		if s := f * p; s < 1e15 && s > -1e15 {
			if n := int64(s); float64(n) == s && n%10 != 0 && float64(n)/p == f {
				return appendDecimal(b, n, k), true
			}
		}
	}
	for k, p := range pow10[:7] {
		s := f * p
		if s >= 1e15 || s <= -1e15 {
			break
		}
		// An integer s converts to int64 and back unchanged (cheaper than math.Trunc).
		if n := int64(s); float64(n) == s && float64(n)/p == f {
			*places = k
			return appendDecimal(b, n, k), true
		}
	}
	return b, false
}

// appendDecimal appends n/10^k in 'f' form without trailing zeros, n ≠ 0, |n| < 1e15
// and k ≤ 6 (appendShortDecimal's), two digits at a time.
func appendDecimal(b []byte, n int64, k int) []byte {
	if n < 0 {
		b = append(b, '-')
		n = -n
	}
	for k > 0 && n%10 == 0 {
		n /= 10
		k--
	}
	var d [24]byte
	i := len(d)
	u := uint64(n)
	for j := k; j >= 2; j -= 2 { // the fraction's digits
		p := u % 100 * 2
		i -= 2
		d[i], d[i+1] = digits2[p], digits2[p+1]
		u /= 100
	}
	if k%2 == 1 {
		i--
		d[i] = byte('0' + u%10)
		u /= 10
	}
	if k > 0 {
		i--
		d[i] = '.'
	}
	for u >= 100 { // the integer part's, at least one
		p := u % 100 * 2
		i -= 2
		d[i], d[i+1] = digits2[p], digits2[p+1]
		u /= 100
	}
	if u >= 10 {
		i -= 2
		d[i], d[i+1] = digits2[u*2], digits2[u*2+1]
	} else {
		i--
		d[i] = byte('0' + u)
	}
	return append(b, d[i:]...)
}

// appendJSONString appends s quoted as encoding/json does with HTML escaping on (its
// Encoder's default). Printable ASCII without '"', '\\', '<', '>' and '&' is copied
// as it is; any other string goes through encoding/json itself.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
