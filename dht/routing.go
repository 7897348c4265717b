package dht

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/host/peerstore"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
)

// RPC methods served by every node.
const (
	// MethodFindNode asks a node for the peers it knows closest to a target.
	MethodFindNode = "dht.find_node"
	// MethodPing asks a node who it is.
	MethodPing = "dht.ping"
)

// maxFindK bounds how many peers one FIND_NODE may ask for, so that a request
// cannot make a node build an arbitrarily large answer.
const maxFindK = 128

// maxPeerIDLen bounds a peer ID taken from the wire. Real IDs are 34 to 42
// bytes (a SHA-256 multihash, or an identity multihash of a small key).
const maxPeerIDLen = 64

const (
	// latencyTolerance is the kbucket latency filter. tsdht feeds no latency
	// metrics to the table (every node of a LAN is near), so any peer passes.
	latencyTolerance = time.Minute
	// usefulnessGracePeriod only matters when peers are replaceable, and
	// tsdht never adds replaceable peers: a full bucket keeps its old,
	// proven members, as Kademlia prescribes.
	usefulnessGracePeriod = time.Hour
)

// Router is the Kademlia half of a node, with no gossip: the kbucket routing
// table, the address book beside it, the handlers of MethodFindNode and
// MethodPing, and iterative lookups. Like Kademlia, it learns a peer from
// every message that peer sends it and from every peer that answers it.
type Router struct {
	self         Peer
	cli          *rpc.Client
	table        *kb.RoutingTable
	bucketSize   int
	alpha        int
	queryTimeout time.Duration
	// learnSenders offers the sender of every request to the table, as
	// Kademlia does. A Node turns it off: there memberlist is the authority
	// on who belongs to the cluster, and a stray client, or a node that was
	// refused for another configuration, must not enter the table.
	learnSenders bool

	// mu serialises changes to the table and the book, so that every peer
	// in the table has exactly one address in the book. Lock order: mu,
	// then the table's own lock.
	mu   sync.RWMutex
	book map[peer.ID]Peer
	// replacements holds, by bucket (common prefix length with self), the
	// peers most recently heard from that a full bucket turned away, newest
	// last, at most bucketSize each: Kademlia's replacement cache. A peer
	// dropped for failing is replaced from it. Kept only with learnSenders
	// (where membership feeds the table, it holds every live member anyway).
	replacements map[int][]Peer

	// onAdd and onRemove, if set before the router serves, are called after
	// a peer entered or left the table, outside the router's locks.
	onAdd    func(Peer)
	onRemove func(Peer)

	// rests holds the peers that said they stop and will be back (rest.go).
	rests restBook
	// gone holds the peers that said they leave for good (depart.go); onGone,
	// if set before the router serves, is called after one was dropped.
	gone   goneBook
	onGone func(id string)
	// leaving says that this node has begun to leave: it says so in every
	// request and answer that introduces it.
	leaving atomic.Bool
}

// NewRouter returns the router of the node self. It uses cfg's BucketSize,
// Alpha and QueryTimeout (zero values take DefaultLANConfig's),
// registers MethodFindNode and MethodPing on srv, and makes its outgoing calls
// with cli.
func NewRouter(self Peer, cfg Config, srv *rpc.Server, cli *rpc.Client) (*Router, error) {
	return newRouter(self, cfg, srv, cli, true)
}

// newRouter is NewRouter with learnSenders chosen, before the handlers can
// run.
func newRouter(self Peer, cfg Config, srv *rpc.Server, cli *rpc.Client, learnSenders bool) (*Router, error) {
	cfg = cfg.withDefaults()
	table, err := kb.NewRoutingTable(cfg.BucketSize, kb.ConvertPeerID(self.PeerID()), latencyTolerance,
		peerstore.NewMetrics(), usefulnessGracePeriod, nil)
	if err != nil {
		return nil, fmt.Errorf("dht: routing table: %w", err)
	}
	r := &Router{
		self:         self,
		cli:          cli,
		table:        table,
		bucketSize:   cfg.BucketSize,
		alpha:        cfg.Alpha,
		queryTimeout: cfg.QueryTimeout,
		learnSenders: learnSenders,
		book:         make(map[peer.ID]Peer),
		replacements: make(map[int][]Peer),
		rests:        restBook{grace: cfg.DownGrace},
	}
	srv.Handle(MethodFindNode, r.handleFindNode)
	srv.Handle(MethodPing, r.handlePing)
	srv.Handle(MethodStopping, r.handleStopping)
	srv.Handle(MethodLeaving, r.handleLeaving)
	return r, nil
}

// Self returns the local node.
func (r *Router) Self() Peer { return r.self }

// AddPeer offers p to the routing table, as Kademlia does for every peer
// heard from, and reports whether p is in the table afterwards. A peer
// already there has its address updated (a node restarted on a new port);
// a peer whose bucket is full of other peers is not added (with learnSenders
// it goes to the bucket's replacement cache).
func (r *Router) AddPeer(p Peer) bool {
	if p.ID == r.self.ID || r.gone.has(p.ID) {
		return false
	}
	r.mu.Lock()
	added, err := r.table.TryAddPeer(p.PeerID(), true, false)
	if err != nil {
		if r.learnSenders && errors.Is(err, kb.ErrPeerRejectedNoCapacity) {
			r.addReplacementLocked(p)
		}
		r.mu.Unlock()
		return false
	}
	r.book[p.PeerID()] = p
	r.mu.Unlock()
	if added && r.onAdd != nil {
		r.onAdd(p)
	}
	return true
}

// RemovePeer drops the peer with the given ID from the routing table.
func (r *Router) RemovePeer(id string) {
	r.mu.Lock()
	p, had := r.book[peer.ID(id)]
	r.table.RemovePeer(peer.ID(id))
	delete(r.book, peer.ID(id))
	r.mu.Unlock()
	if had && r.onRemove != nil {
		r.onRemove(p)
	}
}

// TableSize returns how many peers the routing table holds.
func (r *Router) TableSize() int { return r.table.Size() }

// NearestPeers returns up to count peers of the routing table closest to
// target, closest first. The table never holds the local node.
func (r *Router) NearestPeers(target quanta.ID, count int) []Peer {
	ids := r.table.NearestPeers(tableKey(target), count)
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Peer, 0, len(ids))
	for _, id := range ids {
		// A peer removed since the table answered is simply left out.
		if p, ok := r.book[id]; ok {
			out = append(out, p)
		}
	}
	return out
}

// closestKnown returns up to count peers closest to target among the routing
// table and the local node, closest first: what this node answers to
// FIND_NODE.
func (r *Router) closestKnown(target quanta.ID, count int) []Peer {
	ps := append(r.NearestPeers(target, count), r.self)
	sortByDistance(ps, target)
	return ps[:min(count, len(ps))]
}

// sortByDistance sorts peers by XOR distance of their Key to target, closest
// first.
func sortByDistance(ps []Peer, target quanta.ID) {
	slices.SortFunc(ps, func(a, b Peer) int { return compareDistance(target, a.Key, b.Key) })
}

// Close releases the routing table. The rpc server and client belong to the
// caller, who closes them.
func (r *Router) Close() error { return r.table.Close() }

// The messages below travel as msgpack maps keyed by field name, so a later
// version can add fields that older nodes skip. rpc.Decode validates every
// declared length before msgpack allocates anything.

// wirePeer is a Peer as it travels. The Key is left out: the receiver
// computes it from the ID, so a node cannot claim a place in the key space.
type wirePeer struct {
	ID   []byte `msgpack:"id"`
	Addr string `msgpack:"addr"`
	// Rest is, in a FIND_NODE answer, how many milliseconds the peer still
	// rests (it stopped on purpose: rest.go); 0 if it does not. Older nodes
	// skip the field.
	Rest int64 `msgpack:"rest,omitempty"`
	// Leaving says that the peer has begun to leave for good (depart.go): set
	// by a node introducing itself once it hands off; the receiver drops it.
	// Older nodes skip the field.
	Leaving bool `msgpack:"leaving,omitempty"`
}

// findNodeRequest asks for the K peers the receiver knows closest to Target.
// From introduces the sender, whom the receiver adds to its table.
type findNodeRequest struct {
	Target []byte   `msgpack:"target"`
	K      int      `msgpack:"k"`
	From   wirePeer `msgpack:"from"`
}

// findNodeResponse lists the peers closest to the target that the responder
// knows, itself included, closest first.
type findNodeResponse struct {
	Peers []wirePeer `msgpack:"peers"`
}

// pingRequest introduces the sender.
type pingRequest struct {
	From wirePeer `msgpack:"from"`
}

// pingResponse introduces the responder.
type pingResponse struct {
	Self wirePeer `msgpack:"self"`
}

func toWire(p Peer) wirePeer { return wirePeer{ID: []byte(p.ID), Addr: p.RPCAddr} }

// fromWire checks a peer taken from a message and computes its Key.
func fromWire(w wirePeer) (Peer, error) {
	if len(w.ID) > maxPeerIDLen {
		return Peer{}, fmt.Errorf("peer ID of %d bytes", len(w.ID))
	}
	id, err := peer.IDFromBytes(w.ID)
	if err != nil {
		return Peer{}, fmt.Errorf("peer ID: %w", err)
	}
	if w.Addr == "" || len(w.Addr) > MaxRPCAddrLen {
		return Peer{}, fmt.Errorf("peer %s: RPC address of %d bytes", id, len(w.Addr))
	}
	return NewPeer(id, w.Addr), nil
}

// handleFindNode answers MethodFindNode and, as Kademlia does on every
// request, offers the sender to the routing table (see learnSenders).
func (r *Router) handleFindNode(_ context.Context, b []byte) ([]byte, error) {
	var req findNodeRequest
	if err := rpc.Decode(b, &req); err != nil {
		return nil, err
	}
	if len(req.Target) != quanta.IDLen {
		return nil, rpc.Errorf(rpc.CodeBadRequest, "find_node: target of %d bytes, want %d", len(req.Target), quanta.IDLen)
	}
	if req.K < 1 || req.K > maxFindK {
		return nil, rpc.Errorf(rpc.CodeBadRequest, "find_node: k = %d, want 1..%d", req.K, maxFindK)
	}
	from, err := fromWire(req.From)
	if err != nil {
		return nil, rpc.Errorf(rpc.CodeBadRequest, "find_node: sender: %v", err)
	}
	r.learn(from, req.From.Leaving)

	var resp findNodeResponse
	for _, p := range r.closestKnown(quanta.ID(req.Target), req.K) {
		w := toWire(p)
		if p.ID == r.self.ID {
			w = r.selfWire()
		}
		w.Rest = r.rests.left(p.ID).Milliseconds()
		resp.Peers = append(resp.Peers, w)
	}
	return rpc.Encode(&resp)
}

// handlePing answers MethodPing and offers the sender to the routing table
// (see learnSenders).
func (r *Router) handlePing(_ context.Context, b []byte) ([]byte, error) {
	var req pingRequest
	if err := rpc.Decode(b, &req); err != nil {
		return nil, err
	}
	from, err := fromWire(req.From)
	if err != nil {
		return nil, rpc.Errorf(rpc.CodeBadRequest, "ping: sender: %v", err)
	}
	r.learn(from, req.From.Leaving)
	return rpc.Encode(&pingResponse{Self: r.selfWire()})
}

// learn offers the sender of a request to the table if learnSenders says so.
// A sender that rested is awake again; one that says it leaves is dropped, and
// one that said so before and no longer does has rejoined.
func (r *Router) learn(p Peer, leaving bool) {
	if leaving {
		r.markGone(p.ID)
		return
	}
	r.gone.forget(p.ID)
	r.rests.wake(p.ID)
	if r.learnSenders {
		r.AddPeer(p)
	}
}

// Ping asks the node at addr who it is, adds it to the routing table and
// returns it. Kademlia's join starts here: a new node knows only an address.
func (r *Router) Ping(ctx context.Context, addr string) (Peer, error) {
	ctx, cancel := context.WithTimeout(ctx, r.queryTimeout)
	defer cancel()
	var resp pingResponse
	if err := rpc.Invoke(ctx, r.cli, addr, MethodPing, &pingRequest{From: r.selfWire()}, &resp); err != nil {
		return Peer{}, fmt.Errorf("dht: ping %s: %w", addr, err)
	}
	p, err := fromWire(resp.Self)
	if err != nil {
		return Peer{}, fmt.Errorf("dht: ping %s: %w", addr, err)
	}
	if resp.Self.Leaving {
		r.markGone(p.ID)
		return p, nil
	}
	r.gone.forget(p.ID)
	r.markAlive(p)
	return p, nil
}

// Bootstrap is Kademlia's join: it pings the nodes at addrs, then looks up
// the local node's own Key, which fills the table and introduces this node to
// the nodes closest to it. It fails only if no address answered.
func (r *Router) Bootstrap(ctx context.Context, addrs []string) error {
	var errs []error
	for _, a := range addrs {
		if _, err := r.Ping(ctx, a); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == len(addrs) && len(addrs) > 0 {
		return errors.Join(errs...)
	}
	_, err := r.Lookup(ctx, r.self.Key, r.bucketSize)
	return err
}

// Refresh looks up one random ID in the range of each bucket, from the
// farthest to the nearest non-empty one, as Kademlia's bucket refresh does: it
// fills buckets that the join lookup left thin.
func (r *Router) Refresh(ctx context.Context) error {
	maxCpl := 0
	for _, id := range r.table.ListPeers() {
		maxCpl = max(maxCpl, kb.CommonPrefixLen(kb.ConvertPeerID(id), kb.ConvertPeerID(r.self.PeerID())))
	}
	for cpl := 0; cpl <= min(maxCpl, quanta.IDLen*8-1); cpl++ {
		if _, err := r.Lookup(ctx, randomIDWithCPL(r.self.Key, cpl), r.bucketSize); err != nil {
			return err
		}
	}
	return nil
}
