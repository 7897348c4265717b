package httpapi

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// readBench is a one-node cluster (store in memory) with an HTTP door and a Go
// client, holding the dense and the sparse series BenchmarkRawRead reads.
type readBench struct {
	lc      *tsdb.LocalCluster
	srv     *httptest.Server
	cli     *client.Client
	hourAt  int64 // start of the hour of 60 Hz points
	yearEnd int64 // end of the year of points a minute apart
}

const (
	benchHourKey = "bench/pmu,ch=va#v" // 216,000 points: an hour at 60 Hz
	benchYearKey = "bench/power,m=1#v" // 525,600 points: a year, one a minute
	benchHourN   = 3600 * 60
	benchYearN   = 525_600
)

var (
	readBenchOnce sync.Once
	readBenchEnv  *readBench
	readBenchErr  error
)

// startReadBench starts the one-node cluster and writes the series, once per process.
func startReadBench(b *testing.B) *readBench {
	readBenchOnce.Do(func() { readBenchEnv, readBenchErr = newReadBench() })
	if readBenchErr != nil {
		b.Fatal(readBenchErr)
	}
	return readBenchEnv
}

func newReadBench() (*readBench, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lc, err := tsdb.StartLocal(ctx, 1, "", func(_ int, cfg *tsdb.Config) { cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 1, 1, 1 })
	if err != nil {
		return nil, err
	}
	eng := NewNodeEngine(lc.Nodes[0])
	h, err := New(eng, Config{}, nil)
	if err != nil {
		return nil, err
	}
	rb := &readBench{lc: lc, srv: httptest.NewServer(h)}
	if rb.cli, err = client.New([]string{lc.Nodes[0].RPCAddr()}, client.Config{}); err != nil {
		return nil, err
	}
	now := time.Now()
	// 60 Hz phasor magnitudes: values near 60 with three decimals, as a PMU reports
	// them in line protocol (the float64 nearest each decimal).
	rb.hourAt = now.Add(-2 * time.Hour).Truncate(time.Hour).UnixNano()
	var hour series.Points
	hour.Type = series.Float
	for i := 0; i < benchHourN; i++ {
		hour.T = append(hour.T, rb.hourAt+int64(i)*int64(time.Second)/60)
		hour.F = append(hour.F, float64(59_900+(i*7919)%200)/1000)
	}
	// A meter read once a minute for a year, whole minutes, values with one decimal.
	rb.yearEnd = now.Truncate(time.Minute).UnixNano()
	var year series.Points
	year.Type = series.Float
	for i := 0; i < benchYearN; i++ {
		year.T = append(year.T, rb.yearEnd-int64(benchYearN-i)*int64(time.Minute))
		year.F = append(year.F, float64((i*31)%5000)/10)
	}
	for _, w := range []struct {
		key  string
		tags map[string]string
		pts  series.Points
	}{
		{benchHourKey, map[string]string{"ch": "va", TagDB: "bench", TagMeasurement: "pmu", TagField: "v"}, hour},
		{benchYearKey, map[string]string{"m": "1", TagDB: "bench", TagMeasurement: "power", TagField: "v"}, year},
	} {
		// In batches, as /write would bring them; the first fits the series' quantum.
		for lo := 0; lo < w.pts.Len(); lo += 50_000 {
			hi := min(lo+50_000, w.pts.Len())
			part := series.Points{Type: series.Float, T: w.pts.T[lo:hi], F: w.pts.F[lo:hi]}
			if _, err := eng.Write(ctx, w.key, w.tags, part); err != nil {
				return nil, err
			}
		}
	}
	return rb, nil
}

// BenchmarkRawRead reads 10 s and an hour of 60 Hz points and a year of points a minute apart
// raw through /query (RFC 3339 times, InfluxDB's default; epoch=ns; chunked) and
// through the Go client's Get, on the same one-node cluster, and reports each in ms.
// The ratio of a /query read to the client's is the cost of the HTTP door.
func BenchmarkRawRead(b *testing.B) {
	rb := startReadBench(b)
	hourQ := "SELECT v FROM pmu WHERE ch = 'va' AND time >= " + strconv.FormatInt(rb.hourAt, 10) +
		" AND time < " + strconv.FormatInt(rb.hourAt+int64(time.Hour), 10)
	tenQ := "SELECT v FROM pmu WHERE ch = 'va' AND time >= " + strconv.FormatInt(rb.hourAt, 10) +
		" AND time < " + strconv.FormatInt(rb.hourAt+int64(10*time.Second), 10)
	yearQ := `SELECT "v" FROM "power" WHERE m = '1' AND time >= now() - 366d`
	for _, c := range []struct {
		name     string
		key      string
		n        int
		q        string
		from, to int64
	}{
		{"10s60Hz", benchHourKey, 600, tenQ, rb.hourAt, rb.hourAt + int64(10*time.Second)},
		{"hour60Hz", benchHourKey, benchHourN, hourQ, rb.hourAt, rb.hourAt + int64(time.Hour)},
		// SELECT *: the tag column beside the field, from the catalog.
		{"hour60Hz-star", benchHourKey, benchHourN, strings.Replace(hourQ, "SELECT v", "SELECT *", 1), rb.hourAt, rb.hourAt + int64(time.Hour)},
		{"year1min", benchYearKey, benchYearN, yearQ, rb.yearEnd - 366*24*int64(time.Hour), rb.yearEnd + 1},
	} {
		for _, mode := range []struct{ name, extra string }{{"query", ""}, {"query-epoch", "&epoch=ns"}, {"query-chunked", "&chunked=true"}} {
			b.Run(c.name+"/"+mode.name, func(b *testing.B) {
				u := rb.srv.URL + "/query?db=bench&q=" + url.QueryEscape(c.q) + mode.extra
				b.ReportAllocs()
				var size int64
				for i := 0; i < b.N; i++ {
					resp, err := http.Get(u)
					if err != nil {
						b.Fatal(err)
					}
					n, err := io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err != nil || resp.StatusCode != http.StatusOK || n < int64(c.n)*10 {
						b.Fatalf("query: status %d, %d bytes, %v", resp.StatusCode, n, err)
					}
					size = n
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e6/float64(b.N), "ms/read")
				b.ReportMetric(float64(size), "bytes")
			})
		}
		b.Run(c.name+"/client", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				res, err := rb.cli.Get(context.Background(), c.key, c.from, c.to, wire.GetOptions{})
				if err != nil || res.Points.Len() != c.n {
					b.Fatalf("get: %d points, %v", res.Points.Len(), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e6/float64(b.N), "ms/read")
		})
	}
}

// BenchmarkAnswerWriter encodes an hour of 60 Hz points (BenchmarkRawRead's) as a raw
// answer, with RFC 3339 times and with epoch=ms (what Grafana asks), to nowhere: the
// encoder's own cost, without the cluster and the connection. The values are readings
// of five decimals, as a PMU's float32 channels read back.
func BenchmarkAnswerWriter(b *testing.B) {
	at := time.Now().Truncate(time.Hour).UnixNano()
	p := series.Points{Type: series.Float}
	for i := 0; i < benchHourN; i++ {
		p.T = append(p.T, at+int64(i)*int64(time.Second)/60)
		p.F = append(p.F, math.Round((233.79866+float64((i*7919)%200)/1000)*1e5)/1e5)
	}
	res := []*result{{Series: []*row{{Name: "pmu", Columns: []string{"time", "v"}, table: newRawTable(p.T, []rawColumn{{pts: &p}})}}}}
	for _, epoch := range []string{"rfc3339", "ms"} {
		unit, _ := epochUnit(strings.TrimPrefix(epoch, "rfc3339"))
		b.Run(epoch, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				aw := newAnswerWriter(io.Discard, unit)
				aw.answer(res)
				if err := aw.release(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchHourN), "ns/point")
		})
	}
}
