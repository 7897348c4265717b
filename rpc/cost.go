package rpc

import (
	"encoding/binary"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// DecodeCostFactor bounds what Decode lets msgpack allocate: at most this
// many bytes per byte of input, plus decodeCostSlack. Validate bounds how
// many values a message can declare (one per byte), but not what each costs
// once decoded: an array of nils, one byte each, decoded into a slice of
// 152-byte structs allocates 152 bytes per byte of input, so one honest
// 4 MiB frame asks for 600 MiB. Decode therefore estimates, before decoding,
// what the message would allocate in the type it is decoded into (see
// decodeCost) and refuses it, as a bad request, when that exceeds the
// bound. 16 lets through a slice of 16-byte values (strings, interfaces,
// small structs) made of one-byte elements; a real message spends several
// bytes per element and stays far below it (TestDecodeCostHonest logs 2 a
// byte). The estimate counts what the decoded value holds; msgpack builds
// each slice twice over (make, then append) and small allocations round up
// to size classes, so what it allocates in total reaches about 3 times the
// estimate (FuzzDecodeCost checks that bound).
const DecodeCostFactor = 16

// decodeCostSlack is the allocation any message may cost regardless of its
// size: a few pointers and maps of a tiny message are no threat.
const decodeCostSlack = 4 << 10

// Estimated costs, in bytes, of what msgpack allocates where the target type
// does not say: a value decoded into an interface (boxed scalars, []any,
// map[string]any) and a map entry's overhead.
const (
	ifaceValueCost = 16
	ifaceEntryCost = 64
	mapEntryCost   = 16
)

// checkDecodeCost returns an error if decoding b (already validated) into v
// could allocate more than DecodeCostFactor × len(b) + decodeCostSlack bytes.
func checkDecodeCost(b []byte, v any) error {
	t := reflect.TypeOf(v)
	if t == nil {
		return nil
	}
	p := planFor(t)
	if !p.allocates() {
		return nil
	}
	if cost, limit := decodeCost(b, len(b), p); cost > limit {
		return fmt.Errorf("rpc: decode into %T: the message (%d bytes) would allocate more than %d bytes (%d per byte, rpc.DecodeCostFactor)",
			v, len(b), limit, DecodeCostFactor)
	}
	return nil
}

// checkDecodeCostPrefix is checkDecodeCost for the first bytes of a message
// of total bytes, the rest not read yet: it refuses the message when what
// prefix declares already costs more than the whole message may, so that
// the rest need not be read. typ names the type of p, for the error. A
// prefix is never charged more than the whole message would be, so what it
// refuses checkDecodeCost would refuse too.
func checkDecodeCostPrefix(prefix []byte, total int, p *plan, typ string) error {
	if !p.allocates() {
		return nil
	}
	if cost, limit := decodeCost(prefix, total, p); cost > limit {
		return fmt.Errorf("rpc: decode into %s: the message (%d bytes) would allocate more than %d bytes (%d per byte, rpc.DecodeCostFactor); refused from its first %d bytes",
			typ, total, limit, DecodeCostFactor, len(prefix))
	}
	return nil
}

// decodeCost walks b, the first bytes (or all) of a message of total bytes,
// with plan p, and returns what decoding it would allocate, as far as the
// walk went, and the limit for total bytes. It stops once past the limit.
func decodeCost(b []byte, total int, p *plan) (cost, limit uint64) {
	limit = DecodeCostFactor*uint64(total) + decodeCostSlack
	if len(b) == 0 {
		return 0, limit
	}
	w := costWalker{b: b, limit: limit}
	w.value(0, p)
	return w.cost, limit
}

// allocates reports whether decoding into p's type can allocate per element.
func (p *plan) allocates() bool {
	return !(p.kind == planFree || p.kind == planPointer && (p.elem.kind == planFree || p.elem.kind == planString))
}

type planKind uint8

const (
	planFree    planKind = iota // scalars, and structs and arrays of them: no allocation
	planString                  // string or []byte: its payload
	planCustom                  // has its own decoder: charged its wire bytes
	planPointer                 // *T
	planIface                   // interface: msgpack picks the type
	planSlice                   // []T
	planArray                   // [N]T
	planMap                     // map[K]V
	planStruct                  // struct with fields that may allocate
)

// plan is what decoding into one type may allocate, computed once per type.
type plan struct {
	kind      planKind
	size      uint64           // pointer: the pointee's size; slice: an element's; map: a key's plus a value's
	elem, key *plan            // pointer, slice, array, map (elem is the value)
	fields    map[string]*plan // struct: by msgpack name
	list      []*plan          // struct: in order, for structs sent as arrays
}

var plans sync.Map // reflect.Type → *plan

var (
	customDecoder = reflect.TypeFor[msgpack.CustomDecoder]()
	unmarshaler   = reflect.TypeFor[msgpack.Unmarshaler]()
	timeType      = reflect.TypeFor[time.Time]()
	freePlan      = &plan{kind: planFree}
)

func planFor(t reflect.Type) *plan {
	if p, ok := plans.Load(t); ok {
		return p.(*plan)
	}
	building := make(map[reflect.Type]*plan)
	p := buildPlan(t, building)
	for t, p := range building {
		plans.LoadOrStore(t, p)
	}
	return p
}

// buildPlan computes t's plan; building holds the plans under construction,
// for recursive types.
func buildPlan(t reflect.Type, building map[reflect.Type]*plan) *plan {
	if p, ok := plans.Load(t); ok {
		return p.(*plan)
	}
	if p, ok := building[t]; ok {
		return p
	}
	p := &plan{}
	building[t] = p
	switch {
	case t == timeType:
		p.kind = planFree
	case t.Implements(customDecoder) || t.Implements(unmarshaler) ||
		(t.Kind() != reflect.Pointer && (reflect.PointerTo(t).Implements(customDecoder) || reflect.PointerTo(t).Implements(unmarshaler))):
		p.kind = planCustom
	default:
		switch t.Kind() {
		case reflect.String:
			p.kind = planString
		case reflect.Pointer:
			p.kind, p.size, p.elem = planPointer, uint64(t.Elem().Size()), buildPlan(t.Elem(), building)
		case reflect.Interface:
			p.kind = planIface
		case reflect.Slice:
			if t.Elem().Kind() == reflect.Uint8 {
				p.kind = planString // msgpack decodes bin and str into []byte; an array element by element, 1 byte each
				p.elem, p.size = freePlan, 1
			} else {
				p.kind, p.size, p.elem = planSlice, uint64(t.Elem().Size()), buildPlan(t.Elem(), building)
			}
		case reflect.Array:
			p.kind, p.elem = planArray, buildPlan(t.Elem(), building)
			if p.elem.kind == planFree {
				p.kind, p.elem = planFree, nil
			}
		case reflect.Map:
			p.kind, p.key, p.elem = planMap, buildPlan(t.Key(), building), buildPlan(t.Elem(), building)
			p.size = uint64(t.Key().Size() + t.Elem().Size())
		case reflect.Struct:
			p.kind, p.fields = planStruct, make(map[string]*plan)
			addFields(p, t, building)
			if !slices.ContainsFunc(p.list, func(f *plan) bool { return f.kind != planFree }) {
				// A struct of scalars allocates nothing. (A struct under
				// construction is only reached through a pointer, slice
				// or map, never checked here.)
				p.kind, p.fields, p.list = planFree, nil, nil
			}
		default:
			p.kind = planFree
		}
	}
	return p
}

// addFields adds t's fields to the struct plan p as msgpack/v5 names them:
// the "msgpack" tag's name, else the field's; "-" omitted; embedded structs
// without a name, or tagged inline, flattened.
func addFields(p *plan, t reflect.Type, building map[reflect.Type]*plan) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("msgpack")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		ft := f.Type
		if (f.Anonymous && name == "") || strings.Contains(","+opts+",", ",inline,") {
			inner := ft
			if inner.Kind() == reflect.Pointer {
				inner = inner.Elem()
			}
			if inner.Kind() == reflect.Struct && !reflect.PointerTo(inner).Implements(customDecoder) {
				addFields(p, inner, building)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fp := buildPlan(ft, building)
		p.fields[name] = fp
		p.list = append(p.list, fp)
	}
}

// costWalker walks a msgpack value alongside a plan, adding up what decoding
// it would allocate. It stops once past limit, and where its input ends or
// stops making sense (a message's first bytes, or one not validated): what
// it counted until then is charged, never more than the whole message would
// be.
type costWalker struct {
	b     []byte
	limit uint64
	cost  uint64
	end   bool // the input ended, or was malformed, where the walk reached
}

// done reports whether the walk is over: past the limit, or at the end of
// its input. Every loop over elements checks it, so that a refused
// message's remaining elements are not walked one by one.
func (w *costWalker) done() bool { return w.cost > w.limit || w.end }

// stop ends the walk at the end of its input; it returns len(w.b), the
// offset to return from there.
func (w *costWalker) stop() int {
	w.end = true
	return len(w.b)
}

// head reads the header of the value at off (off < len(w.b)): its code
// class, the count of elements (array), pairs (map) or payload bytes (str,
// bin, ext), and the offset of its contents. If the length field is cut off
// it ends the walk and returns body = len(w.b).
func (w *costWalker) head(off int) (c byte, n uint64, body int) {
	c = w.b[off]
	body = off + 1
	size := 0
	switch {
	case c >= 0x80 && c <= 0x8f:
		return 0xdf, uint64(c & 0x0f), body
	case c >= 0x90 && c <= 0x9f:
		return 0xdd, uint64(c & 0x0f), body
	case c >= 0xa0 && c <= 0xbf:
		return 0xdb, uint64(c & 0x1f), body
	case c == 0xc4, c == 0xd9:
		size = 1
	case c == 0xc5, c == 0xda, c == 0xdc, c == 0xde:
		size = 2
	case c == 0xc6, c == 0xdb, c == 0xdd, c == 0xdf:
		size = 4
	default:
		return c, 0, body
	}
	if len(w.b)-body < size {
		return c, 0, w.stop()
	}
	switch size {
	case 1:
		n = uint64(w.b[body])
	case 2:
		n = uint64(binary.BigEndian.Uint16(w.b[body:]))
	default:
		n = uint64(binary.BigEndian.Uint32(w.b[body:]))
	}
	return c, n, body + size
}

func isArray(c byte) bool { return c == 0xdc || c == 0xdd }
func isMap(c byte) bool   { return c == 0xde || c == 0xdf }
func isBytes(c byte) bool { return c >= 0xc4 && c <= 0xc6 || c >= 0xd9 && c <= 0xdb }

// skip returns the offset past the value at off; one cut off or malformed
// ends the walk.
func (w *costWalker) skip(off int) int {
	end, err := skipValue(w.b, off, 0)
	if err != nil {
		return w.stop()
	}
	return end
}

// payload returns the offset past n bytes of payload at body; a payload cut
// off ends the walk.
func (w *costWalker) payload(body int, n uint64) int {
	if n > uint64(len(w.b)-body) {
		return w.stop()
	}
	return body + int(n)
}

// value adds the cost of decoding the value at off with plan p and returns
// the offset past it.
func (w *costWalker) value(off int, p *plan) int {
	if w.done() {
		return len(w.b) // refused anyway, or nothing more to see: stop walking
	}
	if off >= len(w.b) {
		return w.stop()
	}
	if w.b[off] == 0xc0 { // nil: a nil pointer, slice or map, or a zero value
		return off + 1
	}
	switch p.kind {
	case planFree:
		return w.skip(off)
	case planCustom:
		end := w.skip(off)
		w.cost += uint64(end - off)
		return end
	case planPointer:
		w.cost += p.size
		return w.value(off, p.elem)
	case planIface:
		return w.iface(off)
	}
	c, n, body := w.head(off)
	if w.end {
		return body
	}
	switch {
	case p.kind == planString && isBytes(c):
		w.cost += n
		return w.payload(body, n)
	case (p.kind == planSlice || p.kind == planString && p.elem != nil) && isArray(c): // planString with elem: []byte
		w.cost += n * p.size
		for i := uint64(0); i < n && !w.done(); i++ {
			body = w.value(body, p.elem)
		}
		return body
	case p.kind == planArray && isArray(c):
		for i := uint64(0); i < n && !w.done(); i++ {
			body = w.value(body, p.elem)
		}
		return body
	case p.kind == planMap && isMap(c):
		w.cost += n * (2*p.size + mapEntryCost)
		for i := uint64(0); i < n && !w.done(); i++ {
			body = w.value(body, p.key)
			body = w.value(body, p.elem)
		}
		return body
	case p.kind == planStruct && isMap(c):
		for i := uint64(0); i < n && !w.done(); i++ {
			if body >= len(w.b) {
				return w.stop()
			}
			kc, kn, kbody := w.head(body)
			var fp *plan
			if !w.end && (kc == 0xdb || kc == 0xd9 || kc == 0xda) && kn <= uint64(len(w.b)-kbody) {
				fp = p.fields[string(w.b[kbody:kbody+int(kn)])]
			}
			body = w.skip(body)
			if fp == nil { // unknown field: msgpack skips it
				body = w.skip(body)
				continue
			}
			body = w.value(body, fp)
		}
		return body
	case p.kind == planStruct && isArray(c):
		for i := uint64(0); i < n && !w.done(); i++ {
			if i < uint64(len(p.list)) {
				body = w.value(body, p.list[i])
			} else {
				body = w.skip(body)
			}
		}
		return body
	}
	// A value that does not fit the type: msgpack fails on it, or converts
	// it in ways this walk does not follow. Charge it as an interface would
	// cost, which is more than any typed decoding of it.
	return w.iface(off)
}

// iface adds the cost of decoding the value at off into an interface.
func (w *costWalker) iface(off int) int {
	if w.done() {
		return len(w.b)
	}
	if off >= len(w.b) {
		return w.stop()
	}
	c, n, body := w.head(off)
	if w.end {
		return body
	}
	switch {
	case c == 0xc0:
		return off + 1
	case isBytes(c):
		w.cost += ifaceValueCost + 8 + n
		return w.payload(body, n)
	case isArray(c):
		w.cost += ifaceValueCost + 8 + n*ifaceValueCost
		for i := uint64(0); i < n && !w.done(); i++ {
			body = w.iface(body)
		}
		return body
	case isMap(c):
		w.cost += ifaceValueCost + 48 + n*ifaceEntryCost
		for i := uint64(0); i < 2*n && !w.done(); i++ {
			body = w.iface(body)
		}
		return body
	}
	w.cost += ifaceValueCost
	return w.skip(off)
}
