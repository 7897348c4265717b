package tsdb

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster"
)

// record is one log record as a test sees it.
type record struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

// captureLog is a slog.Handler that keeps every record, Debug included.
type captureLog struct {
	mu    *sync.Mutex
	recs  *[]record
	attrs []slog.Attr
}

func newCaptureLog() *captureLog { return &captureLog{mu: new(sync.Mutex), recs: new([]record)} }

func (h *captureLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *captureLog) Handle(_ context.Context, r slog.Record) error {
	rec := record{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.recs = append(*h.recs, rec)
	return nil
}

func (h *captureLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &captureLog{mu: h.mu, recs: h.recs, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *captureLog) WithGroup(string) slog.Handler { return h }

func (h *captureLog) records() []record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]record(nil), *h.recs...)
}

var hex40 = regexp.MustCompile(`^[0-9a-f]{40}$`)

// Three nodes that write, hand off and leave log nothing at Error; every record names
// its node by the 40-hex ID status prints; the survivors log the departures at Info.
func TestCleanShutdownLogsNoErrors(t *testing.T) {
	capture := newCaptureLog()
	lc, err := StartLocal(context.Background(), 3, t.TempDir(), func(_ int, cfg *Config) {
		cfg.Logger = slog.New(capture)
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pts := sixtyHz(time.Now().Add(-time.Minute).UnixNano(), 600)
	if _, err := lc.Nodes[0].Coordinator().Put(ctx, "pmu/clean", pts, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, n := range lc.Nodes {
		ids[cluster.NodeID(n.DHT().Self())] = true
	}
	if err := lc.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	recs := capture.records()
	if len(recs) == 0 {
		t.Fatal("nothing was logged")
	}
	departures := 0
	for _, r := range recs {
		if r.level >= slog.LevelError {
			t.Errorf("error logged on a clean shutdown: %s %v", r.msg, r.attrs)
		}
		if node := r.attrs["node"]; !hex40.MatchString(node) || !ids[node] {
			t.Errorf("record %q names its node %q, not one of the cluster's 40-hex IDs", r.msg, node)
		}
		if r.level == slog.LevelInfo && strings.HasPrefix(r.msg, "dht: member ") && r.msg != "dht: member alive" {
			if !hex40.MatchString(r.attrs["peer"]) || r.attrs["rpc"] == "" {
				t.Errorf("membership change %q without the peer's hex ID and address: %v", r.msg, r.attrs)
			}
			departures++
		}
	}
	// Node 0 leaves first, seen by 1 and 2; node 1 next, seen by 2.
	if departures < 3 {
		t.Errorf("%d departures logged at Info by the survivors; want at least 3", departures)
	}
}
