package localcluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/store"
)

func TestStartGivesEveryNodeItsStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, kind := range []string{"disk", "memory"} {
		configured := 0
		lc, err := Start(ctx, 2, t.TempDir(), Stores{Kind: kind, Sync: store.SyncNone}, func(_ int, cfg *tsdb.Config) {
			cfg.RF = 2
			configured++
		})
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		for i, n := range lc.Nodes {
			_, pebble := n.Store().(*store.Pebble)
			if pebble != (kind == "disk") {
				t.Errorf("%s: node %d has store %T", kind, i, n.Store())
			}
		}
		if err := lc.Close(); err != nil {
			t.Errorf("%s: close: %v", kind, err)
		}
		if configured != 2 {
			t.Errorf("%s: configure called %d times, want 2", kind, configured)
		}
	}
}

// A store that cannot open fails the start and stops the nodes already up.
func TestStartReportsAStoreThatCannotOpen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	_, err := Start(ctx, 1, dir, Stores{Kind: "disk", Sync: store.SyncNone}, func(_ int, cfg *tsdb.Config) {
		// A file where the store's directory should be.
		if err := os.MkdirAll(cfg.DHT.DataDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cfg.DHT.DataDir, "store"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	})
	if err == nil {
		t.Fatal("a store over a file: no error")
	}
	if err := CheckKind("tape"); err == nil || !strings.Contains(err.Error(), "want disk or memory") {
		t.Errorf("CheckKind(tape) = %v", err)
	}
}
