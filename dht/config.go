package dht

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/tsdht/tsdht/clusterkey"
	"github.com/tsdht/tsdht/quanta"
)

// MaxRPCAddrLen is the longest RPC address a node may advertise: a DNS name
// of 253 characters, a colon and a five-digit port. It keeps the memberlist
// metadata, which carries the address, well under memberlist's 512-byte
// limit (metadata over it panics).
const MaxRPCAddrLen = 253 + 1 + 5

// maxQuantum bounds the quantum, in seconds, that a node accepts from its
// configuration or from a peer's metadata (about 35,000 years).
const maxQuantum = 1 << 40

// Config configures a Node. Zero fields take the values of DefaultLANConfig,
// except DataDir, RPCAddr, GossipAddr and Join, which have no default.
type Config struct {
	// DataDir is the directory that holds the node's identity
	// (IdentityFile). New reads it when it is given no peer ID.
	DataDir string

	// RPCAddr is the host:port of this node's rpc server as the other nodes
	// must dial it. It is advertised in the memberlist metadata, so it must
	// be reachable, not a wildcard, and at most MaxRPCAddrLen bytes.
	RPCAddr string

	// GossipAddr is the host:port memberlist binds (UDP and TCP) and
	// advertises, so the host must be this node's address on the LAN, not a
	// wildcard. Port 0 picks a free port (tests); Node.GossipAddr tells it.
	GossipAddr string

	// Join lists the gossip addresses of seed nodes. Start joins through
	// them, and while not every seed is a live member a background loop joins
	// them again every RejoinInterval: memberlist's Join does not retry, and
	// the halves of a partition that outlasts the dead nodes' gossip never
	// merge again by themselves. Listing this node itself is harmless.
	Join []string

	// RejoinInterval is how often the background loop re-joins missing
	// seeds and re-offers every live member to the routing table.
	RejoinInterval time.Duration

	// Quantum is the quantum length of the cluster. It travels in the
	// memberlist metadata; a node whose quantum differs is refused at join.
	Quantum quanta.Quantum

	// Format is the shard ID layout of the cluster, refused at join like a
	// differing Quantum.
	Format quanta.Format

	// Routing is the routing mode of the cluster (RoutingFull by default),
	// refused at join like a differing Quantum. In RoutingKademlia mode the
	// node runs no memberlist: GossipAddr serves the bootstrap handshake
	// alone (see Start), and the node knows only its routing table.
	Routing Routing

	// RefreshInterval is, in RoutingKademlia mode, how often the node
	// refreshes its buckets (a lookup of a random ID in the range of each)
	// and pings the table's entries it has not heard from in as long,
	// dropping those that do not answer. It also retries the seeds while the
	// table is empty.
	RefreshInterval time.Duration

	// ReplicaCacheSize bounds, in RoutingKademlia mode, how many shard IDs'
	// lookup results the node keeps.
	ReplicaCacheSize int

	// ReplicaCacheTTL is, in RoutingKademlia mode, how long a lookup result
	// stays cached. An entry is dropped sooner when one of its peers fails
	// or a closer peer enters the table; the TTL bounds how long a node that
	// joined out of this node's sight goes unnoticed as an owner.
	ReplicaCacheTTL time.Duration

	// BucketSize is the kbucket bucket size, Kademlia's k: how many peers
	// a bucket holds and how many a lookup converges on by default.
	BucketSize int

	// Alpha is how many FIND_NODE requests a lookup keeps in parallel.
	Alpha int

	// QueryTimeout bounds each FIND_NODE and ping request, so that one
	// silent peer delays a lookup round by at most this much.
	QueryTimeout time.Duration

	// ProbeInterval is how often memberlist probes one random member. A
	// dead node is noticed roughly one interval after it dies.
	ProbeInterval time.Duration

	// ProbeTimeout is how long memberlist waits for a probe's ack before
	// asking other members to probe indirectly. It must exceed the LAN's
	// round trip, including a busy board's scheduling delay.
	ProbeTimeout time.Duration

	// SuspicionMult scales how long a suspect node has to refute before it
	// is declared dead: SuspicionMult × max(1, log10(n)) × ProbeInterval. At
	// 2 and below memberlist waits for no confirmations from other members.
	SuspicionMult int

	// GossipInterval is how often memberlist gossips queued messages (a
	// death, a join) to a few random members: it bounds how fast news
	// spreads.
	GossipInterval time.Duration

	// PushPullInterval is how often memberlist exchanges its full state
	// with one random member. This repairs what gossip missed, such as a
	// node restarted on a new address before the others reclaimed its old
	// entry. Small clusters can afford it often.
	PushPullInterval time.Duration

	// DeadNodeReclaimTime is how long after a node's death the cluster
	// accepts the same node (same peer ID) at a new address. Without it a
	// node restarted on another port would be refused as a conflict.
	DeadNodeReclaimTime time.Duration

	// GossipToTheDeadTime is how long memberlist keeps gossiping to, and
	// remembering, a dead or departed node; Members reports it that long.
	GossipToTheDeadTime time.Duration

	// DownGrace is how long a member that stopped on purpose (StateStopped: a
	// restart, an upgrade) keeps owning its shards: writes meant for it leave hints
	// and nothing is re-replicated elsewhere, so a rolling restart moves only what
	// was written meanwhile. A member that stays away longer is treated as gone and
	// its shards are copied to the next-closest nodes. A crashed member (StateDead)
	// gets no grace. Default 10 minutes.
	DownGrace time.Duration

	// TCPTimeout bounds memberlist's TCP exchanges: a join through a seed
	// that is powered off waits this long.
	TCPTimeout time.Duration

	// ClusterKey is the cluster's key ring (clusterkey.Load reads a
	// --cluster-key-file). With one, memberlist encrypts and authenticates
	// every gossip message and push/pull exchange with AES-GCM under a key
	// derived from the first key, accepts those under any key of the ring,
	// and drops everything else, so a node without a key of the cluster
	// cannot join it nor be told about its members. Give the node's rpc
	// Server and Client the same ring (rpc.Config.ClusterKey). Nil: gossip
	// in the clear, open to anyone who reaches the port.
	ClusterKey clusterkey.Ring

	// Logger receives this package's messages and memberlist's, at the levels
	// memberlist gives them (its [DEBUG] lines at Debug: one per stream
	// connection). Membership changes of other nodes are logged at Info. Nil
	// discards everything.
	Logger *slog.Logger
}

// DefaultLANConfig returns a configuration tuned for a small switched LAN of
// boards (tens of nodes, sub-millisecond round trips). Memberlist's own LAN
// preset takes about 5 s, and up to about 25 s, to declare a node dead; this
// one probes 2.5 times as often with a shorter suspicion, so a killed node is
// declared dead in a few seconds (TestMembershipKillAndLeave logs how long).
// The price: 2.5 probes a second per node. Probing every 250 ms with suspicion
// multiplier 2 flaps on a loaded machine running a dozen nodes — live nodes
// stalled for half a second are declared dead and refuted — so this errs to
// stability.
func DefaultLANConfig() Config {
	return Config{
		RejoinInterval:      2 * time.Second,
		Quantum:             quanta.Quantum(quanta.DefaultQuantum / time.Second),
		Format:              quanta.QFI,
		Routing:             RoutingFull,
		RefreshInterval:     30 * time.Second,
		ReplicaCacheSize:    4096,
		ReplicaCacheTTL:     30 * time.Second,
		BucketSize:          20,
		Alpha:               3,
		QueryTimeout:        time.Second,
		ProbeInterval:       400 * time.Millisecond,
		ProbeTimeout:        250 * time.Millisecond,
		SuspicionMult:       3,
		GossipInterval:      100 * time.Millisecond,
		PushPullInterval:    5 * time.Second,
		DeadNodeReclaimTime: time.Second,
		GossipToTheDeadTime: 30 * time.Second,
		DownGrace:           10 * time.Minute,
		TCPTimeout:          2 * time.Second,
	}
}

// withDefaults returns c with its zero fields set from DefaultLANConfig.
func (c Config) withDefaults() Config {
	d := DefaultLANConfig()
	setDefault(&c.RejoinInterval, d.RejoinInterval)
	setDefault(&c.Quantum, d.Quantum)
	setDefault(&c.Format, d.Format)
	setDefault(&c.Routing, d.Routing)
	setDefault(&c.RefreshInterval, d.RefreshInterval)
	setDefault(&c.ReplicaCacheSize, d.ReplicaCacheSize)
	setDefault(&c.ReplicaCacheTTL, d.ReplicaCacheTTL)
	setDefault(&c.BucketSize, d.BucketSize)
	setDefault(&c.Alpha, d.Alpha)
	setDefault(&c.QueryTimeout, d.QueryTimeout)
	setDefault(&c.ProbeInterval, d.ProbeInterval)
	setDefault(&c.ProbeTimeout, d.ProbeTimeout)
	setDefault(&c.SuspicionMult, d.SuspicionMult)
	setDefault(&c.GossipInterval, d.GossipInterval)
	setDefault(&c.PushPullInterval, d.PushPullInterval)
	setDefault(&c.DeadNodeReclaimTime, d.DeadNodeReclaimTime)
	setDefault(&c.GossipToTheDeadTime, d.GossipToTheDeadTime)
	setDefault(&c.DownGrace, d.DownGrace)
	setDefault(&c.TCPTimeout, d.TCPTimeout)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// setDefault sets *v to d if *v is zero.
func setDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// Validate reports a configuration that cannot work, naming each field at
// fault. Zero fields are valid (they take the defaults), except the addresses,
// which have none.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if err := checkHostPort(c.RPCAddr, MaxRPCAddrLen); err != nil {
		errs = append(errs, fmt.Errorf("RPC address: %w", err))
	}
	if err := checkHostPort(c.GossipAddr, MaxRPCAddrLen); err != nil {
		errs = append(errs, fmt.Errorf("gossip address: %w", err))
	}
	for _, s := range c.Join {
		if _, _, err := net.SplitHostPort(s); err != nil {
			errs = append(errs, fmt.Errorf("join address: %w", err))
		}
	}
	if c.Quantum < 1 || c.Quantum > maxQuantum {
		errs = append(errs, fmt.Errorf("quantum %d s: must be 1 to %d s", c.Quantum, quanta.Quantum(maxQuantum)))
	}
	if !c.Format.Valid() {
		errs = append(errs, fmt.Errorf("unknown ID format %v", c.Format))
	}
	if c.Routing != RoutingFull && c.Routing != RoutingKademlia {
		errs = append(errs, fmt.Errorf("unknown routing mode %v: want full or kademlia", c.Routing))
	}
	if c.RefreshInterval < 0 || c.ReplicaCacheTTL < 0 || c.ReplicaCacheSize < 0 {
		errs = append(errs, errors.New("refresh interval, replica cache size and TTL must not be negative"))
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"bucket size", c.BucketSize}, {"alpha", c.Alpha}, {"suspicion multiplier", c.SuspicionMult}} {
		if v.n < 1 {
			errs = append(errs, fmt.Errorf("%s %d: must be at least 1", v.name, v.n))
		}
	}
	if c.Alpha > maxFindK {
		errs = append(errs, fmt.Errorf("alpha %d: at most %d", c.Alpha, maxFindK))
	}
	if c.BucketSize > maxFindK {
		errs = append(errs, fmt.Errorf("bucket size %d: at most %d", c.BucketSize, maxFindK))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("dht: config: %w", err)
	}
	return nil
}

// checkHostPort checks that s is a host:port of at most maxLen bytes with a
// host that names one machine.
func checkHostPort(s string, maxLen int) error {
	if len(s) > maxLen {
		return fmt.Errorf("%q: %d bytes, at most %d", s, len(s), maxLen)
	}
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%q: a wildcard cannot be advertised; name this node's address", s)
	}
	return nil
}
