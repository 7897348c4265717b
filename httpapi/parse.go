package httpapi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/influxdata/line-protocol/v2/lineprotocol"

	"github.com/tsdht/tsdht/internal/netyield"
	"github.com/tsdht/tsdht/tsdb/series"
)

// parseLines parses a body of line protocol into per-series batches. A line that
// does not parse, or whose field's type conflicts with an earlier line of the same
// request, is dropped and counted; reason describes the first such line as
// InfluxDB does ("unable to parse '…': …").
//
// Lines of the common shape — ASCII, no escapes, no quoted strings, no comments —
// are read by a parser of their own (fastline.go), a few times faster than the
// general decoder; from the first line of any other shape on, the rest of the body
// goes to line-protocol/v2's decoder (a quoted string may span lines, so only the
// decoder knows where such a line ends). Both give a line the same meaning
// (FuzzFastLine checks).
//
// The series key of a field is built (tags sorted and escaped) only the first time
// the request names that series; later lines find their batch by the raw bytes of
// measurement, tags and field, without allocating.
func parseLines(body []byte, db string, prec int64, now time.Time) (batches []*seriesBatch, parsed, dropped int, reason string) {
	batches, parsed, dropped, reason, _, _ = parseLinesCached(body, db, prec, now, parseLimits{})
	return batches, parsed, dropped, reason
}

// parseLimits are what parseLinesCached stops at, and the series cache it reads.
type parseLimits struct {
	cache     *seriesCache // series of fast lines named by earlier requests; nil: none
	maxSeries int          // series a request may name (0: no limit): past it, errTooManyInRequest
	// With maxNew > 0, once the request has built more than maxNew series (not found
	// in cache), admitNew is asked, once, for the series named so far (the engine's
	// budget of new series, SeriesAdmitter); its refusal stops the parse.
	maxNew   int
	admitNew func(keys []string) error
	// pace counts the parse's work (a byte of a line, seriesCost a series built) and
	// yields the core at its intervals (yield.go); nil: never.
	pace *netyield.Pacer
}

// errTooManyInRequest stops a parse at the series past parseLimits.maxSeries.
var errTooManyInRequest = errors.New("too many series in one request")

// parseLinesCached is parseLines with the series of fast lines found in cache when
// earlier requests named them, stopping at lim: stopped is errTooManyInRequest at the
// first line that names a series past maxSeries, or admitNew's refusal once the
// request built more than maxNew series; the request is then refused whole, and its
// parse holds no more series than the limit. built counts the series whose key and
// tags were built from their line (not found in cache).
func parseLinesCached(body []byte, db string, prec int64, now time.Time, lim parseLimits) (batches []*seriesBatch, parsed, dropped int, reason string, stopped error, built int) {
	p := newLineParser(db, prec, now, body)
	p.cache, p.maxSeries, p.maxNew, p.admitNew, p.pace = lim.cache, lim.maxSeries, lim.maxNew, lim.admitNew, lim.pace
	rest, line := body, 1
	for len(rest) > 0 {
		end := bytes.IndexByte(rest, '\n')
		l := rest
		if end >= 0 {
			l = rest[:end]
		}
		p.left = len(rest) - len(l)
		if !p.fast(l) {
			p.decode(rest, line)
			break
		}
		if end < 0 || p.tooMany {
			break
		}
		p.pace.Spend(len(l) + 1)
		rest, line = rest[end+1:], line+1
	}
	return p.batches, p.parsed, p.dropped, p.reason, p.stopped, len(p.batches) - p.cached
}

func newLineParser(db string, prec int64, now time.Time, body []byte) *lineParser {
	return &lineParser{db: db, prec: prec, maxTS: math.MaxInt64 / prec, minTS: math.MinInt64 / prec, now: now, body: body, byKey: make(map[string]*seriesBatch),
		byRaw: make(map[string]*seriesBatch), byHead: make(map[string]*lineFields)}
}

// lineParser is the state of parsing one body.
type lineParser struct {
	db   string
	prec int64
	// maxTS and minTS bound a timestamp in units of prec that fits nanoseconds (computed
	// once per request, not with a division per line)
	maxTS, minTS int64
	now          time.Time
	body         []byte

	batches []*seriesBatch
	byKey   map[string]*seriesBatch // series key → batch
	byRaw   map[string]*seriesBatch // raw measurement, tags and field → batch
	byHead  map[string]*lineFields  // "measurement,tags" as a fast line spells them → its fields' batches
	cached  int                     // batches started from the series cache, not built
	parsed  int
	dropped int
	reason  string

	// The line being parsed.
	raw    []byte     // length-prefixed measurement, tag keys and values, then a field key
	tagOff []int      // per tag: start and end of its key, start and end of its value, in raw
	arena  []byte     // field keys of the line
	fields []rawField //
	measS  int        // the measurement in raw
	measE  int

	maxSeries int                       // series a request may name; 0: no limit
	maxNew    int                       // series built past which admitNew is asked (parseLimits)
	admitNew  func(keys []string) error //
	tooMany   bool                      // parsing stopped: stopped says why
	stopped   error

	cache   *seriesCache   // series of fast lines named by earlier requests; nil: none
	left    int            // bytes of the body after the fast line being parsed
	seen    []*seriesBatch // per field of the line: its batch (nil: none, the field was dropped)
	lineKey []byte         // scratch for seriesCache keys

	pace *netyield.Pacer // parseLimits.pace
}

// rawField is one field of a line being parsed.
type rawField struct {
	ks, ke int // its key in the line's arena
	kind   lineprotocol.ValueKind
	f      float64
	i      int64  // Int, and Bool as 1 or 0
	u      uint64 // Uint
	str    string // String
}

// fail drops a line: err says why; a decoder's error quotes line (its number in the
// body, from 1).
func (p *lineParser) fail(err error, line int) {
	p.dropped++
	if p.reason != "" {
		return
	}
	var de *lineprotocol.DecodeError
	if errors.As(err, &de) {
		p.reason = fmt.Sprintf("unable to parse '%s': %v", lineAt(p.body, line), err)
	} else {
		p.reason = err.Error()
	}
}

// begin starts a line of measurement m.
func (p *lineParser) begin(m []byte) {
	p.raw, p.tagOff, p.arena, p.fields = p.raw[:0], p.tagOff[:0], p.arena[:0], p.fields[:0]
	p.raw = binary.AppendUvarint(p.raw, uint64(len(m)))
	p.measS = len(p.raw)
	p.raw = append(p.raw, m...)
	p.measE = len(p.raw)
}

func (p *lineParser) tag(k, v []byte) {
	p.raw = binary.AppendUvarint(p.raw, uint64(len(k)))
	ks := len(p.raw)
	p.raw = append(p.raw, k...)
	ke := len(p.raw)
	p.raw = binary.AppendUvarint(p.raw, uint64(len(v)))
	vs := len(p.raw)
	p.raw = append(p.raw, v...)
	p.tagOff = append(p.tagOff, ks, ke, vs, len(p.raw))
}

// field adds a field of key k; the caller fills in its value.
func (p *lineParser) field(k []byte) *rawField {
	f := rawField{ks: len(p.arena)}
	p.arena = append(p.arena, k...)
	f.ke = len(p.arena)
	p.fields = append(p.fields, f)
	return &p.fields[len(p.fields)-1]
}

// end files the line's fields, stamped t, in their series' batches.
func (p *lineParser) end(t int64) {
	prefix := len(p.raw)
	p.seen = resize(p.seen, len(p.fields))
	for i, f := range p.fields {
		p.raw = binary.AppendUvarint(p.raw[:prefix], uint64(f.ke-f.ks))
		p.raw = append(p.raw, p.arena[f.ks:f.ke]...)
		b := p.byRaw[string(p.raw)]
		if b == nil {
			meas, field := string(p.raw[p.measS:p.measE]), string(p.arena[f.ks:f.ke])
			tags := make([]tagPair, 0, len(p.tagOff)/4)
			for i := 0; i < len(p.tagOff); i += 4 {
				tags = append(tags, tagPair{string(p.raw[p.tagOff[i]:p.tagOff[i+1]]), string(p.raw[p.tagOff[i+2]:p.tagOff[i+3]])})
			}
			if err := sortTags(tags); err != nil {
				p.fail(fmt.Errorf("measurement %q: %v", meas, err), 0)
				continue
			}
			key := LineKey(p.db, meas, tags, field)
			if err := series.ValidateKey(key); err != nil {
				p.fail(fmt.Errorf("measurement %q, field %q: %v (shorten the measurement, tags or field)", meas, field, err), 0)
				continue
			}
			if b = p.byKey[key]; b == nil {
				if b = p.newBatch(key, lineTags(p.db, meas, tags, field), fmt.Sprintf("field %q on measurement %q", field, meas)); b == nil {
					return
				}
				p.builtOne()
			}
			p.byRaw[string(p.raw)] = b
		}
		p.seen[i] = b
		if err := appendValue(&b.pts, t, &f); err != nil {
			p.fail(fmt.Errorf("field type conflict: input %s: %v", b.desc, err), 0)
			continue
		}
		p.parsed++
	}
}

// decode parses body (the rest of the request's body, starting at line first) with
// line-protocol/v2's decoder.
func (p *lineParser) decode(body []byte, first int) {
	dec := lineprotocol.NewDecoderWithBytes(body)
	fail := func(err error) {
		var de *lineprotocol.DecodeError
		if !errors.As(err, &de) {
			p.fail(err, 0)
			return
		}
		// The decoder counts lines from the start of what it was given.
		e := *de
		e.Line += int64(first - 1)
		p.fail(&e, int(e.Line))
	}
	for !p.tooMany && dec.Next() {
		// The line before's bytes, as far as they were read (the decoder does not
		// say where a line ends): its measurement, tags and field keys, and its values.
		p.pace.Spend(len(p.raw) + len(p.arena) + 8*len(p.fields))
		m, err := dec.Measurement()
		if err != nil {
			fail(err)
			continue
		}
		p.begin(m)
		for {
			k, v, err2 := dec.NextTag()
			if err = err2; err != nil || k == nil {
				break
			}
			p.tag(k, v)
		}
		for err == nil {
			k, v, err2 := dec.NextField()
			if err = err2; err != nil || k == nil {
				break
			}
			f := p.field(k)
			f.kind = v.Kind()
			switch f.kind {
			case lineprotocol.Float:
				f.f = v.FloatV()
			case lineprotocol.Int:
				f.i = v.IntV()
			case lineprotocol.Uint:
				f.u = v.UintV()
			case lineprotocol.Bool:
				if v.BoolV() {
					f.i = 1
				}
			case lineprotocol.String:
				f.str = v.StringV() // copied now: the decoder reuses its unescaping buffer
			}
		}
		if err != nil {
			fail(err)
			continue
		}
		t, err := lineTime(dec, p.prec, p.now)
		if err != nil {
			fail(err)
			continue
		}
		p.end(t)
	}
}

// newBatch files the batch of a series the request had not named yet, or returns nil
// and stops the parse when that is one series more than maxSeries.
func (p *lineParser) newBatch(key string, tags map[string]string, desc string) *seriesBatch {
	if p.maxSeries > 0 && len(p.batches) >= p.maxSeries {
		p.tooMany, p.stopped = true, errTooManyInRequest
		return nil
	}
	b := &seriesBatch{key: key, tags: tags, desc: desc}
	p.byKey[key] = b
	p.batches = append(p.batches, b)
	return b
}

// builtOne notes a series built from its line: past maxNew of them, the series named so
// far are put to admitNew, once; a refusal stops the parse.
func (p *lineParser) builtOne() {
	p.pace.Spend(seriesCost)
	if p.maxNew <= 0 || len(p.batches)-p.cached <= p.maxNew {
		return
	}
	p.maxNew = 0
	keys := make([]string, len(p.batches))
	for i, b := range p.batches {
		keys[i] = b.key
	}
	if err := p.admitNew(keys); err != nil {
		p.tooMany, p.stopped = true, err
	}
}

// appendValue appends one line-protocol value. Floats are float, integers int,
// unsigned integers int (refused past 2^63-1), strings string, and booleans int 1 or 0.
func appendValue(p *series.Points, t int64, f *rawField) error {
	var want series.Type
	switch f.kind {
	case lineprotocol.Float:
		want = series.Float
	case lineprotocol.Int, lineprotocol.Uint, lineprotocol.Bool:
		want = series.Int
	case lineprotocol.String:
		want = series.String
	default:
		return fmt.Errorf("unsupported value kind %v", f.kind)
	}
	if p.Type != series.Unknown && p.Type != want {
		return fmt.Errorf("is type %s, already exists as type %s in this request", influxType(want), influxType(p.Type))
	}
	switch f.kind {
	case lineprotocol.Float:
		p.AppendFloat(t, f.f)
	case lineprotocol.Int, lineprotocol.Bool:
		p.AppendInt(t, f.i)
	case lineprotocol.Uint:
		if f.u > math.MaxInt64 {
			return fmt.Errorf("unsigned value %d does not fit a signed 64-bit integer", f.u)
		}
		p.AppendInt(t, int64(f.u))
	case lineprotocol.String:
		if len(f.str) > series.MaxStringValueLen {
			return fmt.Errorf("string value of %d bytes; at most %d", len(f.str), series.MaxStringValueLen)
		}
		p.AppendString(t, f.str)
	}
	return nil
}

// resize returns s with n nil elements, reusing its array when it can.
func resize(s []*seriesBatch, n int) []*seriesBatch {
	if cap(s) < n {
		return make([]*seriesBatch, n)
	}
	s = s[:n]
	clear(s)
	return s
}
