package main

import (
	"errors"
	"log/slog"
	"path/filepath"
	"sync"

	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/store"
)

// localStores gives the nodes of an in-process cluster (demo, bench --local) the store
// `tsdht node` would: pebble under each node's data directory, or memory.
type localStores struct {
	kind string // "disk" or "memory"
	sync store.SyncMode

	mu  sync.Mutex
	err error // what failed to open; the caller stops the cluster
}

// open sets cfg.Store; on failure it records the error and leaves the store unset
// (StartLocal then falls back to memory, and the caller must check err).
func (l *localStores) open(cfg *tsdb.Config) {
	if l.kind != "disk" {
		return
	}
	opts := store.DefaultPebbleOptions()
	opts.Sync = l.sync
	opts.Quantum = cfg.DHT.Quantum
	opts.Logger = slog.New(slog.DiscardHandler)
	s, err := store.OpenPebble(filepath.Join(cfg.DHT.DataDir, "store"), opts)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.err = errors.Join(l.err, err)
		return
	}
	cfg.Store = s
}
