package web

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// BenchmarkAggHour60Hz: one /api/v1/agg request for an hour of a 60 Hz series (216,000
// points) at 1,000 buckets, through a 3-node in-process cluster (real TCP, memory stores):
// what one refresh of the page's plot costs the node serving it.
func BenchmarkAggHour60Hz(b *testing.B) {
	lc, err := tsdb.StartLocal(context.Background(), 3, b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer lc.Close()
	cl, err := client.New([]string{lc.Nodes[0].RPCAddr()}, client.Config{Timeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	to := time.Now().Truncate(time.Second).UnixNano()
	from := to - int64(time.Hour)
	var pts series.Points
	for i := 0; i < 216_000; i++ {
		pts.AppendFloat(from+int64(i)*int64(time.Second)/60, 60+float64(i%600)/1e4)
	}
	if _, err := cl.Put(context.Background(), "bench/freq", pts, wire.PutOptions{}); err != nil {
		b.Fatal(err)
	}
	h, err := Handler(cl, Config{})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	u := srv.URL + "/api/v1/agg?series=bench/freq&from=" + strconv.FormatInt(from, 10) + "&to=" + strconv.FormatInt(to, 10) + "&buckets=1000"
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := http.Get(u)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	b.ReportMetric(216_000*float64(b.N)/b.Elapsed().Seconds(), "points/s")
}
