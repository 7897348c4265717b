package dht

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/hashicorp/memberlist"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/tsdht/tsdht/quanta"
)

// ProtocolVersion is the version of the dht protocol (its messages and
// metadata) this package speaks. Nodes of one cluster must speak the same.
const ProtocolVersion = 1

// metaVersion is the first byte of the metadata layout, so that a later
// layout can be told apart from this one.
const metaVersion = 1

// MemberState is a member's state as Members reports it; its string is what status
// and the wire show.
type MemberState string

// Member states as Members reports them.
const (
	StateAlive MemberState = "alive"
	// StateLeaving is a live member handing its data off before it leaves: it
	// still answers, but no longer owns anything, so Live leaves it out.
	StateLeaving MemberState = "leaving"
	StateDead    MemberState = "dead"
	StateLeft    MemberState = "left"
	// StateStopped is a member that stopped on purpose and will be back (a restart,
	// an upgrade): it keeps owning its shards for Config.DownGrace, so that writes
	// meant for it leave hints and nothing is copied elsewhere meanwhile. Live leaves it
	// out; ReplicaSet keeps it.
	StateStopped MemberState = "stopped"
)

// Meta is what a node tells the cluster about itself beside its Peer, in its
// memberlist metadata.
type Meta struct {
	Protocol uint8          // dht protocol version
	Quantum  quanta.Quantum // quantum length of its cluster
	Format   quanta.Format  // shard ID layout of its cluster
	Routing  Routing        // routing mode of its cluster
	// Leaving says that the node has begun to leave. It is how the others
	// tell a departure from a death: memberlist's NotifyLeave fires for both
	// and its Node.State does not say which (hashicorp/memberlist#266: the
	// state it maintains is a shadowing field of its own).
	Leaving bool
	// Stopping says that the node is stopping and will come back with its data: the
	// others keep counting it as an owner for their DownGrace (StateStopped).
	Stopping bool
}

// Member is a node as memberlist knows it.
type Member struct {
	Peer
	// State is StateAlive, StateLeaving, StateStopped, StateDead or StateLeft. A node that memberlist
	// suspects is still alive: memberlist raises no event on suspicion, and
	// the Node.State of the nodes its Members returns is not maintained
	// (hashicorp/memberlist#266), so there is no suspect state to read
	// (serf, built on memberlist, also counts suspects as alive).
	State MemberState
	// GossipAddr is the host:port the node gossips on.
	GossipAddr string
	Meta       Meta
}

// encodeMeta lays out a node's metadata: the version byte, the peer ID and
// the RPC address (each a uvarint length and bytes), the protocol version,
// the quantum in seconds (uvarint), the ID format and a flags byte (bit 0:
// leaving; bit 1: stopping; bit 2: routing mode kademlia, else full). With
// the bounds New checks it stays under 320 bytes, far from memberlist's limit
// of 512.
func encodeMeta(p Peer, m Meta) []byte {
	b := []byte{metaVersion}
	b = binary.AppendUvarint(b, uint64(len(p.ID)))
	b = append(b, p.ID...)
	b = binary.AppendUvarint(b, uint64(len(p.RPCAddr)))
	b = append(b, p.RPCAddr...)
	b = append(b, m.Protocol)
	b = binary.AppendUvarint(b, uint64(m.Quantum))
	var flags byte
	if m.Leaving {
		flags |= flagLeaving
	}
	if m.Stopping {
		flags |= flagStopping
	}
	if m.Routing == RoutingKademlia {
		flags |= flagKademlia
	}
	return append(b, byte(m.Format), flags)
}

// The metadata flags of Meta.Leaving, Meta.Stopping, and Meta.Routing ==
// RoutingKademlia.
const (
	flagLeaving  = 1
	flagStopping = 2
	flagKademlia = 4
)

// decodeMeta parses what encodeMeta laid out, checking every length against
// the bytes that remain: the metadata comes from the network. Flags it does
// not know and trailing bytes are ignored, so that a later version can add
// to the layout without a new layout byte.
func decodeMeta(b []byte) (Peer, Meta, error) {
	r := bytes.NewReader(b)
	var m Meta
	v, err := r.ReadByte()
	if err != nil {
		return Peer{}, m, errors.New("empty metadata")
	}
	if v != metaVersion {
		return Peer{}, m, fmt.Errorf("metadata layout %d, this node reads %d", v, metaVersion)
	}
	id, err := readField(r, maxPeerIDLen)
	if err != nil {
		return Peer{}, m, fmt.Errorf("metadata peer ID: %w", err)
	}
	addr, err := readField(r, MaxRPCAddrLen)
	if err != nil {
		return Peer{}, m, fmt.Errorf("metadata RPC address: %w", err)
	}
	p, err := fromWire(wirePeer{ID: id, Addr: string(addr)})
	if err != nil {
		return Peer{}, m, fmt.Errorf("metadata: %w", err)
	}
	if m.Protocol, err = r.ReadByte(); err != nil {
		return Peer{}, m, errors.New("metadata truncated")
	}
	q, err := binary.ReadUvarint(r)
	if err != nil || q < 1 || q > maxQuantum {
		return Peer{}, m, errors.New("metadata quantum unreadable")
	}
	m.Quantum = quanta.Quantum(q)
	f, err := r.ReadByte()
	if err != nil {
		return Peer{}, m, errors.New("metadata truncated")
	}
	m.Format = quanta.Format(f)
	flags, err := r.ReadByte()
	if err != nil {
		return Peer{}, m, errors.New("metadata truncated")
	}
	m.Leaving = flags&flagLeaving != 0
	m.Stopping = flags&flagStopping != 0
	m.Routing = RoutingFull
	if flags&flagKademlia != 0 {
		m.Routing = RoutingKademlia
	}
	return p, m, nil
}

// readField reads a uvarint length of at most max and that many bytes.
func readField(r *bytes.Reader, max int) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, errors.New("truncated")
	}
	if n > uint64(max) || n > uint64(r.Len()) {
		return nil, fmt.Errorf("declares %d bytes, at most %d and %d remain", n, max, r.Len())
	}
	b := make([]byte, n)
	_, _ = r.Read(b)
	return b, nil
}

// delegate is the Node's face towards memberlist. Its methods run on
// memberlist's goroutines, several of them under memberlist's node lock:
// they never call back into memberlist, and they only record what happened
// and wake the Node's loop.
type delegate struct{ n *Node }

var (
	_ memberlist.Delegate      = delegate{}
	_ memberlist.EventDelegate = delegate{}
	_ memberlist.AliveDelegate = delegate{}
	_ memberlist.MergeDelegate = delegate{}
)

// NodeMeta returns the local metadata, which New checked fits in limit.
func (d delegate) NodeMeta(limit int) []byte { return encodeMeta(d.n.Self(), d.n.localMeta()) }

// NotifyMsg, GetBroadcasts, LocalState and MergeRemoteState carry user data
// over gossip, which tsdht does not use.
func (delegate) NotifyMsg([]byte)                           {}
func (delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (delegate) LocalState(join bool) []byte                { return nil }
func (delegate) MergeRemoteState(buf []byte, join bool)     {}

// NotifyJoin is called when a node joins, the local node included, and when
// a dead or departed node comes back, perhaps at a new address.
func (d delegate) NotifyJoin(n *memberlist.Node) { d.n.recordMember(n, false) }

// NotifyUpdate is called when a node's metadata changes: it began to leave.
func (d delegate) NotifyUpdate(n *memberlist.Node) { d.n.recordMember(n, false) }

// NotifyLeave is called both when a node leaves and when it is declared
// dead. Its metadata tells which.
func (d delegate) NotifyLeave(n *memberlist.Node) { d.n.recordMember(n, true) }

// NotifyAlive filters every alive message memberlist receives, gossip
// included: a node of another configuration never becomes a member, even if
// it slipped past the join check through a third node.
func (d delegate) NotifyAlive(n *memberlist.Node) error {
	return d.n.checkCompatible(n.Name, n.Meta)
}

// NotifyMerge checks, at join, the state received from the other side: it
// cancels the join, on both sides, if any live node there is configured
// differently from this one. On the joining node the error comes back out of
// memberlist's Join, and so out of Start, naming the mismatch.
//
// It also notices the other side holding this node at another address: a
// previous incarnation, which the Node's loop then works to replace.
func (d delegate) NotifyMerge(nodes []*memberlist.Node) error {
	self := memberlistName(d.n.Self().PeerID())
	for _, n := range nodes {
		if n.Name == self {
			if net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))) != d.n.GossipAddr() {
				d.n.staleSelf.Store(true)
			}
			continue
		}
		if n.State == memberlist.StateDead || n.State == memberlist.StateLeft {
			continue
		}
		if err := d.n.checkCompatible(n.Name, n.Meta); err != nil {
			return err
		}
	}
	return nil
}

// ErrIncompatible is wrapped by the error of Start when the cluster refused
// this node for its configuration (quantum, ID format, protocol): unlike an
// unreachable seed, retrying will not help.
var ErrIncompatible = errors.New("this node's configuration differs from the cluster's")

// incompatibleNode starts every message of checkCompatible. Memberlist's Join
// returns the text of the merge delegate's error, not the error itself, so
// Start recognises a refusal by it.
const incompatibleNode = "incompatible node "

// checkCompatible says why the node named name, with metadata meta, cannot be
// in this node's cluster, or returns nil. A (name, metadata) pair it accepted once
// is accepted again without decoding: memberlist asks for every alive message it
// receives, gossip and state exchanges included, and decoding the metadata (a peer
// ID, a base58 name) each time was a good part of an idle cluster's allocations.
func (n *Node) checkCompatible(name string, meta []byte) error {
	if n.compatible.accepted(name, meta) {
		return nil
	}
	if err := n.checkMeta(name, meta); err != nil {
		return err
	}
	n.compatible.accept(name, meta)
	return nil
}

// compatCache holds the (name, metadata) pairs checkCompatible accepted, at most
// compatCacheMax: past that it starts again empty.
type compatCache struct {
	mu sync.Mutex
	m  map[string]string
}

// compatCacheMax bounds the cache; a cluster's members and their metadata
// versions (leaving, stopping) fit many times over.
const compatCacheMax = 4096

func (c *compatCache) accepted(name string, meta []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	have, ok := c.m[name]
	return ok && have == string(meta)
}

func (c *compatCache) accept(name string, meta []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= compatCacheMax {
		c.m = make(map[string]string)
	}
	c.m[name] = string(meta)
}

// checkMeta is checkCompatible without the cache.
func (n *Node) checkMeta(name string, meta []byte) error {
	p, m, err := decodeMeta(meta)
	if err != nil {
		return fmt.Errorf(incompatibleNode+"%s: %w", name, err)
	}
	if memberlistName(p.PeerID()) != name {
		return fmt.Errorf(incompatibleNode+"%s: its metadata names peer %s", name, p.PeerID())
	}
	if m.Protocol != ProtocolVersion {
		return fmt.Errorf(incompatibleNode+"%s: it speaks dht protocol %d, this node %d", name, m.Protocol, ProtocolVersion)
	}
	if m.Quantum != n.cfg.Quantum {
		return fmt.Errorf(incompatibleNode+"%s: its quantum is %v, this node's %v; every node of a cluster must use the same quantum",
			name, m.Quantum.Duration(), n.cfg.Quantum.Duration())
	}
	if m.Routing != n.cfg.Routing {
		return fmt.Errorf(incompatibleNode+"%s: its routing mode is %v, this node's %v; every node of a cluster must use the same --routing",
			name, m.Routing, n.cfg.Routing)
	}
	if m.Format != n.cfg.Format {
		return fmt.Errorf(incompatibleNode+"%s: its ID format is %v, this node's %v; every node of a cluster must use the same ID format",
			name, m.Format, n.cfg.Format)
	}
	return nil
}

// memberFrom converts a memberlist node whose metadata passed NotifyAlive;
// gone says that memberlist reported it dead or departed.
func memberFrom(n *memberlist.Node, gone bool) (Member, error) {
	p, m, err := decodeMeta(n.Meta)
	if err != nil {
		return Member{}, fmt.Errorf("node %s: %w", n.Name, err)
	}
	state := StateAlive
	switch {
	case gone && m.Leaving:
		state = StateLeft
	case gone && m.Stopping:
		state = StateStopped
	case gone:
		state = StateDead
	case m.Leaving:
		state = StateLeaving
	}
	return Member{
		Peer:       p,
		State:      state,
		GossipAddr: net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))),
		Meta:       m,
	}, nil
}

// memberlistName is the memberlist node name of a peer: its base58 peer ID,
// unique where the default (the hostname) is not.
func memberlistName(id peer.ID) string { return id.String() }

// memberlistLog routes memberlist's log lines into the node's slog.Logger at
// the level their prefix names ([DEBUG], [INFO], [WARN], [ERR]), with the
// peers memberlist names by base58 peer ID renamed to the 40-hex node IDs that
// status prints. While the node shuts down, memberlist's warnings and errors
// are the shutdown's own doing ("use of closed network connection") and are
// passed at Debug.
type memberlistLog struct{ n *Node }

var memberlistLevels = []struct {
	prefix string
	level  slog.Level
}{{"[DEBUG] ", slog.LevelDebug}, {"[INFO] ", slog.LevelInfo}, {"[WARN] ", slog.LevelWarn}, {"[ERR] ", slog.LevelError}}

func (w memberlistLog) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	level := slog.LevelInfo
	for _, l := range memberlistLevels {
		if rest, ok := strings.CutPrefix(line, l.prefix); ok {
			line, level = rest, l.level
			break
		}
	}
	if w.n.stopping.Load() && level > slog.LevelInfo {
		level = slog.LevelDebug
	}
	ctx := context.Background()
	if !w.n.logger.Enabled(ctx, level) {
		return len(p), nil
	}
	if names := w.n.hexNames.Load(); names != nil {
		for id, hex := range *names {
			line = strings.ReplaceAll(line, id, hex)
		}
	}
	w.n.logger.Log(ctx, level, line)
	return len(p), nil
}
