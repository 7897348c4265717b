package tsdb

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"

	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/series"
)

// TestBatchesCutByBytes stores what the documented limits allow but a batch cut by
// point count alone could not carry in one RPC frame: a sparse backfill of 50,000
// points one per quantum (50,000 shards to each replica), and 2,000 strings of the
// maximum 4,096 bytes (8 MiB of values). Every point is stored and read back.
func TestBatchesCutByBytes(t *testing.T) {
	// A replica write here carries a whole 1 MiB batch of shards: under emulation (make
	// test-arm) that takes longer than the default 5 s call timeout.
	lc, err := StartLocal(context.Background(), 3, "", func(_ int, cfg *Config) { cfg.CallTimeout = 2 * time.Minute })
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	cl, err := client.New([]string{lc.Nodes[0].RPCAddr()}, client.Config{Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	q := int64(lc.Nodes[0].cfg.DHT.Quantum) * int64(time.Second)
	t0 := time.Now().Add(-30*24*time.Hour).UnixNano() / q * q

	var sparse series.Points
	for i := range 50_000 {
		sparse.AppendFloat(t0+int64(i)*q, float64(i))
	}
	var long series.Points
	for i := range 2_000 {
		long.AppendString(t0+int64(i)*int64(time.Millisecond), strings.Repeat(string(rune('a'+i%26)), series.MaxStringValueLen))
	}
	for key, pts := range map[string]series.Points{"backfill/sparse": sparse, "log/long": long} {
		n, err := cl.Put(ctx, key, pts, PutOptions{})
		if err != nil || n != pts.Len() {
			t.Fatalf("%s: stored %d of %d: %v", key, n, pts.Len(), err)
		}
		res, err := cl.Get(ctx, key, pts.T[0], pts.T[pts.Len()-1]+1, GetOptions{})
		if err != nil {
			t.Fatalf("%s: read back: %v", key, err)
		}
		clustertest.RequireSame(t, pts, res.Points)
	}
}
