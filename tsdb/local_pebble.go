package tsdb

import (
	"path/filepath"

	"github.com/tsdht/tsdht/tsdb/store"
)

// UsePebble opens a pebble store with opts in cfg's data directory and makes it the
// node's store: a LocalCluster's nodes then keep their shards on disk, with each
// quantum's statistics, as `tsdht node` does, where by default they keep them in
// memory. It is meant for StartLocal's tweak.
func UsePebble(cfg *Config, opts store.PebbleOptions) error {
	st, err := store.OpenPebble(filepath.Join(cfg.DHT.DataDir, "store"), opts)
	if err != nil {
		return err
	}
	cfg.Store = st
	return nil
}
