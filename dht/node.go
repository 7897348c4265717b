package dht

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/hashicorp/memberlist"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/tsdht/tsdht/clusterkey"
	"github.com/tsdht/tsdht/rpc"
)

// defaultLeaveTimeout replaces a Leave timeout of zero: memberlist's Leave(0)
// waits for the leave broadcast forever.
const defaultLeaveTimeout = time.Second

// Node is a member of a tsdht cluster: a Router whose routing table is fed
// by memberlist's view of the cluster, and the replica sets computed from
// that view.
type Node struct {
	*Router

	cfg      Config
	logger   *slog.Logger
	leaving  atomic.Bool // Leave has begun: the metadata says so
	pausing  atomic.Bool // Stop has begun: the metadata says so
	stopping atomic.Bool // Close has begun: memberlist's errors are its doing
	// hexNames maps the base58 peer ID of every member to its 40-hex node ID,
	// for memberlistLog.
	hexNames atomic.Pointer[map[string]string]
	// staleSelf says that a peer's state, seen in a state exchange, holds
	// this node's previous incarnation at another address: it restarted
	// before the cluster noticed, and the cluster refuses its new address
	// until the old entry is dead and DeadNodeReclaimTime has passed.
	staleSelf  atomic.Bool
	gossipAddr atomic.Pointer[string] // advertised, once started
	compatible compatCache            // members' metadata checkCompatible accepted

	// changed wakes the loop after memberlist reported a change; buffered
	// 1, so that a burst of events costs one pass.
	changed chan struct{}
	done    chan struct{} // closed by Close: the loop ends
	wg      sync.WaitGroup

	mu      sync.RWMutex
	members map[string]memberEntry // by memberlist name, the departed included
	live    []Peer                 // the live members, self included, by ID
	owners  []Peer                 // live and stopped within DownGrace: whom ReplicaSet places on
	subs    []chan struct{}
	version atomic.Uint64              // bumped by every membership change
	placed  atomic.Pointer[placeCache] // replica sets over the current owners (replicas.go)

	lifeMu sync.Mutex // serialises Start, Leave and Close
	ml     *memberlist.Memberlist
	closed bool

	// kad is the node's state in RoutingKademlia mode, nil in RoutingFull.
	kad     *kademlia
	started bool
}

// memberEntry is a member and when it last changed state.
type memberEntry struct {
	Member
	since time.Time
}

// New creates the node identified by id (or, if id is empty, by the
// identity kept in cfg.DataDir), registers its RPC handlers (MethodFindNode,
// MethodPing) on srv and makes its outgoing calls with cli. It does not start
// gossip: see Start. The caller keeps srv and cli, and closes them after the
// node.
func New(cfg Config, id peer.ID, srv *rpc.Server, cli *rpc.Client) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if id == "" {
		var err error
		if id, err = LoadOrCreateIdentity(cfg.DataDir); err != nil {
			return nil, err
		}
	}
	if len(id) > maxPeerIDLen {
		return nil, fmt.Errorf("dht: peer ID of %d bytes, at most %d", len(id), maxPeerIDLen)
	}
	self := NewPeer(id, cfg.RPCAddr)
	// In full mode membership feeds the table; in kademlia mode the table
	// learns from traffic, as Kademlia's does.
	router, err := newRouter(self, cfg, srv, cli, cfg.Routing == RoutingKademlia)
	if err != nil {
		return nil, err
	}
	n := &Node{
		Router:  router,
		cfg:     cfg,
		logger:  cfg.Logger,
		changed: make(chan struct{}, 1),
		done:    make(chan struct{}),
		members: make(map[string]memberEntry),
	}
	if cfg.Routing == RoutingKademlia {
		n.kad = newKademlia(n)
	}
	// Until memberlist reports it, the node knows itself: it owns every
	// shard while alone.
	n.setMember(Member{Peer: self, State: StateAlive, GossipAddr: cfg.GossipAddr, Meta: n.localMeta()})
	return n, nil
}

// localMeta returns what this node's metadata says.
func (n *Node) localMeta() Meta {
	return Meta{Protocol: ProtocolVersion, Quantum: n.cfg.Quantum, Format: n.cfg.Format, Routing: n.cfg.Routing,
		Leaving: n.leaving.Load(), Stopping: n.pausing.Load()}
}

// Start starts memberlist and the loop that feeds the routing table and
// re-joins the seeds, then joins the cluster through cfg.Join. If seeds are
// given and none of them could be joined, Start returns the error, but the
// node stays up and the loop keeps trying: after a power cut the seeds may
// simply not be back yet, and the caller may go on. If the cluster refused
// this node for its configuration (a differing quantum or ID format, named in
// the error), the error wraps ErrIncompatible and the caller should give up
// with Close.
//
// In RoutingKademlia mode there is no memberlist: the node serves the
// bootstrap handshake on its gossip address, asks each seed of cfg.Join for
// its RPC address through it, and joins by Kademlia's own means (a ping and a
// lookup of its own ID); while its table is empty it tries again every
// RejoinInterval.
func (n *Node) Start() error {
	n.lifeMu.Lock()
	defer n.lifeMu.Unlock()
	if n.closed {
		return errors.New("dht: start: node closed")
	}
	if n.started {
		return errors.New("dht: start: already started")
	}
	n.started = true
	if n.kad != nil {
		return n.kad.start()
	}
	mlc, err := n.memberlistConfig()
	if err != nil {
		return err
	}
	ml, err := memberlist.Create(mlc)
	if err != nil {
		mlc.Transport.Shutdown()
		return fmt.Errorf("dht: starting memberlist on %s: %w", n.cfg.GossipAddr, err)
	}
	// Create completed mlc: with port 0 it holds the port that was bound.
	n.ml = ml
	addr := net.JoinHostPort(mlc.AdvertiseAddr, strconv.Itoa(mlc.AdvertisePort))
	n.gossipAddr.Store(&addr)
	n.wg.Add(1)
	go n.run()

	if seeds := n.missingSeeds(); len(seeds) > 0 {
		if _, err := ml.Join(seeds); err != nil {
			err = flattenJoinError(err)
			if keyMismatch(err) {
				return fmt.Errorf("dht: refused by the cluster at %s: %w: %s: %w", strings.Join(seeds, ", "), ErrIncompatible, n.clusterKeyAdvice(), err)
			}
			if strings.Contains(err.Error(), incompatibleNode) {
				return fmt.Errorf("dht: refused by the cluster at %s: %w: %w", strings.Join(seeds, ", "), ErrIncompatible, err)
			}
			// A seed in kademlia mode serves the bootstrap handshake, not
			// memberlist, on its gossip port: ask it, to name the mismatch.
			for _, s := range seeds {
				if _, herr := n.askSeed(s); errors.Is(herr, ErrIncompatible) {
					return fmt.Errorf("dht: refused by the cluster: %w", herr)
				}
			}
			return fmt.Errorf("dht: could not join the cluster through %s (retrying every %v): %w",
				strings.Join(seeds, ", "), n.cfg.RejoinInterval, err)
		}
	}
	return nil
}

// memberlistConfig builds memberlist's configuration from n.cfg.
func (n *Node) memberlistConfig() (*memberlist.Config, error) {
	host, portStr, err := net.SplitHostPort(n.cfg.GossipAddr)
	if err != nil {
		return nil, fmt.Errorf("dht: gossip address: %w", err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("dht: gossip address %q: bad port", n.cfg.GossipAddr)
	}
	ip, err := net.ResolveIPAddr("ip", host)
	if err != nil {
		return nil, fmt.Errorf("dht: gossip address: %w", err)
	}

	c := memberlist.DefaultLANConfig()
	c.Name = memberlistName(n.Self().PeerID())
	// Bind and advertise the one address the operator named: memberlist
	// would otherwise guess a private address of some interface.
	c.BindAddr, c.BindPort = ip.String(), port
	c.AdvertiseAddr, c.AdvertisePort = ip.String(), port
	c.ProbeInterval = n.cfg.ProbeInterval
	c.ProbeTimeout = n.cfg.ProbeTimeout
	c.SuspicionMult = n.cfg.SuspicionMult
	c.GossipInterval = n.cfg.GossipInterval
	c.PushPullInterval = n.cfg.PushPullInterval
	c.DeadNodeReclaimTime = n.cfg.DeadNodeReclaimTime
	c.GossipToTheDeadTime = n.cfg.GossipToTheDeadTime
	c.TCPTimeout = n.cfg.TCPTimeout
	// Gossip packets are a few hundred bytes on a LAN: memberlist's LZW compression of
	// each one saves nothing worth the CPU it takes from a single ARM core. Peers still
	// read compressed packets of older nodes.
	c.EnableCompression = false
	if ring := n.cfg.ClusterKey; ring != nil {
		keys := make([][]byte, len(ring))
		for i, k := range ring {
			keys[i] = gossipKey(k)
		}
		kr, err := memberlist.NewKeyring(keys, keys[0])
		if err != nil {
			return nil, fmt.Errorf("dht: cluster key: %w", err)
		}
		c.Keyring = kr
		c.GossipVerifyIncoming, c.GossipVerifyOutgoing = true, true
	}
	d := delegate{n}
	c.Delegate, c.Events, c.Alive, c.Merge = d, d, d, d
	c.Logger = log.New(memberlistLog{n}, "", 0)
	// Last: the listeners are bound once nothing above can fail. The caller shuts
	// the transport down if memberlist does not start.
	t, err := newGossipTransport(ip.IP, port, c.Logger)
	if err != nil {
		return nil, err
	}
	c.Transport = t
	c.BindPort, c.AdvertisePort = t.Port(), t.Port()
	return c, nil
}

// keyMismatch reports whether a memberlist join failed because the two sides
// do not share a gossip key: memberlist's messages for it, from either side,
// mention encryption or the keys.
func keyMismatch(err error) bool {
	s := err.Error()
	return strings.Contains(s, "encrypt") || strings.Contains(s, "decrypt") || strings.Contains(s, "installed keys")
}

// clusterKeyAdvice says what to check when a join failed for the key.
func (n *Node) clusterKeyAdvice() string {
	have := "this node has no cluster key"
	if n.cfg.ClusterKey != nil {
		have = "this node speaks key " + n.cfg.ClusterKey.Primary().ID().String()
	}
	return "the cluster key differs (" + have + "); give every node the same --cluster-key-file, and rotate keys as docs/security.md says"
}

// gossipKeyPurpose derives memberlist's key from a cluster key.
const gossipKeyPurpose = "tsdht memberlist aes-256-gcm"

// gossipKey returns memberlist's AES-256 key for a cluster key.
func gossipKey(k clusterkey.Key) []byte { return k.Derive(gossipKeyPurpose, 32) }

// flattenJoinError turns the multierror memberlist's Join returns into a
// plain error that prints on one line per seed.
func flattenJoinError(err error) error {
	var merr *multierror.Error
	if errors.As(err, &merr) {
		errs := make([]error, len(merr.Errors))
		for i, e := range merr.Errors {
			errs[i] = explainJoinError(e)
		}
		return errors.Join(errs...)
	}
	return explainJoinError(err)
}

// explainJoinError adds what to do to a join that a seed cut short: a memberlist peer
// answers a push-pull, while a tsdht RPC port reads the hello it expects, finds gossip
// instead and resets the connection — the usual cause is an --rpc address given to --join.
func explainJoinError(err error) error {
	msg := err.Error()
	if !strings.Contains(msg, "connection reset by peer") && !strings.HasSuffix(msg, "EOF") {
		return err
	}
	seed := "the seed"
	if s, ok := strings.CutPrefix(msg, "failed to join "); ok {
		if i := strings.Index(s, ": "); i > 0 {
			seed = s[:i]
		}
	}
	return fmt.Errorf("%w (--join wants gossip addresses, the seeds' --gossip; %s answered like an RPC port)", err, seed)
}

// GossipAddr returns the address memberlist advertises, once started: the
// port bound when cfg.GossipAddr asked for port 0.
func (n *Node) GossipAddr() string {
	if a := n.gossipAddr.Load(); a != nil {
		return *a
	}
	return ""
}

// run feeds the routing table from membership, tells subscribers about
// changes, and every RejoinInterval re-joins the seeds missing from the
// cluster, re-offers every live member to the table (a lookup may have
// dropped one it could not reach) and forgets long-departed members. While
// the cluster holds a previous incarnation of this node, it exchanges state
// with every member each DeadNodeReclaimTime, so that the new address is
// taken as soon as the cluster allows it rather than at the next periodic
// push-pull.
func (n *Node) run() {
	defer n.wg.Done()
	tick := time.NewTicker(n.cfg.RejoinInterval)
	defer tick.Stop()
	reclaim := time.NewTicker(n.cfg.DeadNodeReclaimTime)
	defer reclaim.Stop()
	joinErr := ""
	for {
		select {
		case <-n.done:
			return
		case <-n.changed:
			n.syncTable()
			n.notifySubscribers()
		case <-tick.C:
			if seeds := n.missingSeeds(); len(seeds) > 0 {
				joinErr = n.rejoin(seeds, joinErr)
			}
			n.syncTable()
			n.forgetDeparted()
			if n.expireStopped() {
				n.notifySubscribers()
			}
		case <-reclaim.C:
			// The exchanges' NotifyMerge sets staleSelf again while a
			// member still holds the old incarnation.
			if n.staleSelf.Swap(false) {
				if addrs := n.memberGossipAddrs(); len(addrs) > 0 {
					_, _ = n.ml.Join(addrs)
				}
			}
		}
	}
}

// rejoin joins seeds. It logs the outcome only when it differs from the
// last one, whose error text is last ("" for success), and returns the new.
func (n *Node) rejoin(seeds []string, last string) string {
	_, err := n.ml.Join(seeds)
	if err == nil {
		if last != "" {
			n.logger.Info("dht: re-joined the cluster", "seeds", strings.Join(seeds, ", "))
		}
		return ""
	}
	if err.Error() != last {
		err = flattenJoinError(err)
		if keyMismatch(err) {
			err = fmt.Errorf("%s: %w", n.clusterKeyAdvice(), err)
		}
		n.logger.Warn("dht: re-joining the cluster failed; retrying", "seeds", strings.Join(seeds, ", "),
			"every", n.cfg.RejoinInterval, "err", err)
	}
	return err.Error()
}

// missingSeeds returns the seeds of cfg.Join that are not live members,
// leaving out this node's own address.
func (n *Node) missingSeeds() []string {
	present := make(map[string]bool)
	for _, m := range n.Members() {
		if m.State == StateAlive {
			present[m.GossipAddr] = true
		}
	}
	present[n.GossipAddr()] = true
	var missing []string
	for _, s := range n.cfg.Join {
		// A seed named by host name is compared by the address it resolves
		// to now; one that does not resolve is missing, and Join says why.
		if a, err := net.ResolveTCPAddr("tcp", s); err == nil && present[a.String()] {
			continue
		}
		missing = append(missing, s)
	}
	return missing
}

// recordMember records what memberlist reported about a node and wakes the
// loop. It runs under memberlist's lock: it must not call memberlist.
func (n *Node) recordMember(mn *memberlist.Node, gone bool) {
	m, err := memberFrom(mn, gone)
	if err != nil {
		// NotifyAlive let in only readable metadata; this is a bug.
		n.logger.Error("dht: unreadable membership event", "err", err)
		return
	}
	n.setMember(m)
	select {
	case n.changed <- struct{}{}:
	default:
	}
}

// setMember records m and rebuilds the live list.
func (n *Node) setMember(m Member) {
	n.mu.Lock()
	defer n.mu.Unlock()
	name := memberlistName(m.PeerID())
	if old, ok := n.members[name]; (!ok || old.State != m.State) && m.ID != n.Self().ID {
		n.logger.Info("dht: member "+string(m.State), "peer", hex.EncodeToString(m.Key[:]),
			"rpc", m.RPCAddr, "gossip", m.GossipAddr)
	}
	n.members[name] = memberEntry{Member: m, since: time.Now()}
	n.rebuild(time.Now())
}

// rebuild recomputes the live and owner lists from the members. mu is held.
func (n *Node) rebuild(now time.Time) {
	var live, owners []Peer
	names := make(map[string]string, len(n.members))
	for name, e := range n.members {
		switch {
		case e.State == StateAlive:
			live = append(live, e.Peer)
			owners = append(owners, e.Peer)
		case n.inGrace(e, now):
			owners = append(owners, e.Peer)
		}
		names[name] = hex.EncodeToString(e.Key[:])
	}
	n.hexNames.Store(&names)
	byID := func(a, b Peer) int { return strings.Compare(a.ID, b.ID) }
	slices.SortFunc(live, byID)
	slices.SortFunc(owners, byID)
	n.live, n.owners = live, owners
	n.placed.Store(newPlaceCache(owners))
	n.version.Add(1)
}

// inGrace reports whether e is a member that stopped on purpose less than
// DownGrace ago.
func (n *Node) inGrace(e memberEntry, now time.Time) bool {
	return e.State == StateStopped && now.Sub(e.since) < n.cfg.DownGrace
}

// expireStopped stops counting as owners the members stopped longer than
// DownGrace, and reports whether any did.
func (n *Node) expireStopped() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	expired := false
	for _, e := range n.members {
		if e.State == StateStopped && !n.inGrace(e, now) && slices.ContainsFunc(n.owners, func(p Peer) bool { return p.ID == e.ID }) {
			n.logger.Info("dht: member stopped longer than the down grace: its shards go to the next-closest nodes",
				"peer", hex.EncodeToString(e.Key[:]), "rpc", e.RPCAddr, "down_grace", n.cfg.DownGrace.String())
			expired = true
		}
	}
	if expired {
		n.rebuild(now)
	}
	return expired
}

// Version returns a counter that increases with every membership change this node
// records, so that a caller can cache what it computed from Live or ReplicaSet and
// recompute it when the version moves.
//
// In RoutingKademlia mode it moves with every change of the routing table and
// every failure reported (ReportFailure).
func (n *Node) Version() uint64 {
	if n.kad != nil {
		return n.kad.version.Load()
	}
	return n.version.Load()
}

// syncTable offers every live member to the routing table and removes the
// dead and departed from it. The table is only a cache of routes: a bucket
// that is full leaves later members out, and lookups still find them.
func (n *Node) syncTable() {
	for _, m := range n.Members() {
		if m.State == StateAlive {
			n.AddPeer(m.Peer)
		} else {
			n.RemovePeer(m.ID)
		}
	}
}

// forgetDeparted drops the members dead or departed for longer than
// GossipToTheDeadTime, as memberlist itself does, so that the member map
// does not grow with every node that ever passed through.
func (n *Node) forgetDeparted() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for name, e := range n.members {
		if e.State != StateAlive && time.Since(e.since) > n.cfg.GossipToTheDeadTime && !n.inGrace(e, time.Now()) {
			delete(n.members, name)
		}
	}
}

// Live returns the live members, self included, ordered by peer ID. A member
// memberlist merely suspects is live until it is declared dead.
//
// In RoutingKademlia mode it returns what the node knows: its routing
// table's peers and itself.
func (n *Node) Live() []Peer {
	if n.kad != nil {
		return n.kad.live()
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	return slices.Clone(n.live)
}

// Members returns every member memberlist reported, the dead and departed
// included until they are forgotten, ordered by peer ID.
//
// In RoutingKademlia mode it returns the routing table's peers and itself,
// every one alive: the node has no view of the others' state.
func (n *Node) Members() []Member {
	if n.kad != nil {
		return n.kad.members()
	}
	n.mu.RLock()
	out := make([]Member, 0, len(n.members))
	for _, e := range n.members {
		out = append(out, e.Member)
	}
	n.mu.RUnlock()
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Subscribe returns a channel that receives a value after every change of
// membership. It is buffered and coalescing: a reader that falls behind
// receives one value for many changes, and must then re-read Live. Close
// closes it.
func (n *Node) Subscribe() <-chan struct{} {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.isClosed() {
		close(ch)
		return ch
	}
	n.subs = append(n.subs, ch)
	return ch
}

// isClosed reports whether Close has begun.
func (n *Node) isClosed() bool {
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

// notifySubscribers wakes every subscriber that has no wake-up pending.
func (n *Node) notifySubscribers() {
	n.mu.RLock()
	defer n.mu.RUnlock()
	for _, ch := range n.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Leave tells the cluster that this node is leaving, taking up to timeout
// (zero or less means one second: memberlist's Leave(0) may wait forever),
// and then closes the node.
//
// First the node's metadata says it is leaving, and a state exchange
// (memberlist's Join) with every live member delivers that over TCP: the
// others will report the departure as StateLeft, not StateDead, however
// they learn of it. Then memberlist's Leave gossips the departure, so that
// the others remove the node at once rather than after failure detection.
// In RoutingKademlia mode the peers of its routing table are told
// (MethodLeaving) and drop it at once (depart.go).
func (n *Node) Leave(timeout time.Duration) error {
	if timeout <= 0 {
		timeout = defaultLeaveTimeout
	}
	deadline := time.Now().Add(timeout)
	var err error
	n.lifeMu.Lock()
	if n.ml != nil && !n.closed {
		var uerr error
		if !n.leaving.Load() {
			uerr = n.announceLeaving(deadline)
		}
		// Leave even if time ran out: the departure then at least goes out
		// with the next gossip, though Leave no longer waits for it.
		lerr := n.ml.Leave(max(time.Until(deadline), time.Millisecond))
		if err = errors.Join(uerr, lerr); err != nil {
			err = fmt.Errorf("dht: leave: %w", err)
		}
	} else if n.kad != nil && !n.closed {
		// Again at the end: peers met during the hand-off hear it too.
		n.announceLeavingKad(deadline)
	}
	n.lifeMu.Unlock()
	return errors.Join(err, n.Close())
}

// BeginLeave tells every live member, within timeout, that this node is
// leaving: from then on they report it as StateLeaving and leave it out of
// Live, so it owns nothing, while it still answers. The layer above hands its
// data off in between and then calls Leave. Without this step a node that
// received a hand-off would still count the leaver as an owner, and could
// drop its fresh copy as surplus. In RoutingKademlia mode the peers of its
// routing table are told (MethodLeaving) and drop it from their tables and
// replica sets; every request and answer the node sends from then on says it
// leaves, so that the nodes it meets drop it too.
func (n *Node) BeginLeave(timeout time.Duration) error {
	n.lifeMu.Lock()
	defer n.lifeMu.Unlock()
	if n.closed || n.leaving.Load() {
		return nil
	}
	if n.kad != nil {
		n.announceLeavingKad(time.Now().Add(timeout))
		return nil
	}
	if n.ml == nil {
		return nil
	}
	return n.announceLeaving(time.Now().Add(timeout))
}

// announceLeavingKad, in RoutingKademlia mode, makes this node say it leaves in
// every request and answer that introduces it, and tells the peers of its table
// (MethodLeaving) within deadline: they drop it at once (depart.go). lifeMu is
// held.
func (n *Node) announceLeavingKad(deadline time.Time) {
	n.leaving.Store(true)
	n.Router.leaving.Store(true)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	heard := n.Router.announce(ctx, MethodLeaving)
	cancel()
	n.logger.Info("dht: told the routing table this node leaves for good", "peers", heard)
}

// Stop tells the cluster that this node stops and will come back with its data
// (a restart, an upgrade), taking up to timeout, and then closes the node. The
// others keep it among the owners of its shards for their DownGrace
// (StateStopped): their writes for it leave hints, and nothing is copied
// elsewhere meanwhile. Leave is for a node that goes for good. In
// RoutingKademlia mode the peers of its routing table are told (MethodStopping),
// keep it in their tables and lookups for their DownGrace, and pass that on in
// their FIND_NODE answers.
func (n *Node) Stop(timeout time.Duration) error {
	if timeout <= 0 {
		timeout = defaultLeaveTimeout
	}
	deadline := time.Now().Add(timeout)
	var err error
	n.lifeMu.Lock()
	if n.ml != nil && !n.closed {
		n.pausing.Store(true)
		uerr := n.ml.UpdateNode(time.Until(deadline))
		if uerr == nil {
			n.pushState(time.Until(deadline))
		}
		lerr := n.ml.Leave(max(time.Until(deadline), time.Millisecond))
		if err = errors.Join(uerr, lerr); err != nil {
			err = fmt.Errorf("dht: stop: %w", err)
		}
	} else if n.kad != nil && !n.closed {
		// No gossip: tell the peers of the table; the others learn it from
		// their FIND_NODE answers (rest.go).
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		heard := n.Router.announce(ctx, MethodStopping)
		cancel()
		n.logger.Info("dht: told the routing table this node stops and will be back", "peers", heard)
	}
	n.lifeMu.Unlock()
	return errors.Join(err, n.Close())
}

// announceLeaving sets the leaving flag in the metadata and pushes it to
// every live member. lifeMu is held.
func (n *Node) announceLeaving(deadline time.Time) error {
	n.leaving.Store(true)
	if err := n.ml.UpdateNode(time.Until(deadline)); err != nil {
		return err
	}
	n.pushState(time.Until(deadline))
	return nil
}

// pushState exchanges state with every live member directly, waiting at most
// within: memberlist gossips a change a fixed number of times (four in a
// cluster of under ten) to random members, recently dead ones included, and a
// live member can miss it.
func (n *Node) pushState(within time.Duration) {
	addrs := n.memberGossipAddrs()
	if len(addrs) == 0 {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Errors are expected: members that died unnoticed.
		_, _ = n.ml.Join(addrs)
	}()
	select {
	case <-done:
	case <-time.After(within):
		// Shutdown, which follows, makes the remaining exchanges fail fast.
	}
}

// memberGossipAddrs returns the gossip addresses of the live members other
// than this node.
func (n *Node) memberGossipAddrs() []string {
	var addrs []string
	for _, m := range n.Members() {
		if m.State == StateAlive && m.ID != n.Self().ID {
			addrs = append(addrs, m.GossipAddr)
		}
	}
	return addrs
}

// Close stops the node without telling the cluster, which declares it dead
// after failure detection: use Leave to depart cleanly. It closes the
// channels of Subscribe. Closing twice is harmless.
func (n *Node) Close() error {
	n.lifeMu.Lock()
	defer n.lifeMu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	n.stopping.Store(true)
	var err error
	if n.kad != nil && n.kad.ln != nil {
		n.kad.ln.Close()
	}
	if n.ml != nil {
		// Shut memberlist down first: a re-join under way then fails at
		// once instead of holding the loop for a TCP timeout.
		err = n.ml.Shutdown()
	}
	close(n.done)
	n.wg.Wait()
	n.mu.Lock()
	for _, ch := range n.subs {
		close(ch)
	}
	n.subs = nil
	n.mu.Unlock()
	return errors.Join(err, n.Router.Close())
}
