package main

import (
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/urfave/cli/v2"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/httpapi"
	"github.com/tsdht/tsdht/internal/membudget"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/uplink"
)

// retentionOf is the node's --retention, 0 when unset or unparsable (the store's
// options refuse the latter).
func retentionOf(c *cli.Context) time.Duration {
	d, _ := store.ParseDuration(c.String("retention"))
	return d
}

// The node's flag defaults are the library's, read rather than retyped, so that a node
// started from the command line and one embedded with tsdb.Start behave alike.
var (
	libConfig = tsdb.DefaultConfig()
	libStore  = store.DefaultPebbleOptions()
)

const mib = 1 << 20

func nodeCommand() *cli.Command {
	cmd := &cli.Command{
		Name:  "node",
		Usage: "run a node: serve RPC, gossip membership, store shards",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "rpc", Required: true, Usage: "HOST:PORT to serve RPC on (clients' --cluster names it)"},
			&cli.StringFlag{Name: "gossip", Required: true, Usage: "HOST:PORT for membership gossip (UDP and TCP); with --routing kademlia, the bootstrap handshake alone (TCP)"},
			&cli.StringFlag{Name: "join", Usage: "gossip addresses of seed nodes, HOST:PORT[,HOST:PORT…]"},
			&cli.StringFlag{Name: "data", Required: true, Usage: "data directory: the node's identity and shards"},
			&cli.IntFlag{Name: "rf", Value: libConfig.RF, Usage: "replication factor 1..7"},
			quantumFlag(),
			idFormatFlag(),
			routingFlag(),
			&cli.IntFlag{Name: "bucket-size", Value: libConfig.DHT.BucketSize, Usage: "Kademlia's k: peers per routing-table bucket, and the least a lookup converges on (1..128)"},
			&cli.IntFlag{Name: "write-quorum", Usage: "replicas that must store a shard before a write succeeds (default: majority of rf)"},
			&cli.IntFlag{Name: "read-quorum", Usage: "replicas that must agree a shard is empty (default: majority of rf)"},
			&cli.BoolFlag{Name: "read-quorum-only", Usage: "reads ask a read quorum of each shard's replicas, chosen to ask few nodes, not all of them: fewer nodes per read; points that reached fewer replicas than the write quorum may be missed until repair (go doc ./tsdb Config.ReadQuorumOnly)"},
			&cli.DurationFlag{Name: "max-future", Value: libConfig.MaxFuture, Usage: "refuse points stamped further than this ahead of the node's clock"},
			&cli.StringFlag{Name: "sync", Value: libStore.Sync.String(), Usage: "durability of an acknowledged write: always (fsync before ack, group commit), batch (fsync every --sync-interval), none (no fsync: a crash can lose recent writes)"},
			&cli.DurationFlag{Name: "sync-interval", Value: libStore.SyncInterval, Usage: "with --sync batch: the most writing time a power cut can lose"},
			&cli.StringFlag{Name: "store", Value: "disk", Usage: "disk (pebble under --data) or memory (lost on exit, like the paper's prototype)"},
			&cli.Int64Flag{Name: "cache-mb", Usage: "block cache of the disk store, MiB; 0 sizes it from the memory the node may use: a 32nd of the least of MemTotal, its cgroup's limit and GOMEMLIMIT, from 16 (a 512 MB board) to 128 MiB (docs/deployment.md)"},
			&cli.Int64Flag{Name: "hot-mb", Value: libStore.HotCacheSize / mib, Usage: "hot tier: decoded recent chunks kept in RAM, MiB"},
			&cli.StringFlag{Name: "retention", Value: "0", Usage: "drop quanta that ended longer ago than this (a Go duration or days: 720h, 30d, 7d12h) and refuse writes into them; 0 keeps everything"},
			&cli.StringFlag{Name: "max-disk", Value: "0", Usage: "disk budget of the store (512MB, 2GB, 1.5GiB or bytes; MB = 10^6, MiB = 2^20): over it the oldest quanta are dropped; 0 is unlimited; pebble's WAL counts toward it"},
			&cli.BoolFlag{Name: "rollups", Value: true, Usage: "keep 1-minute, 1-hour and 1-day rollups of the series this node is a registry replica of and answer aggregates from them where they are exact (docs/rollups.md); --rollups=false turns them off; the same on every node"},
			&cli.StringFlag{Name: "rollup-retention", Usage: "how long the rollup levels are kept, one duration per level (1 minute, 1 hour, 1 day), comma-separated, 0 = forever; independent of --retention, so rollups can answer for raw data already dropped (default 90d,0,0)"},
			&cli.DurationFlag{Name: "repair-interval", Value: libConfig.RepairInterval, Usage: "how often (±25%) the node compares every shard it holds with its owners; membership changes start a pass at once"},
			&cli.Float64Flag{Name: "repair-rate", Value: float64(libConfig.RepairRate) / mib, Usage: "MiB/s of repair and hand-off work (points read and pushed, 12 bytes a point); 0 = unbounded"},
			&cli.DurationFlag{Name: "handoff-timeout", Value: libConfig.HandoffTimeout, Usage: "how long a decommission asked without a deadline may spend handing the shards off (SIGTERM keeps the data and hands nothing off)"},
			&cli.DurationFlag{Name: "down-grace", Value: libConfig.DHT.DownGrace, Usage: "how long the others keep a node that stopped on purpose (SIGTERM: a restart, an upgrade) as an owner of its shards, holding hints for it, before they copy its shards elsewhere; the same on every node"},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "least level logged: debug, info, warn or error"},
			&cli.StringFlag{Name: "log-format", Value: "text", Usage: "log records as text (key=value) or json, one per line on stderr"},
			&cli.StringFlag{Name: "http", Usage: "HOST:PORT to serve the HTTP API on (InfluxDB 1.x /write and /query, Prometheus /api/v1/write, /metrics, /health, /ready) and the node's web page at /; off when not given"},
			clusterKeyFlag,
			&cli.DurationFlag{Name: "stop-timeout", Value: 20 * time.Second, Usage: "after SIGINT/SIGTERM, exit even if the stop has not finished by then (an engine blocked on a full disk); keep it below the service manager's own (systemd TimeoutStopSec)"},
			&cli.BoolFlag{Name: "new-identity", Usage: "start under a new identity when --data holds a node's data but lost its identity.key (without it that is an error): the node joins as a new member and repair hands the old data to the shards' owners; no effect when identity.key is there"},
			&cli.BoolFlag{Name: "accept-wal-loss", Usage: "with --rf 1 and --sync always: start even though a damaged write-ahead log would drop acknowledged writes no other replica holds (without it the node refuses to start and says what would be lost); replay stops at the damage and the rest is gone. With --rf above 1 the loss is reported and repair refills it, and with --sync batch or none it is reported, without this flag"},
			&cli.StringFlag{Name: "disk-reserve", DefaultText: "the store's: 64MiB, or 16 memtables if more", Usage: "free space kept on the data filesystem for the storage engine (512MB, 1GiB or bytes): writes are refused as \"disk full\" below it; 0 disables the check"},
		}, limitFlags()...),
		Action: runNode,
	}
	cmd.Flags = append(cmd.Flags, uplinkFlags()...)
	return cmd
}

func runNode(c *cli.Context) error {
	logger, err := newLogger(c.String("log-level"), c.String("log-format"))
	if err != nil {
		return err
	}
	defer startGCFloor(logger)()
	cfg, err := nodeConfig(c)
	if err != nil {
		return err
	}
	upCfgs, err := uplinkConfigs(c)
	if err != nil {
		return err
	}
	hcfg := httpapi.DefaultConfig()
	if err := httpLimits(c, &hcfg); err != nil {
		return err
	}
	if c.Duration("stop-timeout") <= 0 {
		return badFlag("--stop-timeout %v: want a positive duration", c.Duration("stop-timeout"))
	}
	dir := c.String("data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--data: %w", err)
	}
	cfg.DHT.DataDir = dir
	cfg.Logger = logger
	ring, err := clusterKey(c)
	if err != nil {
		return err
	}
	cfg.RPC.ClusterKey, cfg.DHT.ClusterKey = ring, ring
	if err := checkSeeds(c.Context, cfg.DHT.Join, ring); err != nil {
		return err
	}
	if ring == nil {
		logger.Warn("no --cluster-key-file: anyone who reaches the rpc and gossip ports can join, read and write (docs/security.md)")
	}
	id, err := loadIdentity(dir, c.Bool("new-identity"))
	if err != nil {
		return err
	}
	self := dht.NewPeer(id, "")
	st, err := openStore(c, dir, cfg.DHT.Quantum, logger.With("node", hex.EncodeToString(self.Key[:])))
	if errors.Is(err, store.ErrWALLoss) {
		return cli.Exit(fmt.Sprintf("tsdht node: %v.\nWith --rf 1 no other replica holds these points, so the node does not start. "+
			"Copy %s aside first (the damaged log is the evidence; `tsdht fsck --data %s` details it), then restore the data from a backup, "+
			"or start with --accept-wal-loss to replay up to the damage and go on without the rest", err, dir, dir), 1)
	}
	if err != nil {
		return dirInUse(dir, err)
	}
	cfg.Store = st
	if err := writePIDFile(dir); err != nil {
		logger.Warn("cannot write the pid file", "err", err)
	}
	defer removePIDFile(dir)

	n, err := tsdb.Start(cfg)
	if err != nil {
		st.Close()
		return err
	}
	logger = logger.With("node", hex.EncodeToString(self.Key[:]))
	logger.Info("serving", "rpc", n.RPCAddr(), "gossip", n.DHT().GossipAddr(), "id_format", cfg.DHT.Format.String(),
		"quantum", cfg.DHT.Quantum.Duration().String(), "rf", cfg.RF, "routing", cfg.DHT.Routing.String())
	for i := range upCfgs {
		if upCfgs[i].ClusterKey == nil { // no key=FILE in the URL: the node's own
			upCfgs[i].ClusterKey = ring
		}
		upCfgs[i].Retention = retentionOf(c)
	}
	ups, err := uplink.Start(upCfgs, n.Coordinator(), n.Coordinator(), n.DHT(), logger)
	if err != nil {
		n.Close()
		return badFlag("--uplink: %w", err)
	}
	n.SetUplinks(ups.Stats)
	n.SetStoredTap(ups.Stored)
	if len(upCfgs) > 0 {
		logger.Info("uplinks", "to", describeUplinks(upCfgs))
	}
	stopHTTP, err := startHTTP(c.String("http"), hcfg, n, cfg.RPC.ClusterKey, logger)
	if err != nil {
		ups.Close()
		n.Close()
		return err
	}

	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	var stop func() error
	select {
	case s := <-sig:
		// A stop, not a departure: the data stays for the restart, and the others hold
		// hints meanwhile (tsdht decommission is how a node goes for good).
		logger.Info("stopping; data kept", "signal", s.String())
		stop = n.Close
	case <-n.Decommissioned():
		logger.Info("decommissioned: shards handed off; leaving the cluster")
		stop = n.Leave
	}
	done := make(chan error, 1)
	go func() {
		stopHTTP()
		ups.Close() // the uplinks save their cursors while the node still serves
		done <- stop()
	}()
	grace := time.NewTimer(c.Duration("stop-timeout"))
	defer grace.Stop()
	select {
	case err := <-done:
		return err
	case <-grace.C:
		// Something is stuck (a write blocked in the storage engine on a full disk):
		// the stop would never end, and the service manager's SIGKILL would leave no
		// word of why. What --sync promised is in the WAL either way.
		// Exit here, not by returning: the deferred pid file removal would touch the
		// same stuck filesystem.
		logger.Error("stop did not finish within --stop-timeout: exiting without waiting for it; the WAL replays every acknowledged write at the next start",
			"stop_timeout", c.Duration("stop-timeout").String())
		os.Exit(1)
		return nil
	case s := <-sig:
		// A second signal: the operator does not want to wait. Nothing acknowledged is
		// lost (the store's WAL has it); the others see a death instead of a stop.
		return cli.Exit(fmt.Sprintf("tsdht: %s again: exiting at once", s), 1)
	}
}

// loadIdentity loads the node's identity from dir, or creates it on first use; with
// adopt (--new-identity) also in a directory that lost it.
func loadIdentity(dir string, adopt bool) (id peer.ID, err error) {
	if adopt {
		return dht.AdoptNewIdentity(dir)
	}
	id, err = dht.LoadOrCreateIdentity(dir)
	if errors.Is(err, dht.ErrIdentityLost) {
		return "", cli.Exit(fmt.Sprintf("tsdht node: %v; `tsdht node --new-identity` does the latter", err), 1)
	}
	return id, err
}

// nodeConfig turns the node's flags into its configuration, all but the data directory,
// the store, the cluster key and the logger.
func nodeConfig(c *cli.Context) (tsdb.Config, error) {
	cfg := tsdb.DefaultConfig()
	q, err := quanta.NewQuantum(c.Duration("quantum"))
	if err != nil {
		return cfg, badFlag("--quantum: %w", err)
	}
	f, err := quanta.ParseFormat(c.String("id-format"))
	if err != nil {
		return cfg, badFlag("--id-format: %w", err)
	}
	routing, err := dht.ParseRouting(c.String("routing"))
	if err != nil {
		return cfg, badFlag("--routing: %w", err)
	}
	for _, name := range []string{"rpc", "gossip", "join", "http"} {
		if _, err := hostPorts(name, c.String(name)); err != nil {
			return cfg, err
		}
	}
	cfg.DHT.GossipAddr = c.String("gossip")
	cfg.DHT.Join = splitAddrs(c.String("join"))
	cfg.DHT.Quantum = q
	cfg.DHT.Format = f
	cfg.DHT.Routing = routing
	cfg.DHT.BucketSize = c.Int("bucket-size")
	cfg.RPCBind = c.String("rpc")
	cfg.DHT.RPCAddr = c.String("rpc")
	cfg.RF = c.Int("rf")
	cfg.WriteQuorum = c.Int("write-quorum")
	cfg.ReadQuorum = c.Int("read-quorum")
	cfg.ReadQuorumOnly = c.Bool("read-quorum-only")
	cfg.MaxFuture = c.Duration("max-future")
	cfg.RepairInterval = c.Duration("repair-interval")
	cfg.Rollups.Off = !c.Bool("rollups")
	if cfg.Rollups.Retention, err = parseRollupRetention(c.String("rollup-retention")); err != nil {
		return cfg, err
	}
	cfg.RepairRate = int64(c.Float64("repair-rate") * mib)
	cfg.RepairUnthrottled = c.Float64("repair-rate") == 0
	cfg.HandoffTimeout = c.Duration("handoff-timeout")
	cfg.DHT.DownGrace = c.Duration("down-grace")
	if err := applyLimitFlags(c, &cfg); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// openStore opens the node's local store as the flags say.
func openStore(c *cli.Context, dir string, q quanta.Quantum, logger *slog.Logger) (store.Store, error) {
	opts, err := storeOptions(c)
	if err != nil {
		return nil, err
	}
	if opts == nil {
		return store.NewMem(), nil
	}
	opts.Quantum = q
	opts.Logger = logger
	st, err := store.OpenPebble(filepath.Join(dir, "store"), *opts)
	if err != nil {
		return nil, fmt.Errorf("opening the store in %s: %w", dir, err)
	}
	return st, nil
}

// storeOptions turns the store's flags into the disk store's options; nil (and no
// error) for --store memory.
func storeOptions(c *cli.Context) (*store.PebbleOptions, error) {
	switch c.String("store") {
	case "memory":
		for _, f := range []string{"retention", "max-disk"} {
			if c.IsSet(f) {
				return nil, badFlag("--%s applies to --store disk", f)
			}
		}
		return nil, nil
	case "disk":
	default:
		return nil, badFlag("--store %q: want disk or memory", c.String("store"))
	}
	mode, err := store.ParseSyncMode(c.String("sync"))
	if err != nil {
		return nil, badFlag("--sync: %w", err)
	}
	opts := store.DefaultPebbleOptions()
	opts.Sync = mode
	// Only --sync always acknowledges nothing it has not fsynced: with batch or none the
	// last interval's records reach the disk in any order, so a power cut can leave
	// records after a hole that the mode never promised to keep.
	opts.RefuseWALLoss = c.Int("rf") == 1 && mode == store.SyncAlways && !c.Bool("accept-wal-loss")
	opts.SyncInterval = c.Duration("sync-interval")
	if opts.CacheSize = c.Int64("cache-mb") * mib; opts.CacheSize <= 0 {
		opts.CacheSize = store.CacheSizeFor(membudget.Available())
	}
	opts.HotCacheSize = c.Int64("hot-mb") * mib
	if opts.Retention, err = store.ParseDuration(c.String("retention")); err != nil {
		return nil, badFlag("--retention: %w", err)
	}
	if opts.MaxDisk, err = store.ParseSize(c.String("max-disk")); err != nil {
		return nil, badFlag("--max-disk: %w", err)
	}
	if c.IsSet("disk-reserve") {
		if opts.DiskReserve, err = store.ParseSize(c.String("disk-reserve")); err != nil {
			return nil, badFlag("--disk-reserve: %w", err)
		}
		opts.NoDiskReserve = opts.DiskReserve == 0
	}
	return &opts, nil
}

// newLogger returns the node's logger on stderr at the given level and format.
func newLogger(level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, badFlag("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, badFlag("--log-format %q: want text or json", format)
}
