package dht

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsdht/tsdht/quanta"
)

// kademlia is the state of a Node in RoutingKademlia mode: the bootstrap
// listener on the gossip address, the replica-set cache and the lookups in
// flight. The node knows only its routing table; there is no memberlist.
type kademlia struct {
	n       *Node
	ln      net.Listener // the bootstrap listener, once started
	cache   replicaCache
	version atomic.Uint64 // bumped by every change of the table

	flightMu sync.Mutex
	flight   map[quanta.ID]*flightCall // lookups under way, by target
}

// flightCall is a lookup that callers asking for the same target wait for.
type flightCall struct {
	done  chan struct{}
	peers []Peer
	err   error
}

func newKademlia(n *Node) *kademlia {
	k := &kademlia{
		n:      n,
		cache:  replicaCache{max: n.cfg.ReplicaCacheSize, ttl: n.cfg.ReplicaCacheTTL, entries: make(map[quanta.ID]cacheEntry)},
		flight: make(map[quanta.ID]*flightCall),
	}
	n.Router.onAdd = k.peerAdded
	n.Router.onRemove = k.peerRemoved
	n.Router.onGone = k.peerGone
	return k
}

// start listens for bootstrap handshakes on the gossip address, starts the
// maintenance loop and bootstraps through the seeds. lifeMu is held.
func (k *kademlia) start() error {
	n := k.n
	ln, err := net.Listen("tcp", n.cfg.GossipAddr)
	if err != nil {
		return fmt.Errorf("dht: bootstrap listener on %s: %w", n.cfg.GossipAddr, err)
	}
	k.ln = ln
	addr := ln.Addr().String()
	n.gossipAddr.Store(&addr)
	n.wg.Add(2)
	go n.serveBootstrap(ln)
	go k.run()
	if len(k.seeds()) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.TCPTimeout+maxLookupRounds*n.cfg.QueryTimeout)
	defer cancel()
	return k.bootstrap(ctx)
}

// seeds returns cfg.Join without this node's own gossip address.
func (k *kademlia) seeds() []string {
	var out []string
	for _, s := range k.n.cfg.Join {
		if a, err := net.ResolveTCPAddr("tcp", s); err == nil && a.String() == k.n.GossipAddr() {
			continue
		}
		out = append(out, s)
	}
	return out
}

// bootstrap asks every seed for its RPC address (the handshake checks both
// configurations), then runs Kademlia's join through those that answered: a
// ping, and a lookup of this node's own ID, which fills the table and
// introduces this node to those closest to it, and one refresh of every
// bucket.
func (k *kademlia) bootstrap(ctx context.Context) error {
	seeds := k.seeds()
	var (
		addrs []string
		errs  []error
	)
	for _, s := range seeds {
		p, err := k.n.askSeed(s)
		if err != nil {
			if errors.Is(err, ErrIncompatible) {
				return fmt.Errorf("dht: refused by the cluster: %w", err)
			}
			errs = append(errs, err)
			continue
		}
		addrs = append(addrs, p.RPCAddr)
	}
	if len(addrs) == 0 {
		return fmt.Errorf("dht: could not bootstrap through %s (retrying every %v): %w",
			strings.Join(seeds, ", "), k.n.cfg.RejoinInterval, errors.Join(errs...))
	}
	if err := k.n.Router.Bootstrap(ctx, addrs); err != nil {
		return fmt.Errorf("dht: bootstrap through %s: %w", strings.Join(addrs, ", "), err)
	}
	// Kademlia's join ends with a refresh of every bucket: a lookup of a
	// random ID in each one's range fills the table beyond the neighbourhood
	// of this node's own ID, and introduces it to the nodes met on the way.
	if err := k.n.Router.Refresh(ctx); err != nil {
		return fmt.Errorf("dht: first bucket refresh: %w", err)
	}
	return nil
}

// run keeps the table: while it is empty it bootstraps again every
// RejoinInterval; every RefreshInterval it refreshes the buckets and pings the
// entries not heard from in as long. It tells subscribers about every change
// of the table.
func (k *kademlia) run() {
	n := k.n
	defer n.wg.Done()
	rejoin := time.NewTicker(n.cfg.RejoinInterval)
	defer rejoin.Stop()
	refresh := time.NewTicker(n.cfg.RefreshInterval)
	defer refresh.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-n.done
		cancel()
	}()
	lastErr := ""
	for {
		select {
		case <-n.done:
			return
		case <-n.changed:
			n.notifySubscribers()
		case <-rejoin.C:
			if n.TableSize() > 0 || len(k.seeds()) == 0 {
				continue
			}
			if err := k.bootstrap(ctx); err != nil {
				if err.Error() != lastErr {
					n.logger.Warn("dht: kademlia bootstrap failed; retrying", "every", n.cfg.RejoinInterval, "err", err)
				}
				lastErr = err.Error()
			} else {
				lastErr = ""
			}
		case <-refresh.C:
			rctx, rcancel := context.WithTimeout(ctx, n.cfg.RefreshInterval)
			if _, dropped := n.PingStale(rctx, n.cfg.RefreshInterval); dropped > 0 {
				n.logger.Info("dht: dropped unresponsive peers from the routing table", "peers", dropped)
			}
			_ = n.Refresh(rctx)
			rcancel()
		}
	}
}

// peerAdded drops the cached replica sets that p, new in the table, may
// belong to, and wakes the loop.
func (k *kademlia) peerAdded(p Peer) {
	k.cache.closerPeer(p)
	k.changed()
}

// peerRemoved drops the cached replica sets that hold p, and wakes the loop.
func (k *kademlia) peerRemoved(p Peer) {
	k.cache.dropPeer(p.ID)
	k.changed()
}

// peerGone drops the cached replica sets that hold the peer id, which said it
// leaves (it may be in them without being in the table), and wakes the loop.
func (k *kademlia) peerGone(id string) {
	k.cache.dropPeer(id)
	k.changed()
}

func (k *kademlia) changed() {
	k.version.Add(1)
	select {
	case k.n.changed <- struct{}{}:
	default:
	}
}

// replicaSet returns the rf nodes closest to id, closest first, this node
// included if it is among them: from the cache, or by an iterative lookup
// (one per ID at a time, however many callers ask). It fails only if ctx ends
// before any peer answered.
func (k *kademlia) replicaSet(ctx context.Context, id quanta.ID, rf int) ([]Peer, error) {
	if rf < 1 {
		return nil, nil
	}
	if ps, ok := k.cache.get(id, rf); ok {
		return ps, nil
	}
	want := max(2*rf, k.n.Router.bucketSize)
	k.flightMu.Lock()
	c, ok := k.flight[id]
	if !ok {
		c = &flightCall{done: make(chan struct{})}
		k.flight[id] = c
		k.flightMu.Unlock()
		c.peers, _, c.err = k.n.LookupWithStats(ctx, id, want)
		if c.err == nil {
			k.cache.put(id, want, c.peers)
		}
		k.flightMu.Lock()
		delete(k.flight, id)
		k.flightMu.Unlock()
		close(c.done)
	} else {
		k.flightMu.Unlock()
		select {
		case <-c.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("dht: lookup of %s: %w", id, ctx.Err())
		}
	}
	if c.err != nil && len(c.peers) <= 1 {
		return nil, fmt.Errorf("dht: lookup of %s: %w", id, c.err)
	}
	return slices.Clone(c.peers[:min(rf, len(c.peers))]), nil
}

// reportFailure drops p, which failed a call, from the table (putting a
// replacement in its place) and from every cached replica set.
func (k *kademlia) reportFailure(p Peer) {
	if k.n.Router.rests.resting(p.ID) {
		return // stopped on purpose: it keeps its shards for its grace
	}
	k.cache.dropPeer(p.ID)
	k.n.DropPeer(p.ID)
	k.changed() // placement may have changed even if p was not in the table
}

// live returns what the node knows: its table's peers that do not rest, and
// itself, by ID.
func (k *kademlia) live() []Peer {
	ps := slices.DeleteFunc(k.n.tablePeers(), func(p Peer) bool { return k.n.Router.rests.resting(p.ID) })
	ps = append(ps, k.n.Self())
	slices.SortFunc(ps, func(a, b Peer) int { return strings.Compare(a.ID, b.ID) })
	return ps
}

// members returns the peers of the table and itself as members: alive, or
// stopped if they rest (they said they stop and will be back). In kademlia mode
// a node knows nothing more of the others' state.
func (k *kademlia) members() []Member {
	var out []Member
	ps := append(k.n.tablePeers(), k.n.Self())
	slices.SortFunc(ps, func(a, b Peer) int { return strings.Compare(a.ID, b.ID) })
	for _, p := range ps {
		m := Member{Peer: p, State: StateAlive}
		if k.n.Router.rests.resting(p.ID) {
			m.State = StateStopped
		}
		if p.ID == k.n.Self().ID {
			m.GossipAddr, m.Meta = k.n.GossipAddr(), k.n.localMeta()
		}
		out = append(out, m)
	}
	return out
}

// replicaCache holds lookup results by target ID, at most max of them, each
// for at most ttl.
type replicaCache struct {
	max int
	ttl time.Duration

	mu      sync.Mutex
	entries map[quanta.ID]cacheEntry
}

// cacheEntry is one lookup's answer: the k closest live nodes it found.
type cacheEntry struct {
	k     int // how many the lookup asked for
	peers []Peer
	at    time.Time
}

// get returns the first rf peers of the entry for id, if it is fresh and
// holds them (or the lookup found fewer than rf in the whole network).
func (c *replicaCache) get(id quanta.ID, rf int) ([]Peer, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[id]
	if !ok || time.Since(e.at) > c.ttl || rf > e.k && len(e.peers) == e.k {
		return nil, false
	}
	return slices.Clone(e.peers[:min(rf, len(e.peers))]), true
}

// put records the answer of a lookup of k peers for id. At the limit it
// first drops the expired entries, then, if none was, an eighth of the rest.
func (c *replicaCache) put(id quanta.ID, k int, peers []Peer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= c.max {
		now := time.Now()
		for x, e := range c.entries {
			if now.Sub(e.at) > c.ttl {
				delete(c.entries, x)
			}
		}
		for x := range c.entries {
			if len(c.entries) < c.max-c.max/8 {
				break
			}
			delete(c.entries, x)
		}
	}
	c.entries[id] = cacheEntry{k: k, peers: slices.Clone(peers), at: time.Now()}
}

// dropPeer drops every entry that holds the peer id.
func (c *replicaCache) dropPeer(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for x, e := range c.entries {
		if slices.ContainsFunc(e.peers, func(p Peer) bool { return p.ID == id }) {
			delete(c.entries, x)
		}
	}
}

// closerPeer drops every entry that p would enter: p is closer to its ID
// than the last peer it holds, or it holds fewer peers than it asked for.
func (c *replicaCache) closerPeer(p Peer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for x, e := range c.entries {
		if len(e.peers) < e.k || Closer(x, p.Key, e.peers[len(e.peers)-1].Key) {
			if !slices.ContainsFunc(e.peers, func(q Peer) bool { return q.ID == p.ID }) {
				delete(c.entries, x)
			}
		}
	}
}

// LocateTrace finds the rf nodes closest to id as ReplicaSet does, but
// always afresh and telling how: in RoutingKademlia mode by an iterative
// lookup whose every request it returns (peer, distance, round); in
// RoutingFull mode over the full member list, with no hops.
func (n *Node) LocateTrace(ctx context.Context, id quanta.ID, rf int) ([]Peer, []Hop, error) {
	if n.kad == nil {
		return ClosestPeers(n.Live(), id, rf), nil, nil
	}
	ps, _, hops, err := n.LookupTrace(ctx, id, max(2*rf, n.Router.bucketSize))
	if err != nil && len(ps) <= 1 {
		return nil, hops, fmt.Errorf("dht: lookup of %s: %w", id, err)
	}
	return ps[:min(rf, len(ps))], hops, nil
}
