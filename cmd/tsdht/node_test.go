package main

import (
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/internal/membudget"
	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/store"
)

// TestNodeDefaultsAreTheLibrarys checks that a node started with no tuning flags runs
// with tsdb.DefaultConfig's and store.DefaultPebbleOptions' values, through the same
// conversions (MiB, MiB/s) the node applies to the flags; its block cache is sized from
// the memory it may use (store.CacheSizeFor).
func TestNodeDefaultsAreTheLibrarys(t *testing.T) {
	cfg, opts := parseNodeFlags(t)
	lib, libOpts := tsdb.DefaultConfig(), store.DefaultPebbleOptions()
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"--rf", cfg.RF, lib.RF},
		{"--max-future", cfg.MaxFuture, lib.MaxFuture},
		{"--repair-interval", cfg.RepairInterval, lib.RepairInterval},
		{"--repair-rate", cfg.RepairRate, lib.RepairRate},
		{"--repair-rate (unthrottled)", cfg.RepairUnthrottled, lib.RepairUnthrottled},
		{"--handoff-timeout", cfg.HandoffTimeout, lib.HandoffTimeout},
		{"--down-grace", cfg.DHT.DownGrace, lib.DHT.DownGrace},
		{"--bucket-size", cfg.DHT.BucketSize, lib.DHT.BucketSize},
		{"--quantum", cfg.DHT.Quantum, lib.DHT.Quantum},
		{"--id-format", cfg.DHT.Format, lib.DHT.Format},
		{"--routing", cfg.DHT.Routing, lib.DHT.Routing},
		{"--rollups", cfg.Rollups.Off, lib.Rollups.Off},
		{"--write-quorum", cfg.WriteQuorum, lib.WriteQuorum},
		{"--read-quorum", cfg.ReadQuorum, lib.ReadQuorum},
		{"--sync", opts.Sync, libOpts.Sync},
		{"--sync-interval", opts.SyncInterval, libOpts.SyncInterval},
		{"--cache-mb", opts.CacheSize, store.CacheSizeFor(membudget.Available())},
		{"--hot-mb", opts.HotCacheSize, libOpts.HotCacheSize},
		{"--retention", opts.Retention, libOpts.Retention},
		{"--max-disk", opts.MaxDisk, libOpts.MaxDisk},
		{"--disk-reserve", opts.DiskReserve, libOpts.DiskReserve},
		{"--disk-reserve (off)", opts.NoDiskReserve, libOpts.NoDiskReserve},
	} {
		if c.got != c.want {
			t.Errorf("%s defaults to %v; the library's default is %v", c.name, c.got, c.want)
		}
	}
}

// parseNodeFlags returns the configuration `tsdht node` makes of its required flags
// and extra.
func parseNodeFlags(t *testing.T, extra ...string) (tsdb.Config, *store.PebbleOptions) {
	t.Helper()
	var cfg tsdb.Config
	var opts *store.PebbleOptions
	cmd := nodeCommand()
	cmd.Action = func(c *cli.Context) error {
		var err error
		if cfg, err = nodeConfig(c); err != nil {
			return err
		}
		opts, err = storeOptions(c)
		return err
	}
	app := &cli.App{Name: "tsdht", Commands: []*cli.Command{cmd}}
	args := append([]string{"tsdht", "node", "--rpc", "127.0.0.1:1", "--gossip", "127.0.0.1:2", "--data", t.TempDir()}, extra...)
	if err := app.Run(args); err != nil {
		t.Fatal(err)
	}
	return cfg, opts
}

// Rollups are on unless --rollups=false; --rollups, which turned them on, is still
// accepted.
func TestNodeRollupsFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		on   bool
	}{{nil, true}, {[]string{"--rollups"}, true}, {[]string{"--rollups=true"}, true}, {[]string{"--rollups=false"}, false}} {
		cfg, _ := parseNodeFlags(t, c.args...)
		if on := cfg.Rollups.WithDefaults(cfg.DHT.Quantum).On(); on != c.on {
			t.Errorf("tsdht node %v: rollups on %v, want %v", c.args, on, c.on)
		}
	}
}

// --cache-mb sets the block cache as given; 0, like no flag, sizes it from the memory
// the node may use.
func TestNodeCacheFlag(t *testing.T) {
	auto := store.CacheSizeFor(membudget.Available())
	for _, c := range []struct {
		args []string
		want int64
	}{{nil, auto}, {[]string{"--cache-mb", "0"}, auto}, {[]string{"--cache-mb", "8"}, 8 << 20}, {[]string{"--cache-mb", "300"}, 300 << 20}} {
		if _, opts := parseNodeFlags(t, c.args...); opts.CacheSize != c.want {
			t.Errorf("tsdht node %v: block cache %d MiB, want %d MiB", c.args, opts.CacheSize>>20, c.want>>20)
		}
	}
}
