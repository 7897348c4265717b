package export

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/tsdht/tsdht/httpapi"
	"github.com/tsdht/tsdht/tsdb/series"
)

// Limits of an import. A line longer than MaxLineBytes is refused (naming it); a batch
// holds at most BatchPoints points (csv, jsonl: whole lines, so a jsonl line of more
// is one batch) or BatchLines lines of line protocol — what bounds an import's memory.
const (
	MaxLineBytes = 16 << 20
	BatchPoints  = 10_000
	BatchLines   = 5_000
)

// Write is the points of one series an import read, with its tags.
type Write = httpapi.SeriesWrite

// Reader reads an import, batch by batch.
type Reader struct {
	f    Format
	sc   *bufio.Scanner
	line int // lines read
	now  time.Time

	// lp
	db        string
	ddl       bool     // inside a # DDL section
	Databases []string // databases the # DDL section creates, in order

	// csv
	cr     *csv.Reader
	header bool // the first record was looked at

	// jsonl
	unit int64 // ns per unit of timestamps
}

// NewReader returns a reader of format f from r. opt.DB is the database of line
// protocol before any # CONTEXT-DATABASE line; opt.TimeUnit is jsonl's time unit.
func NewReader(r io.Reader, f Format, opt Options) (*Reader, error) {
	rd := &Reader{f: f, now: time.Now(), db: opt.DB, unit: opt.unit()}
	switch f {
	case LP, JSONL:
		rd.sc = bufio.NewScanner(r)
		rd.sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	case CSV:
		rd.cr = csv.NewReader(r)
		rd.cr.FieldsPerRecord = -1
		rd.cr.ReuseRecord = true
	default:
		return nil, fmt.Errorf("format %q: want lp, csv or jsonl", f)
	}
	return rd, nil
}

// Line returns how many lines the reader has consumed.
func (r *Reader) Line() int { return r.line }

// scan returns the next line.
func (r *Reader) scan() ([]byte, error) {
	if !r.sc.Scan() {
		if err := r.sc.Err(); err != nil {
			if errors.Is(err, bufio.ErrTooLong) {
				return nil, fmt.Errorf("line %d: longer than %d bytes", r.line+1, MaxLineBytes)
			}
			return nil, err
		}
		return nil, io.EOF
	}
	r.line++
	return r.sc.Bytes(), nil
}

// Next returns the next batch of writes, io.EOF after the last. An error names the line.
func (r *Reader) Next() ([]Write, error) {
	switch r.f {
	case LP:
		return r.nextLP()
	case CSV:
		return r.nextCSV()
	}
	return r.nextJSONL()
}

// nextLP reads line protocol as influx_inspect export writes it: # DDL (CREATE
// DATABASE statements, noted) and # DML sections, # CONTEXT-DATABASE:name lines that
// set the database of the lines after them (# CONTEXT-RETENTION-POLICY is read and
// ignored: tsdht has no retention policies), other # lines comments. Lines outside
// any section are DML.
func (r *Reader) nextLP() ([]Write, error) {
	var body []byte
	var lines []int // input line number of each line of body
	n := 0
	db := r.db
	for n < BatchLines && len(body) < 1<<20 {
		l, err := r.scan()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		t := bytes.TrimSpace(l)
		if len(t) == 0 {
			continue
		}
		if t[0] == '#' {
			d := strings.TrimSpace(string(t[1:]))
			switch {
			case d == "DDL":
				r.ddl = true
			case d == "DML":
				r.ddl = false
			case strings.HasPrefix(d, "CONTEXT-DATABASE:"):
				r.db = strings.TrimSpace(strings.TrimPrefix(d, "CONTEXT-DATABASE:"))
				if n > 0 {
					return r.parseLP(body, db, lines)
				}
				db = r.db
			}
			continue
		}
		if r.ddl {
			if f := strings.Fields(string(t)); len(f) >= 3 && strings.EqualFold(f[0], "CREATE") && strings.EqualFold(f[1], "DATABASE") {
				r.Databases = append(r.Databases, strings.Trim(f[2], `"`))
			}
			continue
		}
		if db == "" {
			return nil, fmt.Errorf("line %d: no database for this line: give --db DB (or db= at /api/v1/import), or a # CONTEXT-DATABASE:DB line before it", r.line)
		}
		lines = append(lines, r.line)
		body = append(append(body, l...), '\n')
		n++
	}
	if n == 0 {
		return nil, io.EOF
	}
	return r.parseLP(body, db, lines)
}

// parseLP names and parses lines of line protocol as /write does; a line that does not
// parse is named by its number in the input.
func (r *Reader) parseLP(body []byte, db string, lines []int) ([]Write, error) {
	ws, _, dropped, reason := httpapi.ParseLineProtocol(body, db, 1, r.now)
	if dropped == 0 {
		return ws, nil
	}
	for i, l := range bytes.Split(bytes.TrimSuffix(body, []byte("\n")), []byte("\n")) {
		if _, _, d, why := httpapi.ParseLineProtocol(l, db, 1, r.now); d > 0 && i < len(lines) {
			return nil, fmt.Errorf("line %d: %s", lines[i], why)
		}
	}
	return nil, fmt.Errorf("lines %d–%d: %s", lines[0], lines[len(lines)-1], reason)
}

// nextCSV reads "key,type,time,value" records (the header line optional): time in
// integer nanoseconds, type float, int or string. Consecutive records of a series make
// one write.
func (r *Reader) nextCSV() ([]Write, error) {
	var out []Write
	points := 0
	for points < BatchPoints {
		rec, err := r.cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return nil, fmt.Errorf("line %d: %v", pe.Line, pe.Err)
			}
			return nil, err
		}
		r.line, _ = r.cr.FieldPos(0)
		if !r.header {
			r.header = true
			if len(rec) == 4 && strings.EqualFold(rec[0], "key") && strings.EqualFold(rec[2], "time") {
				continue
			}
		}
		if len(rec) != 4 {
			return nil, fmt.Errorf("line %d: want 4 fields key,type,time,value, got %d", r.line, len(rec))
		}
		typ, err := series.ParseType(rec[1])
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", r.line, err)
		}
		t, err := strconv.ParseInt(rec[2], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: time %q: want integer nanoseconds since the epoch", r.line, rec[2])
		}
		if len(out) == 0 || out[len(out)-1].Key != rec[0] {
			if err := series.ValidateKey(rec[0]); err != nil {
				return nil, fmt.Errorf("line %d: %v", r.line, err)
			}
			out = append(out, Write{Key: strings.Clone(rec[0])})
		}
		w := &out[len(out)-1]
		if w.Pts.Len() > 0 && w.Pts.Type != typ {
			return nil, fmt.Errorf("line %d: series %q is %s on an earlier line, %s here", r.line, rec[0], w.Pts.Type, typ)
		}
		if err := appendParsed(&w.Pts, typ, t, rec[3]); err != nil {
			return nil, fmt.Errorf("line %d: series %q: %v", r.line, rec[0], err)
		}
		points++
	}
	if len(out) == 0 {
		return nil, io.EOF
	}
	return out, nil
}

// appendParsed appends the value s of type typ at t.
func appendParsed(p *series.Points, typ series.Type, t int64, s string) error {
	switch typ {
	case series.Float:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("value %q is not a float", s)
		}
		p.AppendFloat(t, f)
	case series.Int:
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("value %q is not an int64", s)
		}
		p.AppendInt(t, i)
	case series.String:
		if len(s) > series.MaxStringValueLen {
			return fmt.Errorf("string value of %d bytes; at most %d", len(s), series.MaxStringValueLen)
		}
		p.AppendString(t, strings.Clone(s))
	default:
		return fmt.Errorf("type %v: want float, int or string", typ)
	}
	return nil
}

// jsonLine is one line of VictoriaMetrics' JSON lines, with tsdht's own fields.
type jsonLine struct {
	Metric     map[string]string `json:"metric"`
	Values     []any             `json:"values"`
	Timestamps []int64           `json:"timestamps"`
	Key        string            `json:"key"`      // tsdht's: the series key
	Type       string            `json:"type"`     // tsdht's: float, int or string
	Nameless   bool              `json:"nameless"` // tsdht's: __name__ was made up by the export
}

// nextJSONL reads lines until BatchPoints points. A line without "key" (one
// VictoriaMetrics wrote) is named as Prometheus remote write names its labels; without
// "type" its values are floats (VictoriaMetrics' only kind) or strings if strings.
func (r *Reader) nextJSONL() ([]Write, error) {
	var out []Write
	points := 0
	for points < BatchPoints {
		l, err := r.scan()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		w, err := r.jsonWrite(l)
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", r.line, err)
		}
		out = append(out, w)
		points += w.Pts.Len()
	}
	if len(out) == 0 {
		return nil, io.EOF
	}
	return out, nil
}

// jsonWrite decodes one jsonl line.
func (r *Reader) jsonWrite(l []byte) (Write, error) {
	var jl jsonLine
	dec := json.NewDecoder(bytes.NewReader(l))
	dec.UseNumber()
	if err := dec.Decode(&jl); err != nil {
		return Write{}, fmt.Errorf("not a JSON object of metric, values and timestamps: %v", err)
	}
	if len(jl.Values) != len(jl.Timestamps) {
		return Write{}, fmt.Errorf("%d values but %d timestamps", len(jl.Values), len(jl.Timestamps))
	}
	w := Write{Key: jl.Key, Tags: jl.Metric}
	if jl.Nameless {
		delete(w.Tags, "__name__")
	}
	if w.Key == "" {
		if jl.Metric["__name__"] == "" {
			return Write{}, errors.New(`no "key" and no metric.__name__: cannot name the series`)
		}
		w.Key = httpapi.LabelsKey(jl.Metric)
	}
	if err := series.ValidateKey(w.Key); err != nil {
		return Write{}, err
	}
	typ := series.Float
	if jl.Type != "" {
		var err error
		if typ, err = series.ParseType(jl.Type); err != nil {
			return Write{}, err
		}
	} else if len(jl.Values) > 0 {
		if s, ok := jl.Values[0].(string); ok {
			if _, err := strconv.ParseFloat(s, 64); err != nil {
				typ = series.String
			}
		}
	}
	unit := r.unit
	for i, v := range jl.Values {
		t := jl.Timestamps[i]
		if t > maxInt64/unit || t < minInt64/unit {
			return Write{}, fmt.Errorf("timestamp %d × %d ns is out of range", t, unit)
		}
		var s string
		switch v := v.(type) {
		case json.Number:
			s = v.String()
		case string:
			s = v
		case nil:
			continue // VictoriaMetrics' null: no sample
		default:
			return Write{}, fmt.Errorf("value %d: want a number or a string", i)
		}
		if err := appendParsed(&w.Pts, typ, t*unit, s); err != nil {
			return Write{}, fmt.Errorf("value %d: %v", i, err)
		}
	}
	return w, nil
}

const (
	maxInt64 = 1<<63 - 1
	minInt64 = -1 << 63
)
