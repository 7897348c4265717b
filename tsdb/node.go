// Package tsdb is a tsdht node: Config and its defaults, Start, the one shutdown
// sequence of Close, Leave and Kill, hand-off for a decommission, the node's own
// counters (Stats, Status), and the RPC methods a node serves as a coordinator. It
// assembles the roles that live in their own packages — the coordinator (coord), the
// local replica (replica), the repairer (repair), rollup homes (rollup) — over the DHT
// (dht) and how replicas are reached (cluster), and LocalCluster runs several nodes
// in one process. The thin client is package client.
package tsdb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsdht/tsdht/tsdb/coord"

	"github.com/tsdht/tsdht/tsdb/repair"

	"github.com/tsdht/tsdht/tsdb/replica"
	"github.com/tsdht/tsdht/tsdb/rollup"
	"github.com/tsdht/tsdht/tsdb/watch"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// MaxRF is the largest replication factor.
const MaxRF = 7

// Config configures a node. The zero value of every field but Store takes the default
// that DefaultConfig shows.
type Config struct {
	// DHT configures identity, gossip, quantum and ID format; zero fields take dht's
	// defaults. DHT.Quantum is the cluster's quantum, the one source of it: a store that
	// has its own (store.PebbleOptions.Quantum) must agree, or Start refuses. DHT.RPCAddr
	// is filled in from the bound RPC address when empty.
	DHT dht.Config
	// RPCBind is the address the RPC server listens on; ":0" picks a port. Default
	// 127.0.0.1:0.
	RPCBind string
	// RF is the replication factor, 1..7: every shard lives on the RF closest live nodes.
	// Default 3.
	RF int
	// WriteQuorum is how many replicas must store a shard before a write succeeds.
	// Default: a majority of RF.
	WriteQuorum int
	// ReadQuorum is how many replicas must answer for a shard that none of them holds
	// to count as truly empty. Default: a majority of RF.
	ReadQuorum int
	// ReadQuorumOnly makes a read ask only a read quorum of each shard's replicas (one
	// for its points, the others for digests, chosen to ask few nodes) instead of all
	// of them. A read then still returns every point that reached its write quorum when
	// ReadQuorum + WriteQuorum > RF (the defaults), but may miss a point that reached
	// fewer replicas (a failed write, before repair). Default false: every replica.
	ReadQuorumOnly bool
	// MaxFuture refuses points stamped further than this ahead of the coordinator's
	// clock: a PMU that lost GPS lock must not write next year. Default 10 minutes.
	MaxFuture time.Duration
	// CallTimeout bounds each replica call a coordinator makes. Default 5 s.
	CallTimeout time.Duration
	// ReadConcurrency bounds the requests one read has in flight beyond one to each
	// node it asks: a read of points sends a request to each of up to 64 nodes at
	// once, whatever this says, so that no request waits for another's answer (a read
	// of 150 s of history at rf 3 asks some 17 nodes), and at most this many when it
	// asks more. Default 16.
	ReadConcurrency int
	// LongReadShare is the share of its wall time this node's long reads (gets and
	// aggregates over more than a page of quanta) take on average once their burst
	// is spent, while the node is contended: another long read waits for its turn,
	// or the node coordinated a write within the last second (longread.go). It is
	// what bounds a flood of them, careless or hostile; a long read alone on an
	// otherwise idle node is not paced. In (0, 1]; 1 never paces them (tests).
	// Default 0.25.
	LongReadShare float64
	// RepairInterval is how often, give or take a quarter, a node compares every shard
	// it holds with the shard's owners and pushes what they lack. Membership changes
	// start a pass at once. Default 10 minutes.
	RepairInterval time.Duration
	// RepairFullEvery is how often a periodic pass compares every pair held and reads
	// every point (a scrub: checksums verified, a damaged block fetched again from an
	// owner). The passes between compare only what changed: the pairs written, pushed
	// or deleted into since their quantum was sealed, and those the last pass left
	// short of rf confirmed copies or held for others — so an idle node's pass costs
	// what changed, not what it holds. A membership change, a failed pass and
	// RepairNow always compare everything; so does every pass on a store that cannot
	// list what changed. Only RepairNow, the first pass after start and these periodic
	// ones scrub: a membership change compares set hashes, which no point is read for.
	// Default 6 hours.
	RepairFullEvery time.Duration
	// RepairSettle is how long a pass waits after a membership change for further
	// changes, so that a burst of joins or deaths costs one pass. Default 500 ms.
	RepairSettle time.Duration
	// RepairRate bounds repair and hand-off work in bytes per second: the pairs a pass
	// compares (64 bytes each) and the points it pushes (12 bytes each), so that a
	// BeagleBone's 100 Mbit link and single core stay usable for ingest. Default 4 MiB/s.
	RepairRate int64
	// RepairUnthrottled lifts RepairRate: repair runs as fast as it can (tests, a
	// cluster being rebuilt while idle).
	RepairUnthrottled bool
	// MaxHintPoints bounds the points a node keeps for replicas it could not reach.
	// Past it a failed replica write is left to anti-entropy. Default 1 Mi points.
	MaxHintPoints int64
	// WriteRetry is how long a write whose shards missed their quorum because replicas
	// failed keeps retrying them against re-resolved replica sets (failure detection
	// takes 1.5–3 s on a LAN), within the request's own deadline. Default 10 s.
	WriteRetry time.Duration
	// HandoffTimeout bounds a decommission's hand-off of shards when the caller set no
	// deadline (tsdht decommission sets its own --timeout). Default 30 s.
	HandoffTimeout time.Duration
	// NewSeriesPerRequest bounds the series this node does not know yet (not in its
	// coordinator's caches) that one write through it may name: a write past it is
	// refused whole (wire.CodeTooManySeries, HTTP 413) before anything is stored. Each
	// such series costs round trips and commits at its registry replicas and memory here
	// until they are done. -1 lifts the limit. Default 5,000.
	NewSeriesPerRequest int
	// NewSeriesPerSecond bounds, on average, the series this node takes on that it does
	// not know yet, across all writes (a token bucket NewSeriesPerRequest deep): a write
	// past it is refused whole (wire.CodeSlowDown, HTTP 429 with Retry-After). -1 lifts
	// the limit. Default 1,000.
	NewSeriesPerSecond float64
	// RPC configures framing and connections; zero fields take rpc's defaults.
	RPC rpc.Config
	// Transport carries RPC; nil means TCP.
	Transport rpc.Transport
	// Store holds this node's shards; the node closes it on Close. Required.
	Store store.Store
	// Rollups configures rollups (package rollup, docs/rollups.md). Default on.
	Rollups RollupConfig
	// Logger receives the node's log, and its RPC's and DHT's (it replaces
	// RPC.Logger and DHT.Logger); every record carries the node's 40-hex ID as
	// "node". Nil discards it.
	Logger *slog.Logger
}

// DefaultConfig returns a configuration for a small LAN cluster of edge boards: what
// the zero Config means, with no store.
func DefaultConfig() Config {
	return Config{
		DHT:             dht.DefaultLANConfig(),
		RPCBind:         "127.0.0.1:0",
		RF:              3,
		MaxFuture:       10 * time.Minute,
		CallTimeout:     5 * time.Second,
		ReadConcurrency: 16,
		LongReadShare:   coord.DefaultLongReadShare,
		RepairInterval:  10 * time.Minute,
		RepairSettle:    500 * time.Millisecond,
		RepairFullEvery: 6 * time.Hour,
		RepairRate:      4 << 20,
		MaxHintPoints:   1 << 20,
		HandoffTimeout:  30 * time.Second,
		WriteRetry:      10 * time.Second,
		RPC:             rpc.DefaultConfig(),

		NewSeriesPerRequest: 5_000,
		NewSeriesPerSecond:  1_000,
	}
}

// withDefaults returns c with its zero fields set to the defaults.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	set := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	if c.DHT.Quantum == 0 {
		c.DHT.Quantum = d.DHT.Quantum
	}
	if c.DHT.Format == 0 {
		c.DHT.Format = d.DHT.Format
	}
	if c.RPCBind == "" {
		c.RPCBind = d.RPCBind
	}
	if c.RF == 0 {
		c.RF = d.RF
	}
	if c.WriteQuorum == 0 {
		c.WriteQuorum = majority(c.RF)
	}
	if c.ReadQuorum == 0 {
		c.ReadQuorum = majority(c.RF)
	}
	set(&c.MaxFuture, d.MaxFuture)
	set(&c.CallTimeout, d.CallTimeout)
	if c.ReadConcurrency == 0 {
		c.ReadConcurrency = d.ReadConcurrency
	}
	if c.LongReadShare == 0 {
		c.LongReadShare = d.LongReadShare
	}
	set(&c.RepairInterval, d.RepairInterval)
	set(&c.RepairSettle, d.RepairSettle)
	set(&c.RepairFullEvery, d.RepairFullEvery)
	if c.RepairRate == 0 {
		c.RepairRate = d.RepairRate
	}
	if c.MaxHintPoints == 0 {
		c.MaxHintPoints = d.MaxHintPoints
	}
	set(&c.HandoffTimeout, d.HandoffTimeout)
	set(&c.WriteRetry, d.WriteRetry)
	if c.NewSeriesPerRequest == 0 {
		c.NewSeriesPerRequest = d.NewSeriesPerRequest
	}
	if c.NewSeriesPerSecond == 0 {
		c.NewSeriesPerSecond = d.NewSeriesPerSecond
	}
	if c.Transport == nil {
		c.Transport = rpc.NewTCPTransport()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Rollups = c.Rollups.WithDefaults(c.DHT.Quantum)
	return c
}

// Validate reports a configuration that cannot work, naming each field at fault. Zero
// fields are valid: they take the defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.RF < 1 || c.RF > MaxRF {
		errs = append(errs, fmt.Errorf("replication factor %d: must be 1..%d", c.RF, MaxRF))
	}
	if c.WriteQuorum < 1 || c.WriteQuorum > c.RF {
		errs = append(errs, fmt.Errorf("write quorum %d: must be 1..rf (%d)", c.WriteQuorum, c.RF))
	}
	if c.ReadQuorum < 1 || c.ReadQuorum > c.RF {
		errs = append(errs, fmt.Errorf("read quorum %d: must be 1..rf (%d)", c.ReadQuorum, c.RF))
	}
	if c.Store == nil {
		errs = append(errs, errors.New("no store configured"))
	}
	if !(c.LongReadShare > 0 && c.LongReadShare <= 1) {
		errs = append(errs, fmt.Errorf("long read share %v: must be in (0, 1] (0 takes the default, %v)", c.LongReadShare, coord.DefaultLongReadShare))
	}
	if c.DHT.Quantum < 1 {
		errs = append(errs, fmt.Errorf("quantum %ds: must be at least 1s", c.DHT.Quantum))
	}
	if q, ok := c.Store.(interface{ Quantum() quanta.Quantum }); ok && q.Quantum() != c.DHT.Quantum {
		errs = append(errs, fmt.Errorf("the store was opened with quantum %v but the cluster's is %v: open it with the node's quantum",
			q.Quantum().Duration(), c.DHT.Quantum.Duration()))
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"max future", int64(c.MaxFuture)}, {"call timeout", int64(c.CallTimeout)},
		{"read concurrency", int64(c.ReadConcurrency)}, {"repair interval", int64(c.RepairInterval)},
		{"repair settle", int64(c.RepairSettle)}, {"repair full every", int64(c.RepairFullEvery)}, {"repair rate", c.RepairRate},
		{"max hint points", c.MaxHintPoints}, {"hand-off timeout", int64(c.HandoffTimeout)}, {"write retry", int64(c.WriteRetry)},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s %d: must not be negative (0 takes the default)", f.name, f.v))
		}
	}
	if c.NewSeriesPerRequest < -1 || c.NewSeriesPerSecond < 0 && c.NewSeriesPerSecond != -1 {
		errs = append(errs, fmt.Errorf("new series per request %d, per second %v: must be positive (0 takes the default, -1 lifts the limit)",
			c.NewSeriesPerRequest, c.NewSeriesPerSecond))
	}
	if err := c.RPC.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.DHT.Quantum >= 1 {
		if err := c.Rollups.Validate(c.DHT.Quantum); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func majority(rf int) int { return rf/2 + 1 }

// coordConfig is what the coordinator takes of c.
func (c *Config) coordConfig() coord.Config {
	return coord.Config{RF: c.RF, WriteQuorum: c.WriteQuorum, ReadQuorum: c.ReadQuorum, ReadQuorumOnly: c.ReadQuorumOnly,
		Quantum: c.DHT.Quantum, Format: c.DHT.Format, MaxFuture: c.MaxFuture, CallTimeout: c.CallTimeout,
		WriteRetry: c.WriteRetry, ReadConcurrency: c.ReadConcurrency, LongReadShare: c.LongReadShare,
		NewSeriesPerRequest: max(c.NewSeriesPerRequest, 0), NewSeriesPerSecond: max(c.NewSeriesPerSecond, 0),
		FullMembership: c.DHT.Routing != dht.RoutingKademlia}
}

// repairConfig is what the repairer takes of c.
func (c *Config) repairConfig() repair.RepairConfig {
	return repair.RepairConfig{RF: c.RF, CallTimeout: c.CallTimeout, Interval: c.RepairInterval,
		FullEvery: c.RepairFullEvery, Settle: c.RepairSettle, Rate: c.RepairRate, Unthrottled: c.RepairUnthrottled,
		MaxHintPoints: c.MaxHintPoints}
}

// Node is one tsdht node: RPC server, DHT membership, local store, and coordinator. It
// wires the parts together; they reach each other only through Placement (the DHT),
// Replicas (this node locally, the others over RPC) and the hints kept for the repairer.
type Node struct {
	cfg      Config
	log      *slog.Logger
	srv      *rpc.Server
	cli      *rpc.Client
	dht      *dht.Node
	store    store.Store
	local    *replica.Local
	replicas cluster.Replicas
	coord    *coord.Coordinator
	repair   *repair.Repairer // nil when the store cannot be walked
	hints    *repair.Hints    // nil with repair
	homes    *rollup.Homes    // nil: rollups off
	watch    *watch.Hub       // live subscriptions (watch_node.go)
	watchCli watchClient      // the node's own client of them (watch_node.go)
	rpcAdr   string

	decommissioned chan struct{} // closed when a decommission asked over RPC handed off
	decomOnce      sync.Once
	refill         refill // after a WAL loss at start-up (refill.go)

	uplinks   atomic.Pointer[func() []wire.UplinkStats] // SetUplinks
	storedTap atomic.Pointer[storedFunc]                // SetStoredTap (storedtap_node.go)
}

// SetUplinks has the node's Stats (and so tsdht status and /metrics) report the
// uplinks f describes (package uplink runs them over the node's coordinator).
func (n *Node) SetUplinks(f func() []wire.UplinkStats) { n.uplinks.Store(&f) }

// Start brings a node up: it listens for RPC, joins the cluster and serves.
func Start(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	id, err := loadIdentity(cfg)
	if err != nil {
		return nil, err
	}
	// Every record names the node as status does.
	logger := cfg.Logger.With("node", cluster.NodeID(dht.NewPeer(id, "")))
	cfg.Logger, cfg.RPC.Logger, cfg.DHT.Logger = logger, logger, logger
	n := &Node{log: logger, store: cfg.Store, decommissioned: make(chan struct{})}
	n.srv = rpc.NewServer(cfg.Transport, cfg.RPC)
	n.cli = rpc.NewClient(cfg.Transport, cfg.RPC)

	// Bound now, served only once every handler is registered below: a request that
	// comes earlier waits in the backlog instead of finding its method missing.
	addr, err := n.srv.Bind(cfg.RPCBind)
	if err != nil {
		n.cli.Close()
		return nil, fmt.Errorf("rpc listen on %s: %w", cfg.RPCBind, err)
	}
	n.rpcAdr = addr.String()
	if cfg.DHT.RPCAddr == "" {
		cfg.DHT.RPCAddr = n.rpcAdr
	}
	n.cfg = cfg
	n.dht, err = dht.New(cfg.DHT, id, n.srv, n.cli)
	if err != nil {
		n.srv.Close()
		n.cli.Close()
		return nil, err
	}
	n.assemble()
	// Handlers go in only now that everything they touch exists, and the server
	// accepts only once they are in.
	replica.Register(n.srv, n.local)
	n.registerCoordinator()
	n.registerAnalytics()
	n.registerWatch()
	if n.homes != nil {
		n.homes.Register(n.srv)
	}
	n.srv.Serve()
	if err := n.dht.Start(); err != nil {
		if errors.Is(err, dht.ErrIncompatible) || n.dht.GossipAddr() == "" {
			n.dht.Close()
			n.srv.Close()
			n.cli.Close()
			return nil, err
		}
		// After a power cut the seeds may not be back yet: the node serves and keeps
		// re-joining in the background.
		n.log.Warn("serving while not joined", "err", err)
	}
	if n.homes != nil {
		n.homes.Start()
	}
	n.watch.Start()
	if n.repair != nil {
		go n.repair.Run(n.dht.Subscribe())
		n.startRefill()
	} else {
		n.log.Warn(fmt.Sprintf("store %T cannot be walked: this node will not repair or hand off shards", n.store))
	}
	return n, nil
}

// loadIdentity loads the node's identity from its data directory, or creates it on
// first use. A data directory that holds data but lost its identity file is an error
// (dht.ErrIdentityLost), unless the store holds nothing yet: an embedder may open the
// store in the data directory before the first Start.
func loadIdentity(cfg Config) (peer.ID, error) {
	if st := cfg.Store.Stats(); st.Shards == 0 && st.Series == 0 {
		return dht.AdoptNewIdentity(cfg.DHT.DataDir)
	}
	return dht.LoadOrCreateIdentity(cfg.DHT.DataDir)
}

// assemble builds the node's parts over its DHT, store and RPC client.
func (n *Node) assemble() {
	cfg := &n.cfg
	n.local = replica.New(replica.Config{Store: n.store, Quantum: cfg.DHT.Quantum, Format: cfg.DHT.Format, Stats: n.Stats, MaxFuture: cfg.MaxFuture})
	n.replicas = cluster.NewReplicas(n.dht.Self().ID, n.local, n.cli, cfg.CallTimeout, n.dht)
	cc := cfg.coordConfig()
	_, cc.LocalBatches = n.store.(store.BatchAppender)
	types := coord.NewRegistry(n.dht, n.replicas, cc, n.log)
	if w, ok := n.store.(repair.Walker); ok && cfg.RepairInterval > 0 {
		n.repair = repair.NewRepairer(cfg.repairConfig(), n.dht, n.replicas, n.store, w, types, n.log)
		n.hints = n.repair.Hints()
	}
	// The coordinator marks and reads the rollup homes through a client; the homes
	// read the cluster through the coordinator, so they come after it.
	var homesClient *rollup.Client // nil: rollups off
	if cfg.Rollups.On() {
		homesClient = rollup.NewClient(cfg.Rollups, n.cli, cfg.CallTimeout, n.log)
	}
	n.coord = coord.New(cc, n.dht, n.replicas, types, n.hints, homesClient, n.log)
	if cfg.Rollups.On() {
		st, _ := n.store.(store.RollupStore) // nil: kept in memory
		n.homes = rollup.NewHomes(cfg.Rollups, n.coord.RollupSource(), rollup.Options{
			Quantum: cfg.DHT.Quantum, ReadQuorum: cfg.ReadQuorum, Store: st, Self: n.dht.Self().ID, Log: n.log})
		// A mark or a read for this node's own homes is a call, not an RPC to itself
		// behind every other request its server queues.
		homesClient.ServeLocally(n.dht.Self().ID, n.homes)
	}
	n.assembleWatch()
	n.assembleStoredTap()
}

// RPCAddr returns the address the node's RPC server is bound to.
func (n *Node) RPCAddr() string { return n.rpcAdr }

// DHT returns the node's membership and routing.
func (n *Node) DHT() *dht.Node { return n.dht }

// Coordinator returns the node's coordinator, which reads and writes series.
func (n *Node) Coordinator() *coord.Coordinator { return n.coord }

// Store returns the node's local store.
func (n *Node) Store() store.Store { return n.store }

// Close stops the node and keeps its data: what SIGTERM and SIGINT do, so that a
// restart or an upgrade moves nothing. The others learn that it stopped (not that it
// died) and keep it among the owners of its shards for their DHT.DownGrace: their
// writes for it leave hints, which reach it when it is back. Decommission is for a
// node that goes for good.
func (n *Node) Close() error {
	st := n.store.Stats()
	err := n.shutdown(func() error { return n.dht.Stop(2 * time.Second) })
	if err == nil {
		n.log.Info("stopped; data kept for the restart", "pairs", st.Shards, "points", st.Points)
	}
	return err
}

// shutdown is the one stop sequence of Close, Leave and Kill, which differ only in
// how the node says goodbye to its peers (depart): background work stops first (so
// that none of it starts a call on a closing network), then membership, then the
// network, and the store last (operations after an engine's Close would panic;
// closing it flushes it).
func (n *Node) shutdown(depart func() error) error {
	n.stopRefill()
	if n.repair != nil {
		n.repair.Close()
	}
	if n.homes != nil {
		n.homes.Close()
	}
	n.closeWatch()
	errs := []error{depart()}
	errs = append(errs, n.srv.Close(), n.cli.Close(), n.store.Close())
	return errors.Join(errs...)
}

// HandOff prepares a decommission: it tells the others that this node is leaving
// (from then on it owns nothing, yet still answers), pushes every pair it holds to
// the pair's owners and deletes each once every owner confirmed it. The node stays a
// member; Leave or Decommission ends it.
func (n *Node) HandOff(ctx context.Context) (wire.DecommissionResp, error) {
	resp := wire.DecommissionResp{NodeID: cluster.NodeID(n.dht.Self())}
	if n.repair == nil {
		return resp, errors.New("this node's store cannot be walked: it cannot hand its shards off")
	}
	// Tell the others first, so that none counts this node as an owner while it hands
	// off: a node that received a copy must not drop it as surplus.
	if err := n.dht.BeginLeave(2 * time.Second); err != nil {
		n.log.Warn("announcing the leave failed", "err", err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.cfg.HandoffTimeout)
		defer cancel()
	}
	before := n.repair.Stats()
	err := n.repair.Pass(ctx, repair.PassLeaving)
	after := n.repair.Stats()
	resp.PushedPairs = after.PushedPairs - before.PushedPairs
	resp.HandedOff = after.DroppedPairs - before.DroppedPairs
	resp.StillHeld = n.store.Stats().Shards
	if err == nil && resp.StillHeld > 0 {
		err = fmt.Errorf("%d pairs could not be handed off (an owner did not confirm them)", resp.StillHeld)
	}
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelWarn
	}
	n.log.Log(context.Background(), level, "hand-off for decommission", "pushed_pairs", resp.PushedPairs,
		"handed_off", resp.HandedOff, "still_held", resp.StillHeld, "err", err)
	return resp, err
}

// Leave leaves the cluster for good and closes the node, data or not: after HandOff.
func (n *Node) Leave() error {
	return n.shutdown(func() error {
		err := n.dht.Leave(2 * time.Second)
		// A decommission asked over RPC ends here: its handler told the process to
		// leave before it returned, so its answer may still be on its way out; the
		// network closes once it is (or after leaveAnswerWait on a node still asked
		// other things).
		ctx, cancel := context.WithTimeout(context.Background(), leaveAnswerWait)
		defer cancel()
		_ = n.srv.Quiesce(ctx) // past the wait, what is left unanswered is retried by its callers
		return err
	})
}

// leaveAnswerWait bounds how long Leave waits for the answers in flight.
const leaveAnswerWait = time.Second

// Decommission hands every shard off and leaves the cluster for good (HandOff, then
// Leave). It leaves even if the hand-off did not finish, and then reports why.
func (n *Node) Decommission(ctx context.Context) (wire.DecommissionResp, error) {
	resp, err := n.HandOff(ctx)
	return resp, errors.Join(err, n.Leave())
}

// Decommissioned is closed once a decommission asked over RPC has handed this node's
// shards off: the process should then call Leave and exit.
func (n *Node) Decommissioned() <-chan struct{} { return n.decommissioned }

// Kill stops the node without leaving, as a crash would (for tests).
func (n *Node) Kill() error {
	return n.shutdown(n.dht.Close)
}

// RepairNow runs one full repair pass (every pair held compared with its owners) and
// waits for it: tests and operators use it instead of waiting for the next periodic pass.
func (n *Node) RepairNow(ctx context.Context) (RepairStats, error) {
	if n.repair == nil {
		return RepairStats{}, errors.New("this node's store cannot be walked: no repair")
	}
	err := n.repair.Pass(ctx, repair.PassFull)
	return n.repair.Stats(), err
}

// Stats returns this node's own counters (store, repair, read repairs), read in
// process: what status reports for it, without a call over the network.
func (n *Node) Stats() NodeStats {
	self := n.dht.Self()
	st := n.store.Stats()
	var rs RepairStats
	if n.repair != nil {
		rs = n.repair.Stats()
	}
	rs.ReadRepairs = n.coord.ReadRepairs()
	var ups []wire.UplinkStats
	if f := n.uplinks.Load(); f != nil {
		ups = (*f)()
	}
	return NodeStats{
		Uplinks:   ups,
		Repair:    rs,
		PeerInfo:  peerInfo(self, dht.StateAlive),
		Shards:    st.Shards,
		Series:    st.Series,
		Points:    st.Points,
		DiskBytes: st.DiskBytes,
		Retention: st.Retention.String(),
		MaxDisk:   st.MaxDisk,
		Oldest:    st.OldestQuantum,
		Dropped:   st.DroppedQuanta,

		Corruptions:       st.Corruptions,
		WALBytesDropped:   st.WALBytesDropped,
		Refilling:         n.refill.on.Load(),
		FlashBytesWritten: st.FlashBytesWritten,
		AppendedPoints:    st.AppendedPoints,
		ReadRequests:      n.local.ReadRequests(),
		CatalogReads:      n.local.CatalogReads(),
		Format:            n.cfg.DHT.Format.String(),
		Quantum:           int64(n.cfg.DHT.Quantum),
		RF:                n.cfg.RF,
		Reachable:         true,
	}
}
