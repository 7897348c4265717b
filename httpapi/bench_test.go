package httpapi

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// BenchmarkWrite posts batches of 5,000 lines (100 series × 50 points) through /write
// to the package's 3-node test cluster (rf 3, stores in memory) and reports points/s.
func BenchmarkWrite(b *testing.B) {
	start := time.Now().Add(-6 * time.Hour).Truncate(time.Hour).UnixNano()
	var body bytes.Buffer
	b.ReportAllocs()
	n := 0
	for i := 0; i < b.N; i++ {
		body.Reset()
		for k := 0; k < 50; k++ {
			for s := 0; s < 100; s++ {
				fmt.Fprintf(&body, "bench,host=h%d v=%v %d\n", s, float64(k)*0.37+float64(s), start+int64(n)*1e9/60)
			}
			n++
		}
		resp, err := http.Post(srvURL+"/write?db=bench", "text/plain", &body)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			b.Fatalf("write: %d", resp.StatusCode)
		}
	}
	b.ReportMetric(float64(b.N*5000)/b.Elapsed().Seconds(), "points/s")
}

// BenchmarkParseLines parses a body of 5,000 lines (100 series × 50 points), as
// BenchmarkWrite sends, without storing it: the parser's own cost per point.
func BenchmarkParseLines(b *testing.B) {
	start := time.Now().Add(-6 * time.Hour).Truncate(time.Hour).UnixNano()
	var body bytes.Buffer
	for k := 0; k < 50; k++ {
		for s := 0; s < 100; s++ {
			fmt.Fprintf(&body, "bench,host=h%d v=%v %d\n", s, float64(k)*0.37+float64(s), start+int64(k)*1e9/60)
		}
	}
	now := time.Now()
	b.ReportAllocs()
	b.SetBytes(int64(body.Len()))
	for i := 0; i < b.N; i++ {
		if _, parsed, _, reason := parseLines(body.Bytes(), "bench", 1, now); parsed != 5000 {
			b.Fatalf("parsed %d: %s", parsed, reason)
		}
	}
	b.ReportMetric(float64(b.N*5000)/b.Elapsed().Seconds(), "points/s")
}

// BenchmarkParseLinesDecoder parses BenchmarkParseLines's body with line-protocol/v2's
// decoder alone (no fast path), for comparison.
func BenchmarkParseLinesDecoder(b *testing.B) {
	start := time.Now().Add(-6 * time.Hour).Truncate(time.Hour).UnixNano()
	var body bytes.Buffer
	for k := 0; k < 50; k++ {
		for s := 0; s < 100; s++ {
			fmt.Fprintf(&body, "bench,host=h%d v=%v %d\n", s, float64(k)*0.37+float64(s), start+int64(k)*1e9/60)
		}
	}
	now := time.Now()
	b.ReportAllocs()
	b.SetBytes(int64(body.Len()))
	for i := 0; i < b.N; i++ {
		p := newLineParser("bench", 1, now, body.Bytes())
		if p.decode(body.Bytes(), 1); p.parsed != 5000 {
			b.Fatalf("parsed %d: %s", p.parsed, p.reason)
		}
	}
	b.ReportMetric(float64(b.N*5000)/b.Elapsed().Seconds(), "points/s")
}

// BenchmarkParseLinesIoT parses one batch of TSBS-shaped IoT lines (iotTSBSLines: 100
// trucks × 25 times, readings of ten fields and diagnostics of three, five tags each)
// without storing it, its series known from an earlier request (the series cache warm,
// as when a load is under way): the parser's cost per value of lines that name many
// series each.
func BenchmarkParseLinesIoT(b *testing.B) {
	body := []byte(iotTSBSLines(time.Date(2016, 1, 1, 0, 0, 0, 0, time.UTC), 100, 0, 25))
	values := bytes.Count(body, []byte("=")) - 5*bytes.Count(body, []byte("\n"))
	now := time.Now()
	lim := parseLimits{cache: newSeriesCache()}
	parseLinesCached(body, "bench", 1, now, lim)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for i := 0; i < b.N; i++ {
		_, parsed, _, reason, _, built := parseLinesCached(body, "bench", 1, now, lim)
		if parsed != values || built != 0 {
			b.Fatalf("parsed %d of %d, built %d series: %s", parsed, values, built, reason)
		}
	}
	b.ReportMetric(float64(b.N*values)/b.Elapsed().Seconds(), "values/s")
}
