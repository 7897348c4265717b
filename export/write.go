package export

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/influxdata/line-protocol/v2/lineprotocol"

	"github.com/tsdht/tsdht/httpapi"
	"github.com/tsdht/tsdht/tsdb/series"
)

// Writer writes exported series in one format.
type Writer interface {
	// Begin starts the output for the series ss. The lp writer sorts ss by database
	// (stably) and refuses series that line protocol did not write.
	Begin(ss []Series) error
	// Points writes one window of points of s.
	Points(s *Series, p *series.Points) error
	// Close flushes what is buffered; it does not close the underlying writer.
	Close() error
}

// Options tune a Writer or Reader.
type Options struct {
	// TimeUnit is jsonl's unit of timestamps in nanoseconds: 1e6 (milliseconds, as
	// VictoriaMetrics counts them) when 0. An export of a point that is not a whole
	// unit fails rather than round it.
	TimeUnit int64
	// DB is the database of lp lines before any # CONTEXT-DATABASE line (Reader).
	DB string
}

func (o Options) unit() int64 {
	if o.TimeUnit <= 0 {
		return 1e6
	}
	return o.TimeUnit
}

// NewWriter returns a Writer of format f onto w.
func NewWriter(w io.Writer, f Format, opt Options) (Writer, error) {
	bw := bufio.NewWriterSize(w, 1<<16)
	switch f {
	case LP:
		return &lpWriter{w: bw}, nil
	case CSV:
		return &csvWriter{w: bw, cw: csv.NewWriter(bw)}, nil
	case JSONL:
		return &jsonlWriter{w: bw, unit: opt.unit()}, nil
	}
	return nil, fmt.Errorf("format %q: want lp, csv or jsonl", f)
}

// lpWriter writes line protocol in influx_inspect export's layout: a # DDL section
// creating every database, then # DML with a # CONTEXT-DATABASE line before each
// database's points. Each series is one field of one measurement and tag set.
type lpWriter struct {
	w   *bufio.Writer
	enc lineprotocol.Encoder
	db  string
	in  bool // a database context was written
}

func (l *lpWriter) Begin(ss []Series) error {
	if err := l.check(ss); err != nil {
		return err
	}
	sort.SliceStable(ss, func(i, j int) bool { return ss[i].Tag(httpapi.TagDB) < ss[j].Tag(httpapi.TagDB) })
	l.w.WriteString("# DDL\n")
	for i := range ss {
		if db := ss[i].Tag(httpapi.TagDB); i == 0 || db != ss[i-1].Tag(httpapi.TagDB) {
			fmt.Fprintf(l.w, "CREATE DATABASE %s WITH NAME autogen\n", quoteIdent(db))
		}
	}
	l.w.WriteString("# DML\n")
	l.enc.SetPrecision(lineprotocol.Nanosecond)
	return nil
}

// check refuses series that line protocol did not write: lp names them by the
// database, measurement and field /write recorded.
func (l *lpWriter) check(ss []Series) error {
	for i := range ss {
		s := &ss[i]
		if s.Tag(httpapi.TagDB) == "" || s.Tag(httpapi.TagMeasurement) == "" || s.Tag(httpapi.TagField) == "" {
			return fmt.Errorf("series %q was not written as line protocol (it lacks the %s, %s and %s tags): "+
				"export it as csv or jsonl, or select line-protocol series only (--match %s=DB)",
				s.Key, httpapi.TagDB, httpapi.TagMeasurement, httpapi.TagField, httpapi.TagDB)
		}
	}
	return nil
}

// quoteIdent quotes an InfluxQL identifier that is not plain letters, digits and _.
func quoteIdent(s string) string {
	for i, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return strconv.Quote(s)
		}
	}
	return s
}

func (l *lpWriter) Points(s *Series, p *series.Points) error {
	if db := s.Tag(httpapi.TagDB); !l.in || db != l.db {
		l.db, l.in = db, true
		fmt.Fprintf(l.w, "# CONTEXT-DATABASE:%s\n# CONTEXT-RETENTION-POLICY:autogen\n", db)
	}
	meas, field := s.Tag(httpapi.TagMeasurement), s.Tag(httpapi.TagField)
	for i := range p.T {
		var v lineprotocol.Value
		ok := true
		switch p.Type {
		case series.Float:
			v, ok = lineprotocol.FloatValue(p.F[i])
		case series.Int:
			v = lineprotocol.IntValue(p.I[i])
		case series.String:
			v, ok = lineprotocol.StringValue(p.S[i])
		}
		if !ok {
			return fmt.Errorf("series %q at %d: value %s cannot be written as line protocol (NaN, ±Inf and invalid UTF-8 cannot): export it as csv or jsonl", s.Key, p.T[i], p.Value(i))
		}
		l.enc.StartLine(meas)
		for _, t := range s.Tags {
			if len(t.K) < 2 || t.K[:2] != "__" {
				l.enc.AddTag(t.K, t.V)
			}
		}
		l.enc.AddField(field, v)
		l.enc.EndLine(time.Unix(0, p.T[i]))
		if err := l.enc.Err(); err != nil {
			return fmt.Errorf("series %q: %w", s.Key, err)
		}
		if len(l.enc.Bytes()) >= 1<<15 {
			l.w.Write(l.enc.Bytes())
			l.enc.Reset()
		}
	}
	_, err := l.w.Write(l.enc.Bytes())
	l.enc.Reset()
	return err
}

func (l *lpWriter) Close() error { return l.w.Flush() }

// csvHeader is the first line of a csv export; csv import takes it or no header.
var csvHeader = []string{"key", "type", "time", "value"}

type csvWriter struct {
	w   *bufio.Writer
	cw  *csv.Writer
	rec [4]string
}

func (c *csvWriter) Begin([]Series) error { return c.cw.Write(csvHeader) }

func (c *csvWriter) Points(s *Series, p *series.Points) error {
	c.rec[0], c.rec[1] = s.Key, p.Type.String()
	for i := range p.T {
		c.rec[2], c.rec[3] = strconv.FormatInt(p.T[i], 10), p.Value(i)
		if err := c.cw.Write(c.rec[:]); err != nil {
			return err
		}
	}
	return nil
}

func (c *csvWriter) Close() error {
	c.cw.Flush()
	return errors.Join(c.cw.Error(), c.w.Flush())
}

// jsonlWriter writes VictoriaMetrics' JSON lines: per series and window
// {"metric":{"__name__":…,labels…},"values":[…],"timestamps":[…]} plus the fields
// "key" (the tsdht key) and "type" (float, int or string), which VictoriaMetrics
// ignores and tsdht import uses to name and type the series exactly.
type jsonlWriter struct {
	w    *bufio.Writer
	unit int64
	head []byte // `{"metric":…,"key":…,"type":…,` of the series last written
	of   *Series
	buf  []byte
}

func (j *jsonlWriter) Begin([]Series) error { return nil }

// MetricName is the __name__ a series gets in jsonl: its own __name__ tag (a series
// Prometheus remote write made), measurement_field for one line protocol made (as
// VictoriaMetrics names InfluxDB's fields), else its key.
func MetricName(s *Series) string {
	if n := s.Tag("__name__"); n != "" {
		return n
	}
	if m, f := s.Tag(httpapi.TagMeasurement), s.Tag(httpapi.TagField); m != "" && f != "" {
		return m + "_" + f
	}
	return s.Key
}

func (j *jsonlWriter) Points(s *Series, p *series.Points) error {
	if j.of != s {
		metric := map[string]string{"__name__": MetricName(s)}
		for _, t := range s.Tags {
			if t.K != "__name__" {
				metric[t.K] = t.V
			}
		}
		m, err := json.Marshal(metric)
		if err != nil {
			return err
		}
		k, _ := json.Marshal(s.Key)
		j.head = append(append(append(append(append(j.head[:0], `{"metric":`...), m...), `,"key":`...), k...), `,"type":"`...)
		j.head = append(append(j.head, s.Type.String()...), `",`...)
		if s.Tag("__name__") == "" {
			j.head = append(j.head, `"nameless":true,`...)
		}
		j.of = s
	}
	b := append(j.buf[:0], j.head...)
	b = append(b, `"values":[`...)
	for i := range p.T {
		if i > 0 {
			b = append(b, ',')
		}
		switch p.Type {
		case series.Float:
			if f := p.F[i]; math.IsNaN(f) || math.IsInf(f, 0) {
				b = strconv.AppendQuote(b, strconv.FormatFloat(f, 'g', -1, 64))
			} else {
				b = strconv.AppendFloat(b, f, 'g', -1, 64)
			}
		case series.Int:
			b = strconv.AppendInt(b, p.I[i], 10)
		case series.String:
			q, _ := json.Marshal(p.S[i])
			b = append(b, q...)
		}
	}
	b = append(b, `],"timestamps":[`...)
	for i, t := range p.T {
		if t%j.unit != 0 {
			return fmt.Errorf("series %q: timestamp %d is not a whole %s: export jsonl with a finer time unit (ns reads back exactly)", s.Key, t, time.Duration(j.unit))
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, t/j.unit, 10)
	}
	b = append(b, "]}\n"...)
	j.buf = b
	_, err := j.w.Write(b)
	return err
}

func (j *jsonlWriter) Close() error { return j.w.Flush() }
