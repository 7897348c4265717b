package tsdb

import (
	"context"
	"testing"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// BenchmarkWriteNewQuantum prices what keeping the series' newest quantum at quorum
// (bounds.go) costs a write: on an 18-node local cluster, a thin client's single-point
// write that stays in its series' newest quantum (no report) and one that moves its
// series a quantum on (a report to the registry replicas beside the points: the cost a
// series written less often than once a quantum pays on every write), alternately.
//
//	go test -run '^$' -bench BenchmarkWriteNewQuantum -benchtime 300x ./tsdb
func BenchmarkWriteNewQuantum(b *testing.B) {
	for _, f := range []quanta.Format{quanta.KFI, quanta.QFI} {
		b.Run("id="+f.String(), func(b *testing.B) {
			ctx := context.Background()
			_, cli := benchCluster(b, f)
			q := int64(10 * time.Second)
			same, moving := time.Now().Add(-time.Minute).UnixNano(), time.Now().Add(-3*time.Hour).UnixNano()
			put := func(key string, t int64) time.Duration {
				var p series.Points
				p.AppendFloat(t, 1)
				start := time.Now()
				if _, err := cli.Put(ctx, key, p, wire.PutOptions{}); err != nil {
					b.Fatal(err)
				}
				return time.Since(start)
			}
			put("pmu/same", same)
			put("pmu/moving", moving)
			var inQuantum, newQuantum time.Duration
			for b.Loop() {
				same += int64(time.Microsecond)
				moving += q
				inQuantum += put("pmu/same", same)
				newQuantum += put("pmu/moving", moving)
			}
			report(b, "same-quantum", inQuantum, "new-quantum", newQuantum)
		})
	}
}
