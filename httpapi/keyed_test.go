package httpapi

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/tsdht/tsdht/clusterkey"
	"github.com/tsdht/tsdht/tsdb"
)

// TestKeyedNodeMetricsCarryRepair: on a node with a cluster key, /metrics carries
// the node's repair counters, read in process (no call to itself over RPC, which a
// keyed node refuses without the key).
func TestKeyedNodeMetricsCarryRepair(t *testing.T) {
	ring, err := clusterkey.Parse([]byte(clusterkey.Generate()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lc, err := tsdb.StartLocal(ctx, 1, "", func(_ int, cfg *tsdb.Config) { cfg.RPC.ClusterKey = ring })
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	if _, err := lc.Nodes[0].RepairNow(ctx); err != nil {
		t.Fatal(err)
	}
	eng := NewNodeEngine(lc.Nodes[0])
	h, err := New(eng, Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`(?m)^tsdht_repair_passes_total (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("/metrics of a keyed node lacks tsdht_repair_passes_total:\n%s", b)
	}
	if v, _ := strconv.ParseFloat(string(m[1]), 64); v < 1 {
		t.Fatalf("tsdht_repair_passes_total %s after a repair pass; want at least 1", m[1])
	}
}
