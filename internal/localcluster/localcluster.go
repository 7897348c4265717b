// Package localcluster starts a cluster of tsdht nodes inside one process (tsdht demo,
// tsdht-bench --local), each node with the store `tsdht node` would give it: pebble
// under the node's data directory, or memory.
package localcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"

	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/store"
)

// Stores says which store every node gets.
type Stores struct {
	Kind string         // "disk" (pebble) or "memory"
	Sync store.SyncMode // with Kind "disk"
}

// CheckKind returns an error naming the flag when kind is not a store a local node
// can have.
func CheckKind(kind string) error {
	if kind != "disk" && kind != "memory" {
		return fmt.Errorf("--store %q: want disk or memory", kind)
	}
	return nil
}

// Start starts n nodes under dir (a temporary directory when empty), each configured
// by configure and then given its store, and waits until they see each other.
func Start(ctx context.Context, n int, dir string, st Stores, configure func(i int, cfg *tsdb.Config)) (*tsdb.LocalCluster, error) {
	o := opener{Stores: st}
	lc, err := tsdb.StartLocal(ctx, n, dir, func(i int, cfg *tsdb.Config) {
		configure(i, cfg)
		o.open(cfg)
	})
	if err == nil && o.err != nil {
		err = errors.Join(lc.Close(), o.err)
	}
	if err != nil {
		return nil, err
	}
	return lc, nil
}

// opener opens the nodes' stores; StartLocal may configure nodes concurrently.
type opener struct {
	Stores

	mu  sync.Mutex
	err error // what failed to open; Start stops the cluster
}

// open sets cfg.Store; on failure it records the error and leaves the store unset
// (StartLocal then falls back to memory, and Start reports the error).
func (o *opener) open(cfg *tsdb.Config) {
	if o.Kind != "disk" {
		return
	}
	opts := store.DefaultPebbleOptions()
	opts.Sync = o.Sync
	opts.Quantum = cfg.DHT.Quantum
	opts.Logger = slog.New(slog.DiscardHandler)
	s, err := store.OpenPebble(filepath.Join(cfg.DHT.DataDir, "store"), opts)
	o.mu.Lock()
	defer o.mu.Unlock()
	if err != nil {
		o.err = errors.Join(o.err, err)
		return
	}
	cfg.Store = s
}
