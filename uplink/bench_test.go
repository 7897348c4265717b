package uplink

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/tsdht/tsdht/internal/pmuplay"
	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/coord"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
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

// BenchmarkForwardRaw is what a raw uplink costs its node per point: the passes that
// read a substation's minute back from a one-node cluster (disk store, rf 1, as
// scripts/footprint runs it), format it as line protocol, gzip it and send it to a
// server that discards it. Each iteration forwards the same minute again from its
// start. sealed: the minute written at once and read back from its sealed chunks;
// live: written a second (60 points) per series at a time, as a PMU gateway sends it,
// and read back from those blocks before the store seals them, as a forwarder that
// keeps up reads them.
func BenchmarkForwardRaw(b *testing.B) {
	b.Run("sealed", func(b *testing.B) { benchForwardRaw(b, time.Minute, 0, false) })
	b.Run("live", func(b *testing.B) { benchForwardRaw(b, time.Second, time.Hour, false) })
	b.Run("tapped", func(b *testing.B) { benchForwardRaw(b, time.Second, time.Hour, true) })
}

// benchForwardRaw writes the minute in puts of put per series, with the store's seal
// grace sealGrace (0: its default), and forwards it b.N times; tapped: from the taps
// the write hook filled (each time anew, untimed), as a forwarder that caught up does.
func benchForwardRaw(b *testing.B, put, sealGrace time.Duration, tapped bool) {
	ctx := context.Background()
	lc, err := tsdb.StartLocal(ctx, 1, b.TempDir(), func(i int, cfg *tsdb.Config) {
		cfg.RF = 1
		opts := store.DefaultPebbleOptions()
		opts.SealGrace = sealGrace
		st, err := store.OpenPebble(filepath.Join(cfg.DHT.DataDir, "store"), opts)
		if err != nil {
			b.Fatal(err)
		}
		cfg.Store = st
	})
	if err != nil {
		b.Fatal(err)
	}
	defer lc.Close()
	es, ps := pmuBatch(time.Minute)
	n := 0
	// The minute ends half a minute ago: the passes then read what a forwarder reads,
	// and little empty time after it.
	base := time.Now().Add(-90 * time.Second).Truncate(10 * time.Second).UnixNano()
	shift := base - ps[0].T[0]
	per := int(put / (time.Second / 60))
	for i := range es {
		for j := range ps[i].T {
			ps[i].T[j] += shift
		}
		n += ps[i].Len()
	}
	var puts []coord.SeriesPut
	for lo := 0; lo < ps[0].Len(); lo += per {
		for i := range es {
			part := ps[i].Slice(lo, min(lo+per, ps[i].Len()))
			if _, err := lc.Nodes[0].Coordinator().Put(ctx, es[i].Key, part, wire.PutOptions{}); err != nil {
				b.Fatal(err)
			}
			puts = append(puts, coord.SeriesPut{Key: es[i].Key, Points: part})
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	u, err := New(Config{URL: "influx+" + srv.URL + "/db", Select: catalog.Query{Prefix: "sub7/"}, LateEvery: time.Hour},
		lc.Nodes[0].Coordinator(), lc.Nodes[0].Coordinator(), lc.Nodes[0].DHT(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer u.sink.close()
	forward := func() {
		for passes := 1; u.pass(ctx); passes++ {
			if passes > 1000 {
				b.Fatalf("still forwarding after %d passes: %+v", passes, u.Stats())
			}
		}
	}
	if tapped {
		u.taps.limit = 4 << 20 // the whole minute: more than a forwarder that keeps up holds
		forward()              // the series' states, untimed
		u.update(func(s *wire.UplinkStats) { s.SentPoints = 0 })
	}
	ok := make([]coord.SeriesResult, len(puts))
	b.ResetTimer()
	for range b.N {
		for _, st := range u.states {
			st.cursor = base
		}
		if tapped {
			b.StopTimer()
			for _, st := range u.states {
				u.taps.arm(st.e.Key, base, st.e.Type)
				st.verified, st.lateAt = time.Now(), time.Now()
			}
			u.Stored(puts, ok)
			b.StartTimer()
		}
		forward()
		if len(u.states) != len(es) {
			b.Fatalf("the uplink forwards %d series, want %d", len(u.states), len(es))
		}
	}
	b.StopTimer()
	if s := u.Stats(); s.SentPoints != int64(b.N*n) {
		b.Fatalf("sent %d points, want %d", s.SentPoints, b.N*n)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/point")
}

// BenchmarkLinePoints is the line encoder alone: a pass's substation batch formatted
// as line protocol, per point (on a 32-bit ARM its timestamps and floats cost most).
func BenchmarkLinePoints(b *testing.B) {
	es, ps := pmuBatch(5 * time.Second)
	n := 0
	for i := range ps {
		n += ps[i].Len()
	}
	var l lineEncoder
	b.ResetTimer()
	for range b.N {
		l.reset()
		for i := range es {
			l.points(&es[i], &ps[i])
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/point")
}

// BenchmarkGzipLevel is what the influx sink's gzip costs per raw point at the levels
// klauspost/compress offers below the default, on one pass's batch of a substation
// played by pmuplay (full-precision floats and jittered nanosecond timestamps, as
// scripts/footprint's load): ns per point and compressed bytes per point, to judge
// the level newSink picks (gzip.BestSpeed) against the others again.
func BenchmarkGzipLevel(b *testing.B) {
	var l lineEncoder
	n := 0
	for p := range 10 {
		pmu := pmuplay.PMU{Name: fmt.Sprintf("pmu%02d", p), Rnd: rand.New(rand.NewSource(int64(p))),
			T0: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()}
		for ch, pts := range pmu.Samples(600) {
			e := catalog.Entry{Key: "sub7/" + pmu.Name + "/" + ch}
			l.points(&e, &pts)
			n += pts.Len()
		}
	}
	body := l.body()
	for _, lv := range []struct {
		name  string
		level int
	}{{"best-speed", gzip.BestSpeed}, {"level-2", 2}, {"stateless", gzip.StatelessCompression}, {"huffman-only", gzip.HuffmanOnly}} {
		b.Run(lv.name, func(b *testing.B) {
			var buf bytes.Buffer
			zw, err := gzip.NewWriterLevel(&buf, lv.level)
			if err != nil {
				b.Fatal(err)
			}
			for range b.N {
				buf.Reset()
				zw.Reset(&buf)
				zw.Write(body)
				if err := zw.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/point")
			b.ReportMetric(float64(buf.Len())/float64(n), "wire-B/point")
			b.ReportMetric(float64(len(body))/float64(n), "line-B/point")
		})
	}
}

// BenchmarkFirstWritten is the start of a series without a cursor: the count that finds
// its first point (firstWritten) over the time since the catalog's first bound, which
// rounds down to the hour, for a series written only in its last minute, per series
// and by how far into the hour it began (docs/uplink.md "What it costs"). Each
// iteration counts another series, as a forwarder starting on a substation does: the
// placements of its quanta are not cached yet. At most 40 iterations.
func BenchmarkFirstWritten(b *testing.B) {
	ctx := context.Background()
	lc, err := tsdb.StartLocal(ctx, 1, b.TempDir(), func(i int, cfg *tsdb.Config) { cfg.RF = 1 })
	if err != nil {
		b.Fatal(err)
	}
	defer lc.Close()
	now := time.Now()
	var pts series.Points
	for i := range 3600 {
		pts.AppendFloat(now.Add(-time.Minute).UnixNano()+int64(i)*int64(time.Second)/60, float64(i))
	}
	u, err := New(Config{URL: "influx+http://127.0.0.1:1/db"}, lc.Nodes[0].Coordinator(), lc.Nodes[0].Coordinator(), lc.Nodes[0].DHT(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer u.sink.close()
	for _, into := range []time.Duration{10 * time.Minute, 50 * time.Minute} {
		b.Run(fmt.Sprintf("into-the-hour=%v", into), func(b *testing.B) {
			if b.N > 40 {
				b.Skip("at most 40 series: run with -benchtime 40x")
			}
			keys := make([]string, b.N)
			for i := range keys {
				keys[i] = fmt.Sprintf("sub7/pmu%02d/ch%d/%v", i/4, i%4, into)
				if _, err := lc.Nodes[0].Coordinator().Put(ctx, keys[i], pts, wire.PutOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for _, k := range keys {
				if got := u.firstWritten(ctx, k, now.Add(-into).UnixNano(), now.UnixNano()); got > pts.T[0] {
					b.Fatalf("%s: first written at %d, after the first point %d", k, got, pts.T[0])
				}
			}
		})
	}
}
