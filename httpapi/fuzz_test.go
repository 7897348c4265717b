package httpapi

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/klauspost/compress/snappy"

	"github.com/tsdht/tsdht/internal/hostile"
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
		got, stale, err := decodeWriteRequest(b, nil)
		nSeries, nSamples, cerr := countInSteps(b, 1+len(name)%7)
		if err == nil {
			// The count the limits are checked on is the decoder's: every sample,
			// stored or stale, of every series.
			decoded := stale
			for _, bt := range got {
				decoded += bt.pts.Len()
			}
			if cerr != nil || decoded != nSamples || len(got) > nSeries {
				t.Fatalf("counted %d series, %d samples (%v); decoded %d series, %d samples", nSeries, nSamples, cerr, len(got), decoded)
			}
		}
		if name == "" || math.IsNaN(v) || !utf8.ValidString(name) || len(name) > 200 {
			return
		}
		enc := encodeWriteRequest([]promSeries{{labels: [][2]string{{"__name__", name}}, samples: [][2]float64{{v, 5}}}})
		batches, _, err := decodeWriteRequest(enc, nil)
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
		"9223372036854775808", "99999999999999999999", "12a", "", "-", "+5", "007",
		// eight digits at a time: a byte just outside '0'..'9' in every position
		"12345678", "1234567:", "/2345678", "1234:678", "12345678123456/8", "1234567812345678", "-12345678",
		"1700000000000000000", "170000000000000000:", "17000000\x0000000000"} {
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

// FuzzFastLine: wherever the fast path reads a line (twice: once new, once known; and
// in a later request, through the series cache), line-protocol/v2's decoder reads it
// the same: the same series, types, timestamps and values, the same lines dropped
// and the same reason.
func FuzzFastLine(f *testing.F) {
	for _, s := range []string{
		"cpu,host=a,region=eu v=1.5,n=2i,u=3u,b=true 1700000000000000000",
		"cpu v=-0.5e-3,w=1E+5,x=.5,y=1.,z=+1", "m v=1", "m,t=1 v=t,w=F,x=FALSE,y=True", "m v=1 -5", "m v=1 -0",
		"m v=1 99999999999999999999", "m v=1e999", "m v=9223372036854775808i", "m v=18446744073709551616u",
		"m,a=1,a=2 v=1", "m v=1,v=2i", "m,t=a=b v=1", "m v=a=b", "m=x v=1", "m,t v=1", "m v=", "m  v=1", "m v=1,",
		"m v=1 1 ", "m\tv=1", "m v=1\r", "# c", "m v=1x", "m v=0x10", "m v=1_0", "m v=inf", "m v=NaN", "m v=-i", "m v=i",
	} {
		f.Add(s, int8(0))
	}
	f.Fuzz(func(t *testing.T, line string, precIdx int8) {
		line = strings.ReplaceAll(line, "\n", "")
		precs := []int64{1, 1e3, 1e6, 1e9, 60e9, 3600e9}
		prec := precs[int(uint8(precIdx))%len(precs)]
		now := time.Unix(1700000000, 123)
		// Twice: the second time the fast path finds the line's series by its bytes.
		body := []byte(line + "\n" + line)
		fast := newLineParser("db", prec, now, body)
		if !fast.fast([]byte(line)) || !fast.fast([]byte(line)) {
			return
		}
		dec := newLineParser("db", prec, now, body)
		dec.decode(body, 1)
		// And as a later request of a handler whose earlier request named the series.
		cache := newSeriesCache()
		first := newLineParser("db", prec, now, body)
		first.cache = cache
		first.fast([]byte(line))
		later := newLineParser("db", prec, now, body)
		later.cache = cache
		later.fast([]byte(line))
		later.fast([]byte(line))
		for _, p := range []*lineParser{fast, later} {
			sameAsDecoder(t, line, p, dec)
		}
	})
}

func sameAsDecoder(t *testing.T, line string, fast, dec *lineParser) {
	t.Helper()
	{
		if fast.parsed != dec.parsed || fast.dropped != dec.dropped || fast.reason != dec.reason || len(fast.batches) != len(dec.batches) {
			t.Fatalf("%q: fast path parsed %d dropped %d (%q) in %d series; the decoder %d, %d (%q) in %d",
				line, fast.parsed, fast.dropped, fast.reason, len(fast.batches), dec.parsed, dec.dropped, dec.reason, len(dec.batches))
		}
		for i, a := range fast.batches {
			b := dec.batches[i]
			if a.key != b.key || a.desc != b.desc || !maps.Equal(a.tags, b.tags) || !reflect.DeepEqual(a.pts, b.pts) {
				t.Fatalf("%q: fast path read %q %v %+v; the decoder %q %v %+v", line, a.key, a.tags, a.pts, b.key, b.tags, b.pts)
			}
		}
	}
}

// The fast path takes the lines collectors send (so that it is used at all), and
// leaves the others to the decoder.
func TestFastLineTakesCommonLines(t *testing.T) {
	p := newLineParser("db", 1, time.Unix(0, 0), nil)
	for _, l := range []string{"bench,host=h1 v=12.37 1700000000000000000", "cpu,cpu=cpu0,host=a usage_idle=99.5,usage_user=0.25 1",
		"mem used=123456i,free=9u,ok=true", "m v=-1.5e-7"} {
		if !p.fast([]byte(l)) {
			t.Errorf("fast path refused %q", l)
		}
	}
	for _, l := range []string{`m s="x" 1`, `m\ x v=1`, "# comment", "m v=1\r", " m v=1", "m v=1.", "m v=inf"} {
		if p.fast([]byte(l)) {
			t.Errorf("fast path took %q, the decoder's to read", l)
		}
	}
	if p.parsed != 7 || p.dropped != 0 { // 1 + 2 + 3 + 1 fields
		t.Fatalf("parsed %d, dropped %d (%s)", p.parsed, p.dropped, p.reason)
	}
}

// FuzzFastFloat: fastFloat reads exactly the plain decimal forms and returns, bit for
// bit, the float64 strconv.ParseFloat returns; it refuses what strconv refuses (out of
// range) and every other form.
func FuzzFastFloat(f *testing.F) {
	for _, s := range []string{"0", "-0", "21.37", "-0.005", "1.5e3", "1E+5", "-2.5e-22", "123456789012345",
		"1234567890123456", "37.370000000000005", "9007199254740993", "1e22", "1e23", "1e-22", "1e-23",
		"1e308", "1e309", "4.9e-324", "1e-400", "00000000000000000001.5", ".5", "1.", "+1", "1e", "1e+",
		"0.1e99999999999", "1_0", "NaN", "inf", "-"} {
		f.Add(s)
	}
	plain := regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := fastFloat([]byte(s))
		want, err := strconv.ParseFloat(s, 64)
		switch {
		case !plain.MatchString(s):
			if ok {
				t.Fatalf("fastFloat(%q) read a value of another form as %v", s, got)
			}
		case err != nil:
			if ok {
				t.Fatalf("fastFloat(%q) = %v, strconv refuses it: %v", s, got, err)
			}
		case !ok:
			t.Fatalf("fastFloat(%q) refused what strconv reads as %v", s, want)
		case math.Float64bits(got) != math.Float64bits(want):
			t.Fatalf("fastFloat(%q) = %v (%#x), strconv says %v (%#x)", s, got, math.Float64bits(got), want, math.Float64bits(want))
		}
	})
}

// countInSteps counts b's series and samples with a writeCounter fed b's prefixes
// step bytes apart, as decodeSnappy feeds it, then b whole.
func countInSteps(b []byte, step int) (series, samples int, err error) {
	c := writeCounter{maxSeries: math.MaxInt, maxSamples: math.MaxInt, total: len(b)}
	for k := step; k < len(b); k += step {
		if err := c.advance(b[:k], false); err != nil {
			return c.series, c.samples, err
		}
	}
	err = c.advance(b, true)
	return c.series, c.samples, err
}

// FuzzDecodeSnappy: any block decodes without panicking, to what the snappy package
// decodes it to when it decodes it at all, every step seeing a prefix of the output;
// what the snappy package encodes decodes whole.
func FuzzDecodeSnappy(f *testing.F) {
	f.Add(snappy.Encode(nil, []byte(strings.Repeat("abcabcabc", 10_000))))
	f.Add(hostile.RemoteWriteBomb(100_000))
	f.Add([]byte{0x05, 0x00, 'a', 0x0d, 0x01})
	f.Fuzz(func(t *testing.T, src []byte) {
		var last int
		step := func(out []byte, final bool) error {
			if len(out) < last {
				t.Fatalf("a step saw %d bytes after one saw %d", len(out), last)
			}
			last = len(out)
			return nil
		}
		if n, err := snappy.DecodedLen(src); err != nil || n > 1<<24 {
			return // the caller refuses it before decoding
		}
		got, err := decodeSnappy(nil, src, step)
		if err == nil {
			want, werr := snappy.Decode(nil, src)
			if werr != nil || !bytes.Equal(got, want) {
				t.Fatalf("decoded %d bytes; the snappy package: %d bytes, %v", len(got), len(want), werr)
			}
		}
		if len(src) > 0 {
			plain := src[:len(src)/2]
			last = 0
			got, err := decodeSnappy(nil, snappy.Encode(nil, plain), step)
			if err != nil || !bytes.Equal(got, plain) {
				t.Fatalf("round trip of %d bytes: %v", len(plain), err)
			}
		}
	})
}

// TestFastLineFieldsOfOneHead holds the fast path to the decoder's answers on lines of
// one measurement and tags whose fields come in changing orders and subsets, more of
// them than a scan finds (lineFieldsScan), new ones after the first lines: each field
// found by its name among the head's, never by its place in the line.
func TestFastLineFieldsOfOneHead(t *testing.T) {
	var lines []string
	for i := 0; i < 40; i++ {
		var fs []string
		for k := 0; k < 2*lineFieldsScan+3; k++ {
			f := (k*7 + i*3) % (2*lineFieldsScan + 3)
			if i < 5 && f > lineFieldsScan || (i+k)%4 == 0 { // some fields only later, some lines without a few
				continue
			}
			fs = append(fs, fmt.Sprintf("f%d=%d.5", f, i*100+f))
		}
		lines = append(lines, fmt.Sprintf("m,host=a,dc=x %s %d", strings.Join(fs, ","), 1700000000+i))
	}
	body := []byte(strings.Join(lines, "\n"))
	dec := newLineParser("db", 1, time.Unix(1700000000, 0), body)
	dec.decode(body, 1)
	cache := newSeriesCache()
	for _, name := range []string{"first request", "later request"} {
		fast := newLineParser("db", 1, time.Unix(1700000000, 0), body)
		fast.cache = cache
		for _, l := range lines {
			if !fast.fast([]byte(l)) {
				t.Fatalf("%s: the fast path left %q to the decoder", name, l)
			}
		}
		if name == "later request" && fast.cached != len(fast.batches) {
			t.Fatalf("later request: %d of %d series from the cache", fast.cached, len(fast.batches))
		}
		sameAsDecoder(t, name, fast, dec)
	}
	if dec.parsed < 40*lineFieldsScan {
		t.Fatalf("the decoder parsed %d values: the lines are not what the test means", dec.parsed)
	}
}
