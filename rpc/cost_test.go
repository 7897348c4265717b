package rpc

import (
	"encoding/binary"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// wide is the size of tsdb's shardWrite: 152 bytes on 64-bit platforms.
type wide struct {
	Shard  [20]byte
	Series string
	Type   uint8
	T      []int64
	V      []float64
	S      []string
	From   int64
	Extra  [40]byte
}

type wideRequest struct {
	Writes []wide
	Reads  []*wide
	ByKey  map[string]wide
	Any    []any
}

// nils returns a msgpack map {field: [n nils]}: n+9 or so bytes whose
// lengths are all honest.
func nils(field string, n int) []byte {
	b := []byte{0x81, 0xa0 | byte(len(field))}
	b = append(b, field...)
	b = binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
	for range n {
		b = append(b, 0xc0)
	}
	return b
}

// allocated returns the bytes allocated while f runs.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestDecodeCostNils: an array of nils, one byte each and every length
// honest, decoded into a slice of wide structs used to cost 152 bytes per
// byte of input. Decode now refuses it, allocating next to nothing; the same
// bytes decoded where they are cheap are accepted, within the bound.
func TestDecodeCostNils(t *testing.T) {
	const n = 1 << 20 // a 1 MiB frame
	for _, field := range []string{"Writes", "ByKey"} {
		msg := nils(field, n)
		if field == "ByKey" { // a map of n pairs of nils: 2n bytes
			msg = append([]byte{0x81, 0xa5}, "ByKey"...)
			msg = binary.BigEndian.AppendUint32(append(msg, 0xdf), n/2)
			for range n {
				msg = append(msg, 0xc0)
			}
		}
		var v wideRequest
		var err error
		grew := allocated(func() { err = Decode(msg, &v) })
		if err == nil || !strings.Contains(err.Error(), "DecodeCostFactor") || errorCode(err) != CodeBadRequest {
			t.Errorf("%s: %d nils: got %v, want a refusal naming DecodeCostFactor", field, n, err)
		}
		if grew > 1<<20 {
			t.Errorf("%s: refusing %d bytes allocated %d", field, len(msg), grew)
		}
	}

	// Pointers cost what they point to: a slice of nil pointers costs 8 a
	// byte, accepted.
	msg := nils("Reads", n)
	var v wideRequest
	var err error
	grew := allocated(func() { err = Decode(msg, &v) })
	if err != nil {
		t.Fatalf("%d nil pointers: %v", n, err)
	}
	if limit := uint64(2*DecodeCostFactor*len(msg) + decodeCostSlack); grew > limit {
		t.Errorf("%d bytes allocated %d, over %d", len(msg), grew, limit)
	}
	// Non-nil pointers to wide structs: each an empty map, one byte, 152
	// bytes allocated: refused.
	msg = []byte{0x81, 0xa5, 'R', 'e', 'a', 'd', 's', 0xdd}
	msg = binary.BigEndian.AppendUint32(msg, n)
	for range n {
		msg = append(msg, 0x80)
	}
	if err := Decode(msg, &v); err == nil || !strings.Contains(err.Error(), "DecodeCostFactor") {
		t.Errorf("%d empty wide structs behind pointers: %v", n, err)
	}
}

// TestDecodeCostHonest: real messages spend several bytes an element and
// are far inside the bound.
func TestDecodeCostHonest(t *testing.T) {
	req := wideRequest{ByKey: map[string]wide{"a": {Series: "x"}}}
	for i := range 5000 {
		req.Writes = append(req.Writes, wide{Series: "pmu17/bus3/vang", T: []int64{int64(i) * 16_666_667}, V: []float64{1.5}})
		req.Any = append(req.Any, i, "s")
	}
	msg := mustEncode(t, req)
	var out wideRequest
	if err := Decode(msg, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Writes) != 5000 || out.Writes[4999].T[0] != 4999*16_666_667 {
		t.Errorf("round trip lost data")
	}
	// The estimate for it, against what msgpack really allocates.
	w := costWalker{b: msg, limit: ^uint64(0)}
	w.value(0, planFor(reflect.TypeOf(&out)))
	grew := allocated(func() { _ = Decode(msg, &wideRequest{}) })
	t.Logf("%d bytes: estimated %d (%.1f a byte), allocated %d (%.1f a byte)",
		len(msg), w.cost, float64(w.cost)/float64(len(msg)), grew, float64(grew)/float64(len(msg)))
	if grew > 3*w.cost+decodeCostSlack {
		t.Errorf("msgpack allocated %d, more than 3 times the estimate %d", grew, w.cost)
	}
}

// FuzzDecodeCost: whatever the input, Decode allocates at most a small
// constant times its size (the estimate's bound, 3 times for msgpack's
// slice growth and size-class rounding, and room for the decoder's state).
func FuzzDecodeCost(f *testing.F) {
	f.Add(nils("Writes", 100))
	f.Add(nils("Reads", 100))
	f.Add(nils("Any", 100))
	f.Add(mustEncode(f, wideRequest{Writes: []wide{{Series: "x", T: []int64{1}}}, ByKey: map[string]wide{"k": {}}, Any: []any{1, "a", []any{nil}}}))
	f.Add(mustEncode(f, target{Name: "x", Ints: []int64{1, 2}, Tags: map[string]string{"a": "b"}, Ptr: &target{}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		limit := uint64(3*DecodeCostFactor*len(b) + 2*decodeCostSlack + 16<<10)
		for _, v := range []any{&wideRequest{}, &target{}, new(any)} {
			var err error
			grew := allocated(func() { err = Decode(b, v) })
			if grew > limit {
				t.Fatalf("decoding %d bytes into %T allocated %d bytes, over %d (err %v)", len(b), v, grew, limit, err)
			}
			// The server's check of a request's first bytes (HandleDecoded)
			// never refuses what Decode would let through, and walks any
			// bytes, well-formed or not, cut anywhere, without panicking.
			p := planFor(reflect.TypeOf(v))
			whole := checkDecodeCostPrefix(b, len(b), p, "") == nil
			for _, k := range []int{0, 1, len(b) / 3, len(b) / 2, len(b) - 1} {
				if k < 0 || k > len(b) {
					continue
				}
				perr := checkDecodeCostPrefix(b[:k], len(b), p, "")
				if perr != nil && (whole || Validate(b) == nil && checkDecodeCost(b, v) == nil) {
					t.Fatalf("%d bytes into %T: the first %d refused (%v), the whole accepted", len(b), v, k, perr)
				}
			}
		}
	})
}
