package uplink

import (
	"math"
	"strconv"
	"strings"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
)

// Catalog tags the HTTP API gives the series it creates (DESIGN.md's line-protocol
// and Prometheus mappings), read back here to map a series onto the target's model.
const (
	tagDB          = catalog.TagDB
	tagMeasurement = catalog.TagMeasurement
	tagField       = catalog.TagField
	tagName        = "__name__"
)

var (
	lpMeasurement = strings.NewReplacer(`,`, `\,`, ` `, `\ `)
	lpTag         = strings.NewReplacer(`,`, `\,`, `=`, `\=`, ` `, `\ `)
	lpString      = strings.NewReplacer(`\`, `\\`, `"`, `\"`)
)

// lineShape is a series in InfluxDB's model: measurement, tags and field.
//   - a series written as line protocol: its measurement, tags and field again;
//   - a series written by Prometheus remote write: measurement __name__, field "value",
//     the other labels as tags;
//   - any other series: measurement = the series key, field "value", no tags.
func lineShape(e *catalog.Entry) (measurement, field string, tags []catalog.Tag) {
	m, f := tagOf(e, tagMeasurement), tagOf(e, tagField)
	if m != "" && f != "" {
		for _, t := range e.Tags {
			if t.K != tagDB && t.K != tagMeasurement && t.K != tagField {
				tags = append(tags, t)
			}
		}
		return m, f, tags
	}
	if n := tagOf(e, tagName); n != "" {
		for _, t := range e.Tags {
			if t.K != tagName {
				tags = append(tags, t)
			}
		}
		return n, "value", tags
	}
	return e.Key, "value", nil
}

func tagOf(e *catalog.Entry, k string) string {
	for _, t := range e.Tags {
		if t.K == k {
			return t.V
		}
	}
	return ""
}

// lineEncoder writes InfluxDB 1.x line protocol, timestamps in ns. A windowed uplink
// writes one line per window at the window's start with the fields <field>_mean,
// <field>_min, <field>_max (floats, or integers for an integer series) and
// <field>_count (an integer).
type lineEncoder struct {
	buf []byte
	// The decimal digits of the whole seconds of the last timestamp written: a
	// series' consecutive points mostly share them. secNanos is sec·1e9: a timestamp
	// within that second takes its nanoseconds by a subtraction, not a division (a
	// 64-bit division is a runtime call on a 32-bit ARM).
	sec, secNanos int64
	secDig        []byte
}

// appendTime appends t (ns) in decimal, as strconv.AppendInt would.
func (l *lineEncoder) appendTime(t int64) {
	if t < 1e9 {
		l.buf = strconv.AppendInt(l.buf, t, 10)
		return
	}
	if len(l.secDig) == 0 || t < l.secNanos || t-l.secNanos >= 1e9 {
		l.sec = t / 1e9
		l.secNanos, l.secDig = l.sec*1e9, strconv.AppendInt(l.secDig[:0], l.sec, 10)
	}
	l.buf = append(l.buf, l.secDig...)
	// Nine digits of a uint32, two at a time from a table: divisions by a constant
	// the compiler turns into multiplications on every architecture, half as many.
	ns := uint32(t - l.secNanos)
	var d [9]byte
	for i := 7; i > 0; i -= 2 {
		q := ns / 100
		r := 2 * (ns - q*100)
		d[i], d[i+1] = digitPairs[r], digitPairs[r+1]
		ns = q
	}
	d[0] = byte('0' + ns)
	l.buf = append(l.buf, d[:]...)
}

// digitPairs holds the two decimal digits of 0 to 99 at 2·n.
const digitPairs = "00010203040506070809101112131415161718192021222324252627282930313233343536373839" +
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879" +
	"8081828384858687888990919293949596979899"

func (l *lineEncoder) size() int    { return len(l.buf) }
func (l *lineEncoder) body() []byte { return l.buf }
func (l *lineEncoder) reset()       { l.buf = l.buf[:0] }
func (l *lineEncoder) head(e *catalog.Entry) (prefix []byte, field string) {
	m, f, tags := lineShape(e)
	var b strings.Builder
	lpMeasurement.WriteString(&b, m)
	for _, t := range tags {
		if t.V == "" {
			continue // line protocol has no empty tag values
		}
		b.WriteByte(',')
		lpTag.WriteString(&b, t.K)
		b.WriteByte('=')
		lpTag.WriteString(&b, t.V)
	}
	b.WriteByte(' ')
	return []byte(b.String()), lpTag.Replace(f)
}

func (l *lineEncoder) points(e *catalog.Entry, pts *series.Points) {
	prefix, field := l.head(e)
	// Each line begins with the series' measurement, tags, field and '=': formatted
	// once per series, copied once per point.
	prefix = append(append(prefix, field...), '=')
	for i, t := range pts.T {
		if pts.Type == series.Float && (math.IsNaN(pts.F[i]) || math.IsInf(pts.F[i], 0)) {
			continue // line protocol has no NaN or infinity
		}
		l.buf = append(l.buf, prefix...)
		switch pts.Type {
		case series.Float:
			l.buf = strconv.AppendFloat(l.buf, pts.F[i], 'g', -1, 64)
		case series.Int:
			l.buf = strconv.AppendInt(l.buf, pts.I[i], 10)
			l.buf = append(l.buf, 'i')
		case series.String:
			l.buf = append(l.buf, '"')
			l.buf = append(l.buf, lpString.Replace(pts.S[i])...)
			l.buf = append(l.buf, '"')
		}
		l.buf = append(l.buf, ' ')
		l.appendTime(t)
		l.buf = append(l.buf, '\n')
	}
}

func (l *lineEncoder) windows(e *catalog.Entry, ws []agg.Window) {
	prefix, field := l.head(e)
	for i := range ws {
		l.buf = append(l.buf, prefix...)
		n := 0
		for _, fn := range aggFns {
			v := ws[i].Eval(fn)
			if v.Kind == series.Unknown {
				continue // min and max of a string series
			}
			if n > 0 {
				l.buf = append(l.buf, ',')
			}
			n++
			l.buf = append(l.buf, field...)
			l.buf = append(l.buf, '_')
			l.buf = append(l.buf, fn.String()...)
			l.buf = append(l.buf, '=')
			if v.Kind == series.Int {
				l.buf = strconv.AppendInt(l.buf, v.I, 10)
				l.buf = append(l.buf, 'i')
			} else {
				l.buf = strconv.AppendFloat(l.buf, v.F, 'g', -1, 64)
			}
		}
		l.buf = append(l.buf, ' ')
		l.appendTime(ws[i].Start)
		l.buf = append(l.buf, '\n')
	}
}
