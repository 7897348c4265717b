package rpc

import (
	"bytes"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

var envelopes = []envelope{
	{kind: kindRequest, id: 1, method: "dht.FindNode", timeout: 3 * time.Second, body: []byte{0xc0}},
	{kind: kindRequest, id: math.MaxUint64, method: "", body: []byte{}},
	{kind: kindRequest, id: 1 << 32, method: strings.Repeat("m", 300), timeout: math.MaxInt64, body: bytes.Repeat([]byte{7}, 70000)},
	{kind: kindResponse, id: 127, body: []byte("ok")},
	{kind: kindResponse, id: 128, code: "bad_input", msg: "series has type float64", body: []byte{}},
	{kind: kindResponse, id: 65536, code: strings.Repeat("c", 32), msg: strings.Repeat("x", 70000), body: []byte{}},
}

func TestEnvelopeRoundTrip(t *testing.T) {
	for _, want := range envelopes {
		b := want.appendTo(nil)
		if err := Validate(b); err != nil {
			t.Errorf("encoded envelope is not valid msgpack: %v", err)
		}
		var got envelope
		if err := got.decode(b); err != nil {
			t.Errorf("decode(%.40x): %v", b, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("round trip: got %+.60v, want %+.60v", got, want)
		}
	}
}

func TestEnvelopeCompact(t *testing.T) {
	// A small call costs a few bytes of envelope.
	e := envelope{kind: kindRequest, id: 5, method: "ping", timeout: 0, body: nil}
	if n := len(e.appendTo(nil)); n != 12 {
		t.Errorf("small request envelope is %d bytes, want 12", n)
	}
}

// TestEnvelopeNewerVersion: fields a newer peer appends are skipped.
func TestEnvelopeNewerVersion(t *testing.T) {
	b := []byte{0x98, 2, 1, 9, 0xa0, 0xa0, 0xc4, 1, 'x', 0x92, 1, 2, 0xa3, 'n', 'e', 'w'}
	var e envelope
	if err := e.decode(b); err != nil {
		t.Fatal(err)
	}
	if e.kind != kindResponse || e.id != 9 || string(e.body) != "x" {
		t.Errorf("got %+v", e)
	}
}

func TestEnvelopeBad(t *testing.T) {
	valid := envelopes[0].appendTo(nil)
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "type code needs 1 bytes"},
		{"not an array", []byte{0xc0}, "array expected"},
		{"too few fields", []byte{0x95, 1, 0, 1, 0xa0, 0}, "5 fields, want at least 6"},
		{"version 0", []byte{0x96, 0, 0, 1, 0xa0, 0, 0xc4, 0}, "version 0"},
		{"unknown kind", []byte{0x96, 1, 2, 1, 0xa0, 0, 0xc4, 0}, "unknown envelope kind 2"},
		{"negative id", []byte{0x96, 1, 0, 0xff, 0xa0, 0, 0xc4, 0}, "unsigned integer expected"},
		{"method not a string", []byte{0x96, 1, 0, 1, 0xc4, 0, 0, 0xc4, 0}, "string expected"},
		{"body not binary", []byte{0x96, 1, 0, 1, 0xa0, 0, 0xa0}, "binary expected"},
		{"body of 4 GB", []byte{0x96, 1, 0, 1, 0xa0, 0, 0xc6, 0xff, 0xff, 0xff, 0xff}, "binary needs 4294967295 bytes"},
		{"method of 2^31", []byte{0x96, 1, 0, 1, 0xdb, 0x80, 0, 0, 0}, "string needs 2147483648 bytes"},
		{"array32 of 2^32 fields", []byte{0xdd, 0xff, 0xff, 0xff, 0xff, 1, 0, 1, 0xa0, 0, 0xc4, 0}, "value expected"},
		{"trailing bytes", append(valid, 0), "1 trailing bytes"},
		{"truncated", valid[:len(valid)-1], "binary needs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e envelope
			err := e.decode(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("decode(%x) = %v, want an error containing %q", tt.in, err, tt.want)
			}
		})
	}
}

// FuzzEnvelope: the decoder never panics; whatever it accepts is valid
// msgpack and survives re-encoding; and any envelope built from the fuzzed
// fields round-trips.
func FuzzEnvelope(f *testing.F) {
	for _, e := range envelopes[:2] {
		f.Add(e.appendTo(nil), uint64(0), "m", "", []byte{})
	}
	f.Add([]byte{0x98, 2, 1, 9, 0xa0, 0xa0, 0xc4, 1, 'x', 0x92, 1, 2, 0xa3, 'n', 'e', 'w'}, uint64(1<<40), "", "code", []byte{1})
	f.Fuzz(func(t *testing.T, b []byte, id uint64, method, code string, body []byte) {
		var e envelope
		if e.decode(b) == nil {
			if err := Validate(b); err != nil {
				t.Fatalf("decode accepted %x, which is not valid msgpack: %v", b, err)
			}
			var again envelope
			if err := again.decode(e.appendTo(nil)); err != nil || !reflect.DeepEqual(again, e) {
				t.Fatalf("re-encoding %+v: got %+v, %v", e, again, err)
			}
		}
		for _, want := range []envelope{
			{kind: kindRequest, id: id, method: method, timeout: time.Duration(id >> 1), body: body},
			{kind: kindResponse, id: id, code: code, msg: method, body: body},
		} {
			if want.body == nil {
				want.body = []byte{}
			}
			var got envelope
			if err := got.decode(want.appendTo(nil)); err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("round trip of %+v: got %+v, %v", want, got, err)
			}
		}
	})
}
