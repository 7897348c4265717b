package httpapi

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzParseLines: any body parses without panicking, and every point it accepts
// belongs to a valid key of the right shape.
func FuzzParseLines(f *testing.F) {
	f.Add([]byte("cpu,host=a v=1.5,n=2i,s=\"x\",b=true 1\n"))
	f.Add([]byte("m\\ x,k\\,=v\\= f\\=1=1u\n\nbad line\nm v=1 99999999999999999999\n"))
	f.Add([]byte("m,a=1,a=2 v=1\nm v=1i\nm v=1\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, prec := range []int64{1, 60e9} {
			batches, parsed, dropped, reason := parseLines(body, "db", prec, time.Unix(0, 0))
			n := 0
			for _, b := range batches {
				if err := b.pts.Valid(); err != nil {
					t.Fatalf("%q: invalid batch: %v", b.key, err)
				}
				n += b.pts.Len()
			}
			if n != parsed || (dropped > 0) != (reason != "") {
				t.Fatalf("parsed %d, batches hold %d; dropped %d, reason %q", parsed, n, dropped, reason)
			}
		}
	})
}

// FuzzDecodeWriteRequest: hostile protobuf never panics nor allocates past what it
// carries, and a request this package encodes decodes to what was encoded.
func FuzzDecodeWriteRequest(f *testing.F) {
	f.Add(encodeWriteRequest([]promSeries{{labels: [][2]string{{"__name__", "up"}, {"a", "b"}}, samples: [][2]float64{{1, 1000}}}}), "up", 1.0)
	f.Add([]byte{0x0a, 0x05, 0x0a, 0x03, 0x0a, 0x01}, "x", 0.0)
	f.Fuzz(func(t *testing.T, b []byte, name string, v float64) {
		_, _, _ = decodeWriteRequest(b)
		if name == "" || math.IsNaN(v) || !utf8.ValidString(name) || len(name) > 200 {
			return
		}
		enc := encodeWriteRequest([]promSeries{{labels: [][2]string{{"__name__", name}}, samples: [][2]float64{{v, 5}}}})
		batches, _, err := decodeWriteRequest(enc)
		if err != nil || len(batches) != 1 || batches[0].pts.F[0] != v || batches[0].pts.T[0] != 5e6 || batches[0].tags["__name__"] != name {
			t.Fatalf("round trip of %q %v: %v %+v", name, v, err, batches)
		}
	})
}

// An escaped string value survives the escaped keys parsed after it (the decoder
// reuses its unescaping buffer), and lines naming one series with their tags in
// another order share its batch.
func TestParseLinesEscapesAndTagOrder(t *testing.T) {
	body := []byte("m,b=2,a=1 s=\"x\\\"y\",k\\ ey=1 10\nm,a=1,b=2 s=\"z\" 20\n")
	batches, parsed, dropped, reason := parseLines(body, "db", 1, time.Unix(0, 0))
	if parsed != 3 || dropped != 0 || reason != "" || len(batches) != 2 {
		t.Fatalf("parsed %d dropped %d (%s), %d batches", parsed, dropped, reason, len(batches))
	}
	if b := batches[0]; b.key != "db/m,a=1,b=2#s" || b.pts.Len() != 2 || b.pts.S[0] != `x"y` || b.pts.S[1] != "z" {
		t.Fatalf("string series %q: %+v", b.key, b.pts)
	}
	if b := batches[1]; b.key != `db/m,a=1,b=2#k\ ey` || b.pts.F[0] != 1 || b.tags[TagField] != "k ey" || b.tags["a"] != "1" {
		t.Fatalf("float series %q: %+v %v", b.key, b.pts, b.tags)
	}
}

// FuzzDecimal: the fast timestamp parser agrees with strconv wherever it answers.
func FuzzDecimal(f *testing.F) {
	for _, s := range []string{"0", "-1", "1700000000000000000", "9223372036854775807", "-9223372036854775808",
		"9223372036854775808", "99999999999999999999", "12a", "", "-", "+5", "007"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, ok := decimal([]byte(s))
		w, err := strconv.ParseInt(s, 10, 64)
		if ok && (err != nil || v != w) {
			t.Fatalf("decimal(%q) = %d, strconv says %d, %v", s, v, w, err)
		}
		if !ok && err == nil && len(strings.TrimPrefix(s, "-")) <= 19 && !strings.HasPrefix(s, "+") {
			t.Fatalf("decimal(%q) refused what strconv reads as %d", s, w)
		}
	})
}
