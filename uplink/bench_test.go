package uplink

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
)

// pmuBatch is what a raw uplink forwards of a substation in one pass: 40 channels
// at 60 Hz for interval, with values as a PMU reports them (frequency, magnitudes).
func pmuBatch(interval time.Duration) ([]catalog.Entry, []series.Points) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	n := int(interval / (time.Second / 60))
	es := make([]catalog.Entry, 40)
	ps := make([]series.Points, 40)
	for s := range es {
		es[s] = catalog.Entry{Key: fmt.Sprintf("sub7/pmu%02d/ch%d", s/4, s%4)}
		for i := range n {
			v := 59.98 + 0.02*math.Sin(float64(i+s)/50) + float64(s%4)*1000
			ps[s].AppendFloat(base+int64(i)*int64(time.Second)/60, math.Round(v*1e5)/1e5)
		}
	}
	return es, ps
}

// BenchmarkSendRaw is the forwarder's own work per raw point: line protocol, gzip and
// the HTTP request (to a server that discards it), for one pass's batch.
func BenchmarkSendRaw(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer srv.Close()
	t, _ := ParseURL("influx+" + srv.URL + "/db")
	s, err := newSink(t, Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.close()
	es, ps := pmuBatch(5 * time.Second)
	n := 0
	for i := range ps {
		n += ps[i].Len()
	}
	b.ResetTimer()
	sent := 0
	for range b.N {
		s.reset()
		for i := range es {
			s.points(&es[i], &ps[i])
		}
		k, err := s.send(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		sent += k
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/point")
	b.ReportMetric(float64(sent)/float64(b.N*n), "wire-B/point")
}
