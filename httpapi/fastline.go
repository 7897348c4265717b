package httpapi

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"

	"github.com/influxdata/line-protocol/v2/lineprotocol"

	"github.com/tsdht/tsdht/tsdb/series"
)

// The fast path of line protocol.
//
// Nearly every line a collector sends looks like
//
//	measurement,tag=value,tag=value field=1.5,other=2i 1700000000000000000
//
// with no escapes and no quoted strings. fast reads exactly such lines — printable ASCII,
// single spaces between the three sections, one '=' in each tag and field, values that
// are plain decimal floats, integers (i), unsigned integers (u) or booleans — and gives
// them the meaning line-protocol/v2's decoder gives them; anything else (an escape, a
// quote, a comment, a tab, a carriage return, non-ASCII, a value of another form, an
// error) it leaves to the decoder, so errors are always the decoder's. FuzzFastLine
// holds the two to the same answers.

// fast parses line l (without its newline) into p if it has the common shape, and
// reports whether it did; an empty line is skipped.
func (p *lineParser) fast(l []byte) bool {
	if len(l) == 0 {
		return true
	}
	if l[0] == '#' {
		return false // a comment
	}
	// One pass: the characters allowed, and where the (at most two) spaces are.
	sp1, sp2 := -1, -1
	for i, c := range l {
		switch {
		case c == ' ':
			if sp1 < 0 {
				sp1 = i
			} else if sp2 < 0 {
				sp2 = i
			} else {
				return false
			}
		case c < '!' || c > '~' || c == '"' || c == '\\':
			return false
		}
	}
	if sp1 <= 0 {
		return false
	}
	head, fields, ts := l[:sp1], l[sp1+1:], []byte(nil)
	if sp2 >= 0 {
		fields, ts = l[sp1+1:sp2], l[sp2+1:]
		if len(ts) == 0 {
			return false
		}
	}
	if len(fields) == 0 {
		return false
	}
	var t int64
	if ts != nil {
		v, ok := decimal(ts)
		if !ok || v > p.maxTS || v < p.minTS {
			return false // the decoder's to refuse
		}
		t = v * p.prec
	} else {
		t = p.now.UnixNano()
	}

	// Fields first: a line naming series this request already named (nearly every
	// line) needs only its values read and its batches found by its own bytes.
	p.fields, p.arena = p.fields[:0], p.arena[:0]
	for len(fields) > 0 {
		comma := bytes.IndexByte(fields, ',')
		fd := fields
		if comma >= 0 {
			fd, fields = fields[:comma], fields[comma+1:]
			if len(fields) == 0 {
				return false // a trailing comma
			}
		} else {
			fields = nil
		}
		eq := bytes.IndexByte(fd, '=')
		if eq <= 0 || eq == len(fd)-1 || bytes.IndexByte(fd[eq+1:], '=') >= 0 {
			return false
		}
		f := rawField{ks: len(p.arena)}
		p.arena = append(p.arena, fd[:eq]...)
		f.ke = len(p.arena)
		if !fastValue(&f, fd[eq+1:]) {
			return false
		}
		p.fields = append(p.fields, f)
	}
	// Each field's batch: the line's "measurement,tags" as it spells them found once,
	// then its fields among those lines of that head named.
	p.seen = resize(p.seen, len(p.fields))
	h := p.byHead[string(head)]
	all := h != nil
	for i, f := range p.fields {
		var b *seriesBatch
		if h != nil {
			b = h.find(p.arena[f.ks:f.ke], i)
		}
		p.seen[i] = b
		all = all && b != nil
	}
	if !all && !p.fromCache(head) {
		return p.fastNew(head, t)
	}
	if p.tooMany {
		return true // the parse stops at this line
	}
	for i := range p.fields {
		b := p.seen[i]
		p.grow(&b.pts, p.fields[i].kind)
		if err := appendValue(&b.pts, t, &p.fields[i]); err != nil {
			p.fail(fmt.Errorf("field type conflict: input %s: %v", b.desc, err), 0)
			continue
		}
		p.parsed++
	}
	return true
}

// grow makes room in a full batch for the points the rest of the body will likely
// bring it: its share of the lines read so far, projected over the whole body. Left
// to append's doubling, a request's batches had allocated two to three times their
// final size, a quarter of a node's allocations under scripts/bench-http. Below
// growFrom points the projection is too rough (a series' first line would claim the
// whole body) and append's own growth applies. The projection is at most the lines
// the body can hold, so a hostile body costs no more than its own size allows.
func (p *lineParser) grow(pts *series.Points, kind lineprotocol.ValueKind) {
	n := len(pts.T)
	read := len(p.body) - p.left
	if n < growFrom || n < cap(pts.T) || read <= 0 {
		return
	}
	want := max(int(int64(n)*int64(len(p.body))/int64(read))+1, n+n/4+1) - n
	pts.T = slices.Grow(pts.T, want)
	switch kind {
	case lineprotocol.Float:
		pts.F = slices.Grow(pts.F, want)
	case lineprotocol.Int, lineprotocol.Uint, lineprotocol.Bool:
		pts.I = slices.Grow(pts.I, want)
	case lineprotocol.String:
		pts.S = slices.Grow(pts.S, want)
	}
}

// growFrom is the size from which grow projects a batch's size.
const growFrom = 8

// fastNew files a fast line some of whose series this request had not named yet: its
// measurement and tags are read, its series keys built (end), and its batches found
// by its own bytes from then on.
func (p *lineParser) fastNew(head []byte, t int64) bool {
	head0 := head[:len(head):len(head)] // appending copies
	comma := bytes.IndexByte(head, ',')
	m := head
	if comma >= 0 {
		m = head[:comma]
	}
	if len(m) == 0 || bytes.IndexByte(m, '=') >= 0 {
		return false
	}
	fields, arena := p.fields, p.arena
	p.begin(m)
	p.fields, p.arena = fields, arena
	for comma >= 0 {
		head = head[comma+1:]
		comma = bytes.IndexByte(head, ',')
		tg := head
		if comma >= 0 {
			tg = head[:comma]
		}
		eq := bytes.IndexByte(tg, '=')
		if eq <= 0 || eq == len(tg)-1 || bytes.IndexByte(tg[eq+1:], '=') >= 0 {
			return false
		}
		p.tag(tg[:eq], tg[eq+1:])
	}
	fields, arena = p.fields, p.arena
	p.end(t)
	var h *lineFields
	for i, b := range p.seen {
		if b != nil {
			f := fields[i]
			if h == nil {
				h = p.lineFieldsOf(head0)
			}
			h.set(arena[f.ks:f.ke], b)
			p.cache.put(p.cacheKey(head0, arena[f.ks:f.ke]), b)
		}
	}
	return true
}

// lineFields are the batches of the fields that a request's fast lines of one
// "measurement,tags" (as the lines spell it) named.
type lineFields struct {
	names   []string
	batches []*seriesBatch
	index   map[string]int // position by name, once names outgrow a scan
}

// lineFieldsScan is how many fields of a head are found by a scan; past it, by index.
const lineFieldsScan = 8

// lineFieldsOf returns head's lineFields, made empty, with room for the fields of the
// line being parsed, if the request had none yet.
func (p *lineParser) lineFieldsOf(head []byte) *lineFields {
	h := p.byHead[string(head)]
	if h == nil {
		h = &lineFields{names: make([]string, 0, len(p.fields)), batches: make([]*seriesBatch, 0, len(p.fields))}
		p.byHead[string(head)] = h
	}
	return h
}

// find returns the batch of field name, or nil; hint is where the field likely is
// (its place in the line: lines of a head list their fields in the same order).
func (h *lineFields) find(name []byte, hint int) *seriesBatch {
	if hint < len(h.names) && h.names[hint] == string(name) {
		return h.batches[hint]
	}
	if j := h.pos(name); j >= 0 {
		return h.batches[j]
	}
	return nil
}

// pos returns the position of field name, or -1.
func (h *lineFields) pos(name []byte) int {
	if h.index != nil {
		if j, ok := h.index[string(name)]; ok {
			return j
		}
		return -1
	}
	for j, n := range h.names {
		if n == string(name) {
			return j
		}
	}
	return -1
}

// set files b as the batch of field name.
func (h *lineFields) set(name []byte, b *seriesBatch) {
	if j := h.pos(name); j >= 0 {
		h.batches[j] = b
		return
	}
	h.names = append(h.names, string(name))
	h.batches = append(h.batches, b)
	switch {
	case h.index != nil:
		h.index[h.names[len(h.names)-1]] = len(h.names) - 1
	case len(h.names) > lineFieldsScan:
		h.index = make(map[string]int, 2*len(h.names))
		for j, n := range h.names {
			h.index[n] = j
		}
	}
}

// fromCache finds the batches of the line's fields (p.seen) whose series earlier
// requests named, through p.cache: it reports whether it found them all, and then
// the line is read as one whose series this request had named.
func (p *lineParser) fromCache(head []byte) bool {
	if p.cache == nil {
		return false
	}
	for i, f := range p.fields {
		if p.seen[i] != nil {
			continue
		}
		sp := p.cache.get(p.cacheKey(head, p.arena[f.ks:f.ke]))
		if sp == nil {
			return false
		}
		b := p.byKey[sp.key]
		if b == nil {
			if b = p.newBatch(sp.key, sp.tags, sp.desc); b == nil {
				return true // the parse stops at this line
			}
			p.cached++
		}
		p.seen[i] = b
		p.lineFieldsOf(head).set(p.arena[f.ks:f.ke], b)
	}
	return true
}

// cacheKey returns the seriesCache key of a field of a line (in a scratch buffer).
func (p *lineParser) cacheKey(head, field []byte) []byte {
	p.lineKey = append(append(append(append(append(p.lineKey[:0], p.db...), 0), head...), ' '), field...)
	return p.lineKey
}

// fastValue reads a field value of the common forms into f.
func fastValue(f *rawField, v []byte) bool {
	switch last := v[len(v)-1]; {
	case last == 'i':
		if !plainInt(v[:len(v)-1], true) {
			return false
		}
		n, err := strconv.ParseInt(string(v[:len(v)-1]), 10, 64)
		f.kind, f.i = lineprotocol.Int, n
		return err == nil
	case last == 'u':
		if !plainInt(v[:len(v)-1], false) {
			return false
		}
		n, err := strconv.ParseUint(string(v[:len(v)-1]), 10, 64)
		f.kind, f.u = lineprotocol.Uint, n
		return err == nil
	}
	switch string(v) {
	case "t", "T", "true", "True", "TRUE":
		f.kind, f.i = lineprotocol.Bool, 1
		return true
	case "f", "F", "false", "False", "FALSE":
		f.kind, f.i = lineprotocol.Bool, 0
		return true
	}
	x, ok := fastFloat(v)
	f.kind, f.f = lineprotocol.Float, x
	return ok
}

// pow10 holds the powers of ten a float64 represents exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
	1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// fastFloat reads b if it is -?digits(.digits)?([eE][+-]?digits)?, as
// strconv.ParseFloat does; it reports false for any other form and for values out of
// float64's range (the decoder's to refuse). A decimal of at most
// 15 significant digits scaled by at most 10^±22 (a sensor's "21.37", "-0.005",
// "1.5e3") is the exact quotient or product of two exactly represented float64s, which
// IEEE arithmetic rounds correctly: the same float64 ParseFloat returns (Clinger's
// fast path). Anything else goes to strconv. FuzzFastFloat holds the two equal.
func fastFloat(b []byte) (float64, bool) {
	i, neg := 0, false
	if i < len(b) && b[i] == '-' {
		i, neg = i+1, true
	}
	var mant uint64
	digits, exp := 0, 0
	start := i
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		mant = mant*10 + uint64(b[i]-'0')
		digits++
	}
	if i == start {
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		frac := i
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			mant = mant*10 + uint64(b[i]-'0')
			digits++
		}
		if i == frac {
			return 0, false
		}
		exp = frac - i
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		eneg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			eneg = b[i] == '-'
			i++
		}
		e, es := 0, i
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			if e < 10000 {
				e = e*10 + int(b[i]-'0')
			}
		}
		if i == es {
			return 0, false
		}
		if eneg {
			e = -e
		}
		exp += e
	}
	if i != len(b) {
		return 0, false
	}
	// digits <= 15 keeps mant below 10^15 < 2^53 (and never lets it overflow).
	if digits <= 15 && exp >= -22 && exp <= 22 {
		x := float64(mant)
		if exp < 0 {
			x /= pow10[-exp]
		} else {
			x *= pow10[exp]
		}
		if neg {
			x = -x
		}
		return x, true
	}
	x, err := strconv.ParseFloat(string(b), 64)
	return x, err == nil
}

// plainInt reports whether b is digits, after a '-' if neg allows one.
func plainInt(b []byte, neg bool) bool {
	if neg && len(b) > 0 && b[0] == '-' {
		b = b[1:]
	}
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
