package rpc

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"
)

func nested(depth int) []byte {
	return append(bytes.Repeat([]byte{0x91}, depth-1), 0x90)
}

func mustEncode(t testing.TB, v any) []byte {
	t.Helper()
	b, err := Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// hostile are inputs that declare more than they hold, or nest too deep:
// each must fail Validate and Decode cheaply.
var hostile = []struct {
	name string
	in   []byte
	want string // in the error
}{
	{"empty", nil, "offset 0: value expected"},
	{"never used code", []byte{0xc1}, "invalid code 0xc1"},
	{"array32 of 2^31 in 5 bytes", []byte{0xdd, 0x80, 0, 0, 0}, "declares 2147483648 values, only 0 bytes remain"},
	{"array32 of 2^32-1", []byte{0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0}, "offset 0"},
	{"map32 of 2^31 pairs", []byte{0xdf, 0x80, 0, 0, 0, 1, 2}, "declares 4294967296 values"},
	{"map16 needs 2 bytes a pair", []byte{0xde, 0, 2, 1, 2, 3}, "declares 4 values, only 3 bytes remain"},
	{"str32 of 4 GB", []byte{0xdb, 0xff, 0xff, 0xff, 0xff, 'a'}, "declares 4294967295 bytes, 1 remain"},
	{"str32 of 2^31 on 32-bit", []byte{0xdb, 0x80, 0, 0, 0}, "declares 2147483648 bytes"},
	{"bin32 of 4 GB", []byte{0xc6, 0xff, 0xff, 0xff, 0xff}, "declares 4294967295 bytes"},
	{"ext32 of 4 GB", []byte{0xc9, 0xff, 0xff, 0xff, 0xff, 1}, "declares 4294967296 bytes"},
	{"str8 cut short", []byte{0xd9, 5, 'a', 'b'}, "declares 5 bytes, 2 remain"},
	{"fixstr cut short", []byte{0xa3, 'a'}, "declares 3 bytes, 1 remain"},
	{"length field cut short", []byte{0xdb, 0, 0}, "length field needs 4 bytes, 2 remain"},
	{"uint64 cut short", []byte{0xcf, 0, 0, 0}, "declares 8 bytes, 3 remain"},
	{"fixext16 cut short", []byte{0xd8, 1, 2, 3}, "declares 17 bytes"},
	{"fixarray cut short", []byte{0x93, 1, 2}, "declares 3 values, only 2 bytes remain"},
	{"second element missing", []byte{0x92, 0xc4, 0}, "offset 3: value expected"},
	{"65 nested arrays", nested(65), "offset 64: nested deeper than 64"},
	{"10000 nested arrays", nested(10000), "nested deeper than 64"},
	{"nested maps", bytes.Repeat([]byte{0x81, 0xc0}, 100), "nested deeper than 64"},
	{"two values", []byte{1, 2}, "1 trailing bytes after the value at offset 1"},
	{"array then garbage", []byte{0x91, 0x01, 0xc0, 0xc0}, "2 trailing bytes"},
	{"deep in a struct", []byte{0x81, 0xa1, 'A', 0xdd, 0x7f, 0xff, 0xff, 0xff}, "offset 3"},
}

func TestValidate(t *testing.T) {
	valid := []struct {
		name string
		in   []byte
	}{
		{"nil", []byte{0xc0}},
		{"bools", []byte{0x92, 0xc2, 0xc3}},
		{"fixints", []byte{0x92, 0x7f, 0xe0}},
		{"all int widths", []byte{0x98, 0xcc, 1, 0xcd, 0, 1, 0xce, 0, 0, 0, 1, 0xcf, 0, 0, 0, 0, 0, 0, 0, 1,
			0xd0, 1, 0xd1, 0, 1, 0xd2, 0, 0, 0, 1, 0xd3, 0, 0, 0, 0, 0, 0, 0, 1}},
		{"floats", []byte{0x92, 0xca, 0, 0, 0, 0, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"empty containers", []byte{0x94, 0x90, 0x80, 0xdc, 0, 0, 0xdf, 0, 0, 0, 0}},
		{"strings", []byte{0x93, 0xa1, 'a', 0xd9, 1, 'b', 0xdb, 0, 0, 0, 1, 'c'}},
		{"binaries", []byte{0x93, 0xc4, 0, 0xc5, 0, 1, 'x', 0xc6, 0, 0, 0, 0}},
		{"exts", []byte{0x97, 0xd4, 1, 1, 0xd5, 1, 1, 2, 0xd6, 1, 1, 2, 3, 4, 0xd7, 1, 1, 2, 3, 4, 5, 6, 7, 8,
			0xd8, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 0xc7, 1, 5, 'x', 0xc8, 0, 0, 5}},
		{"64 nested arrays", nested(64)},
		{"struct", mustEncode(t, struct {
			S  string
			B  []byte
			M  map[string][]int64
			F  float64
			T  time.Time
			P  *int
			AS []struct{ X, Y int }
		}{"s", []byte{1}, map[string][]int64{"k": {1, -1 << 40}}, 1.5, time.Unix(1563703200, 5), nil, []struct{ X, Y int }{{1, 2}}})},
	}
	for _, tt := range valid {
		t.Run("valid/"+tt.name, func(t *testing.T) {
			if err := Validate(tt.in); err != nil {
				t.Errorf("Validate(%x) = %v", tt.in, err)
			}
		})
	}
	for _, tt := range hostile {
		t.Run("hostile/"+tt.name, func(t *testing.T) {
			err := Validate(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate(%.20x) = %v, want an error containing %q", tt.in, err, tt.want)
			}
		})
	}
}

// target is what the Decode tests and fuzzing decode into: every kind of
// field whose length msgpack/v5 takes from the input.
type target struct {
	Name   string
	Data   []byte
	Ints   []int64
	Names  []string
	Nested [][]float64
	Tags   map[string]string
	Points []struct {
		T int64
		V float64
	}
	Any  any
	Ptr  *target
	When time.Time
}

// TestDecodeHostile: hostile input fails to Decode, without a panic or a
// large allocation.
func TestDecodeHostile(t *testing.T) {
	for _, tt := range hostile {
		t.Run(tt.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			var v target
			err := Decode(tt.in, &v)
			runtime.ReadMemStats(&after)
			if err == nil {
				t.Fatal("Decode succeeded")
			}
			if code := errorCode(err); code != CodeBadRequest {
				t.Errorf("error code %q, want %q", code, CodeBadRequest)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
				t.Errorf("allocated %d bytes", grew)
			}
		})
	}
}

// TestDecodeMismatch: well-formed input of the wrong shape is an error too.
func TestDecodeMismatch(t *testing.T) {
	var v target
	if err := Decode(mustEncode(t, map[string]any{"Ints": "not a list"}), &v); err == nil {
		t.Error("decoding a string into []int64 succeeded")
	}
	if err := Decode([]byte{0xd7, 0xff, 0, 0, 0, 0, 0, 0, 0, 0}, &v.When); err != nil {
		t.Errorf("decoding a timestamp: %v", err)
	}
}

func TestEncodeDecode(t *testing.T) {
	in := target{
		Name: "pmu17/bus3/vang", Data: []byte{0, 1, 2}, Ints: []int64{-1, 1 << 40}, Names: []string{"a", ""},
		Nested: [][]float64{{1.5}, nil}, Tags: map[string]string{"site": "lab"},
		Points: []struct {
			T int64
			V float64
		}{{1, 2}}, Ptr: &target{Name: "inner"}, When: time.Unix(1563703200, 42).UTC(),
	}
	var out target
	if err := Decode(mustEncode(t, in), &out); err != nil {
		t.Fatal(err)
	}
	if out.Name != in.Name || string(out.Data) != string(in.Data) || out.Ints[1] != in.Ints[1] || out.Tags["site"] != "lab" ||
		out.Points[0].V != 2 || out.Ptr.Name != "inner" || !out.When.Equal(in.When) {
		t.Errorf("round trip: got %+v, want %+v", out, in)
	}
	if compact := mustEncode(t, int64(5)); len(compact) != 1 {
		t.Errorf("int64(5) encodes to %d bytes, want 1: integers must be compact", len(compact))
	}
}

// TestDecodeRecovers: msgpack/v5 v5.4.1 panics on some well-formed input
// (nil into a time.Time field: seven bytes); Decode turns that into an error.
func TestDecodeRecovers(t *testing.T) {
	var v struct{ When time.Time }
	err := Decode([]byte{0x81, 0xa4, 'W', 'h', 'e', 'n', 0xc0}, &v)
	if err == nil || !strings.Contains(err.Error(), "panic") || errorCode(err) != CodeBadRequest {
		t.Errorf("got %v, want a recovered panic with code %q", err, CodeBadRequest)
	}
}

// FuzzValidateDecode: Decode of arbitrary bytes returns, never panics, and
// accepts only what Validate accepts. (msgpack/v5 itself panics on some
// validated inputs, see TestDecodeRecovers; Decode recovers those.)
func FuzzValidateDecode(f *testing.F) {
	f.Add(mustEncode(f, target{Name: "x", Ints: []int64{1, 2}, Tags: map[string]string{"a": "b"}, Ptr: &target{}}))
	f.Add([]byte{0x81, 0xa4, 'I', 'n', 't', 's', 0x92, 0x01, 0xcf, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{0x81, 0xa3, 'A', 'n', 'y', 0xd7, 0xff, 0, 0, 0, 0, 0, 0, 0, 0})
	for _, h := range hostile {
		f.Add(h.in)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var v target
		err := Decode(b, &v)
		if err == nil && Validate(b) != nil {
			t.Fatalf("Decode accepted %x, which Validate refuses", b)
		}
		if err != nil && errorCode(err) != CodeBadRequest {
			t.Fatalf("Decode error %v has code %q, want %q", err, errorCode(err), CodeBadRequest)
		}
	})
}
