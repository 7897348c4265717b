package tsdb

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"
	"github.com/tsdht/tsdht/tsdb/coord"
	"github.com/tsdht/tsdht/tsdb/series"
)

// readManyCluster is 3 nodes at rf 3 holding 8 series of 6 quanta each (their own
// quanta: 60 s), a series of the cluster's quanta over more than a page of them (read
// alone, as a long read), and the ranges to read of each, plus one never written.
func readManyCluster(t *testing.T) (*LocalCluster, []SeriesRange) {
	lc := startCluster(t, 3, func(_ int, cfg *Config) {
		cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 3, 3, 2
		// Nothing but the test reads from the replicas once the cluster settled.
		cfg.RepairInterval = time.Hour
		cfg.Rollups.PullInterval = time.Hour
	})
	ctx := context.Background()
	c := lc.Nodes[0].Coordinator()
	q := quanta.Quantum(60)
	t0 := q.BeginNanos(q.Start(clustertest.Base()))
	var items []SeriesRange
	for h := range 8 {
		key := fmt.Sprintf("db/cpu,host=h%d#usage", h)
		pts := series.Points{Type: series.Float}
		for i := range 36 { // 6 quanta, a point every 10 s
			pts.AppendFloat(t0+int64(i)*10e9+int64(h), float64(h*100+i))
		}
		if _, err := c.Put(ctx, key, pts, PutOptions{Quantum: q}); err != nil {
			t.Fatal(err)
		}
		items = append(items, SeriesRange{Key: key, From: t0 + 15e9, To: t0 + 6*60e9})
	}
	long := clustertest.Float32Readings(t0, 600) // 10 s of 60 Hz: one quantum of 10 s
	if _, err := c.Put(ctx, "db/long#v", long, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	items = append(items,
		SeriesRange{Key: "db/long#v", From: t0 - coord.ReadPageQuanta*10e9, To: t0 + 10e9},
		SeriesRange{Key: "db/never#v", From: t0, To: t0 + 60e9})
	return lc, items
}

// requestsPerNode runs call and returns how many read and aggregate requests each node
// other than 0 answered for it: the fewest over three tries, since a start-up repair
// pass may read from a replica meanwhile (more requests, never fewer).
func requestsPerNode(t *testing.T, lc *LocalCluster, call func() error) []int64 {
	t.Helper()
	var least []int64
	for range 3 {
		before := remoteReads(lc)
		if err := call(); err != nil {
			t.Fatal(err)
		}
		after := remoteReads(lc)
		for k := range after {
			d := after[k] - before[k]
			if len(least) <= k {
				least = append(least, d)
			}
			least[k] = min(least[k], d)
		}
	}
	return least
}

// remoteReads is how many read and aggregate requests nodes other than 0 answered.
func remoteReads(lc *LocalCluster) []int64 {
	var out []int64
	for _, n := range lc.Nodes[1:] {
		if n != nil {
			out = append(out, n.local.ReadRequests())
		}
	}
	return out
}

// GetMany and AggregateMany answer every series as Get and Aggregate answer it alone
// (points, windows, the unknown series' error), and ask each other node one request
// for the short series of a page where reading them one by one asks it one per series.
func TestGetManyMatchesGet(t *testing.T) {
	lc, items := readManyCluster(t)
	ctx := context.Background()
	c := lc.Nodes[0].Coordinator()
	short := items[:8]

	for k, d := range requestsPerNode(t, lc, func() error { _, err := c.GetMany(ctx, short, GetOptions{}); return err }) {
		if d != 1 {
			t.Errorf("GetMany of %d series: node %d answered %d read requests, want 1", len(short), k+1, d)
		}
	}
	one := requestsPerNode(t, lc, func() error {
		for _, it := range short {
			if _, err := c.Get(ctx, it.Key, it.From, it.To, GetOptions{}); err != nil {
				return err
			}
		}
		return nil
	})
	if one[0] != int64(len(short)) {
		t.Errorf("Get one series at a time: node 1 answered %d read requests, want %d (one per series)", one[0], len(short))
	}

	many, err := c.GetMany(ctx, items, GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, it := range items {
		one, err := c.Get(ctx, it.Key, it.From, it.To, GetOptions{})
		if (err == nil) != (many[i].Err == nil) || err != nil && rpcCode(err) != rpcCode(many[i].Err) {
			t.Fatalf("%s: GetMany error %v, Get error %v", it.Key, many[i].Err, err)
		}
		if !reflect.DeepEqual(one.Points.T, many[i].Points.T) || !reflect.DeepEqual(one.Points.F, many[i].Points.F) || one.Points.Type != many[i].Points.Type {
			t.Errorf("%s: GetMany read %d points, Get %d", it.Key, many[i].Points.Len(), one.Points.Len())
		}
		if i < 8 && one.Points.Len() != 36-2 {
			t.Errorf("%s: %d points, want 34", it.Key, one.Points.Len())
		}
	}
	if rpcCode(many[9].Err) != CodeUnknownSeries {
		t.Errorf("a series never written: %v, want %s", many[9].Err, CodeUnknownSeries)
	}
	if many[8].Points.Len() != 600 {
		t.Errorf("the long read: %d points, want 600", many[8].Points.Len())
	}

	aggs, err := c.AggregateMany(ctx, items, 120e9, GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, it := range items {
		one, err := c.Aggregate(ctx, it.Key, it.From, it.To, 120e9, GetOptions{})
		if (err == nil) != (aggs[i].Err == nil) {
			t.Fatalf("%s: AggregateMany error %v, Aggregate error %v", it.Key, aggs[i].Err, err)
		}
		if !reflect.DeepEqual(one.Windows, aggs[i].Windows) || one.Type != aggs[i].Type {
			t.Errorf("%s: AggregateMany %d windows %+v, Aggregate %d %+v", it.Key, len(aggs[i].Windows), aggs[i].Windows, len(one.Windows), one.Windows)
		}
	}
	for k, d := range requestsPerNode(t, lc, func() error { _, err := c.AggregateMany(ctx, short, 120e9, GetOptions{}); return err }) {
		if d != 1 {
			t.Errorf("AggregateMany of %d series: node %d answered %d requests, want 1", len(short), k+1, d)
		}
	}
}

// With a replica down, GetMany fails over as Get does: every series is read whole
// from the others.
func TestGetManyFailsOver(t *testing.T) {
	lc, items := readManyCluster(t)
	ctx := context.Background()
	if err := lc.Kill(2); err != nil {
		t.Fatal(err)
	}
	c := lc.Nodes[0].Coordinator()
	many, err := c.GetMany(ctx, items[:8], GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range many {
		if r.Err != nil || r.Points.Len() != 34 {
			t.Errorf("%s with a node down: %d points, %v; want 34", items[i].Key, r.Points.Len(), r.Err)
		}
	}
	aggs, err := c.AggregateMany(ctx, items[:8], 120e9, GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range aggs {
		n := int64(0)
		for _, w := range r.Windows {
			n += w.Count
		}
		if r.Err != nil || n != 34 {
			t.Errorf("%s with a node down: windows of %d points, %v; want 34", items[i].Key, n, r.Err)
		}
	}
}

// A read of more series than MaxManySeries is refused before anything is planned, and
// a series' answer larger than GetOptions.MaxBytes fails that series alone.
func TestGetManyLimits(t *testing.T) {
	lc, items := readManyCluster(t)
	ctx := context.Background()
	c := lc.Nodes[0].Coordinator()
	_, err := c.GetMany(ctx, make([]SeriesRange, coord.MaxManySeries+1), GetOptions{})
	if rpcCode(err) != CodeBadInput {
		t.Errorf("GetMany of %d series: %v, want %s", coord.MaxManySeries+1, err, CodeBadInput)
	}
	if _, err := c.AggregateMany(ctx, make([]SeriesRange, coord.MaxManySeries+1), 60e9, GetOptions{}); rpcCode(err) != CodeBadInput {
		t.Errorf("AggregateMany of %d series: %v, want %s", coord.MaxManySeries+1, err, CodeBadInput)
	}
	many, err := c.GetMany(ctx, items[:9], GetOptions{MaxBytes: 2000})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range many[:8] {
		if r.Err != nil {
			t.Errorf("%s (34 points) within 2,000 bytes: %v", items[i].Key, r.Err)
		}
	}
	if rpcCode(many[8].Err) != CodeTooLarge {
		t.Errorf("600 points within 2,000 bytes: %v, want %s", many[8].Err, CodeTooLarge)
	}
}

// A caller that has gone gets every series refused as unavailable, never an answer
// short of the shards left unread.
func TestGetManyCallerGone(t *testing.T) {
	lc, items := readManyCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	many, err := lc.Nodes[0].Coordinator().GetMany(ctx, items[:8], GetOptions{AllowPartial: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range many {
		if rpcCode(r.Err) != CodeUnavailable {
			t.Errorf("%s after the caller cancelled: %d points, %v; want %s", items[i].Key, r.Points.Len(), r.Err, CodeUnavailable)
		}
	}
}

func rpcCode(err error) string {
	var re *rpc.RemoteError
	if errors.As(err, &re) {
		return re.Code
	}
	return ""
}
