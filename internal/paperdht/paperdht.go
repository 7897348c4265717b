// Package paperdht rebuilds the prototype of the paper tsdht comes from (Krentz, Dubey,
// Karsai, "Towards an Edge-Located Time-Series Database", seeds/001, §V), so that
// benchmarks can run it beside tsdht in the same process on the same machine.
//
// As the paper describes it: a simple DHT in Go borrowing Kademlia's 160-bit IDs and XOR
// distance; every call a Remote Procedure Call over HTTP with Go's net/rpc, serialised
// with encoding/gob; all data in memory, in a hashmap from shard ID to a slice of
// timestamped measurements, guarded by a lock, with a goroutine per connection serving
// requests (net/rpc's); a write stored on the rf nodes whose IDs are XOR-closest to its
// shard ID (built as tsdht builds it: quanta.ShardID, the paper's QFI and KFI layouts).
//
// Choices where the paper says nothing, each made in the rebuild's favour: every node
// knows every other (no lookup hops before a write); the replica set is computed on the
// writer by sorting the members by XOR distance; connections are dialed once and kept
// (rpc.DialHTTP hijacks one HTTP connection per peer and multiplexes calls over it); a
// write to the writer's own node stores in its map without an RPC; the replicas are
// called in parallel (rpc.Client.Go) and a write returns once a quorum of them has
// answered (the caller's choice; rf for all of them). Client.Lookup adds what
// Kademlia's STORE does first ("as per Kademlia, all communication happens through
// RPCs"): an iterative FIND_NODE lookup of the rf closest nodes, α = 3 queries at a
// time, until the rf closest nodes seen have all answered.
//
// It is a yardstick, not part of tsdht: no deadlines on calls, no persistence, no
// membership changes, no bounds on what a peer may send.
package paperdht

import (
	"bytes"
	"crypto/rand"
	"crypto/sha1"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/rpc"
	"slices"
	"sort"
	"sync"

	"github.com/tsdht/tsdht/quanta"
)

// Measurement is one timestamped value, as the paper stores them.
type Measurement struct {
	T int64   // nanoseconds since the UNIX epoch
	V float64 // the value
}

// StoreArgs is the Store RPC's request: measurements to append to a shard.
type StoreArgs struct {
	ID quanta.ID
	M  []Measurement
}

// StoreReply is the Store RPC's answer.
type StoreReply struct {
	Stored int // measurements appended
}

// FindNodeArgs is the FindNode RPC's request: Kademlia's FIND_NODE.
type FindNodeArgs struct {
	Target quanta.ID
}

// FindNodeReply is the FindNode RPC's answer: the K contacts the node knows closest
// to the target.
type FindNodeReply struct {
	Contacts []Contact
}

// K is Kademlia's bucket size: how many contacts a FindNode answer holds at most.
const K = 20

// Alpha is Kademlia's lookup parallelism.
const Alpha = 3

// GetArgs is the Get RPC's request: one shard.
type GetArgs struct {
	ID quanta.ID
}

// GetReply is the Get RPC's answer: every measurement the node holds for the shard, in
// arrival order (a whole quantum, as the paper returned it).
type GetReply struct {
	M    []Measurement
	Held bool // the node holds the shard
}

// Node is one DHT node: its ID, its hashmap, and the HTTP server its RPCs arrive on.
type Node struct {
	ID quanta.ID

	mu       sync.RWMutex
	data     map[quanta.ID][]Measurement
	contacts []Contact // every node, itself included (SetContacts)

	ln  net.Listener
	srv *http.Server
}

// Service is the net/rpc receiver of a Node ("Node.Store", "Node.Get").
type Service struct{ n *Node }

// Store appends args.M to the shard's slice.
func (s *Service) Store(args *StoreArgs, reply *StoreReply) error {
	reply.Stored = s.n.store(args.ID, args.M)
	return nil
}

// Get returns the shard's slice.
func (s *Service) Get(args *GetArgs, reply *GetReply) error {
	reply.M, reply.Held = s.n.get(args.ID)
	return nil
}

// FindNode answers with the K contacts closest to the target.
func (s *Service) FindNode(args *FindNodeArgs, reply *FindNodeReply) error {
	reply.Contacts = s.n.findNode(args.Target)
	return nil
}

// SetContacts tells the node the cluster's members (its routing table: with fewer
// than K nodes per bucket, Kademlia's tables hold every node).
func (n *Node) SetContacts(cs []Contact) {
	n.mu.Lock()
	n.contacts = slices.Clone(cs)
	n.mu.Unlock()
}

func (n *Node) findNode(target quanta.ID) []Contact {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return Closest(n.contacts, target, K)
}

func (n *Node) store(id quanta.ID, m []Measurement) int {
	n.mu.Lock()
	n.data[id] = append(n.data[id], m...)
	n.mu.Unlock()
	return len(m)
}

func (n *Node) get(id quanta.ID) ([]Measurement, bool) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	m, ok := n.data[id]
	return slices.Clone(m), ok
}

// Listen starts a node with a random 160-bit ID serving net/rpc over HTTP on addr
// (HOST:PORT; port 0 picks one).
func Listen(addr string) (*Node, error) {
	n := &Node{data: map[quanta.ID][]Measurement{}}
	var seed [20]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, err
	}
	n.ID = sha1.Sum(seed[:])
	srv := rpc.NewServer()
	if err := srv.RegisterName("Node", &Service{n: n}); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(rpc.DefaultRPCPath, srv) // the CONNECT handshake of rpc.DialHTTP
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	n.ln, n.srv = ln, &http.Server{Handler: mux}
	go n.srv.Serve(ln) //nolint:errcheck // ends with Close
	return n, nil
}

// Addr is the node's HOST:PORT.
func (n *Node) Addr() string { return n.ln.Addr().String() }

// Contact is how a node is known to others.
func (n *Node) Contact() Contact { return Contact{ID: n.ID, Addr: n.Addr()} }

// Shards returns how many shards the node holds.
func (n *Node) Shards() int {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return len(n.data)
}

// Close stops serving. Connections already hijacked by net/rpc stay open until their
// clients close them.
func (n *Node) Close() error { return n.srv.Close() }

// Contact is a node's ID and address.
type Contact struct {
	ID   quanta.ID
	Addr string
}

// Closest returns the k contacts whose IDs are XOR-closest to id, closest first: the
// replica set of a shard.
func Closest(contacts []Contact, id quanta.ID, k int) []Contact {
	type byDist struct {
		d quanta.ID
		c Contact
	}
	all := make([]byDist, len(contacts))
	for i, c := range contacts {
		all[i].c = c
		for j := range id {
			all[i].d[j] = c.ID[j] ^ id[j]
		}
	}
	sort.Slice(all, func(i, j int) bool { return bytes.Compare(all[i].d[:], all[j].d[:]) < 0 })
	out := make([]Contact, 0, min(k, len(all)))
	for _, x := range all[:cap(out)] {
		out = append(out, x.c)
	}
	return out
}

// Client writes and reads through the DHT: a node's outgoing side (self is that node,
// written without an RPC) or a thin client (self nil). It keeps one net/rpc client per
// peer, dialed at first use. Safe for concurrent use.
type Client struct {
	// Lookup makes every Put and Get find its replicas by an iterative FIND_NODE lookup
	// over RPC, as Kademlia's STORE and FIND_VALUE do, instead of from the client's own
	// contact list (which need not hold the closest nodes).
	Lookup bool
	// DialEach makes every RPC dial its own connection and close it after the answer
	// (rpc.DialHTTP, call, Close), as net/rpc's package example does, instead of
	// keeping one connection per peer: the costlier reading of a prototype that says
	// only "RPCs over HTTP".
	DialEach bool

	self     *Node
	contacts []Contact
	format   quanta.Format
	quantum  quanta.Quantum

	mu    sync.Mutex
	conns map[string]*rpc.Client
}

// NewClient returns a client of the nodes in contacts placing shards with format f and
// quantum q.
func NewClient(self *Node, contacts []Contact, f quanta.Format, q quanta.Quantum) *Client {
	return &Client{self: self, contacts: slices.Clone(contacts), format: f, quantum: q, conns: map[string]*rpc.Client{}}
}

// goCall starts the RPC method on the node at addr, as rpc.Client.Go does, and
// delivers it on done. With DialEach the call has a connection of its own, closed once
// it is answered.
func (c *Client) goCall(addr, method string, args, reply any, done chan *rpc.Call) (*rpc.Call, error) {
	if !c.DialEach {
		cl, err := c.conn(addr)
		if err != nil {
			return nil, err
		}
		return cl.Go(method, args, reply, done), nil
	}
	cl, err := rpc.DialHTTP("tcp", addr)
	if err != nil {
		return nil, err
	}
	inner := make(chan *rpc.Call, 1)
	call := cl.Go(method, args, reply, inner)
	go func() {
		<-inner
		cl.Close()
		done <- call
	}()
	return call, nil
}

func (c *Client) conn(addr string) (*rpc.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl := c.conns[addr]; cl != nil {
		return cl, nil
	}
	cl, err := rpc.DialHTTP("tcp", addr)
	if err != nil {
		return nil, err
	}
	c.conns[addr] = cl
	return cl, nil
}

// Put stores one measurement of series key on its shard's rf closest nodes, in
// parallel, and returns once quorum of them (1..rf) have stored it.
func (c *Client) Put(key string, t int64, v float64, rf, quorum int) error {
	if rf < 1 || quorum < 1 || quorum > rf {
		return fmt.Errorf("paperdht: put with rf %d and quorum %d: need 1 ≤ quorum ≤ rf", rf, quorum)
	}
	id := quanta.ShardID(c.format, key, c.quantum.Start(t))
	args := &StoreArgs{ID: id, M: []Measurement{{T: t, V: v}}}
	replicas := Closest(c.contacts, id, rf)
	if c.Lookup {
		var err error
		if replicas, err = c.lookup(id, rf); err != nil {
			return fmt.Errorf("paperdht: put %q: %w", key, err)
		}
	}
	done := make(chan *rpc.Call, len(replicas))
	acked, calls := 0, 0
	var errs []error
	for _, r := range replicas {
		if c.self != nil && r.ID == c.self.ID {
			c.self.store(id, args.M)
			acked++
			continue
		}
		if _, err := c.goCall(r.Addr, "Node.Store", args, new(StoreReply), done); err != nil {
			errs = append(errs, err)
			continue
		}
		calls++
	}
	for ; calls > 0 && acked < quorum; calls-- {
		call := <-done
		if call.Error != nil {
			errs = append(errs, call.Error)
			continue
		}
		acked++
	}
	if acked < quorum {
		return fmt.Errorf("paperdht: put %q: %d of %d replicas stored it, want %d: %w", key, acked, len(replicas), quorum, errors.Join(errs...))
	}
	return nil
}

// lookup finds the k nodes closest to id as Kademlia does: it asks the Alpha closest
// nodes it knows of that it has not asked yet, in parallel, for their closest
// contacts, and repeats until the k closest it has seen have all answered. A node
// that fails to answer is dropped.
func (c *Client) lookup(id quanta.ID, k int) ([]Contact, error) {
	seen := map[quanta.ID]Contact{}
	for _, x := range Closest(c.contacts, id, Alpha) {
		seen[x.ID] = x
	}
	asked := map[quanta.ID]bool{}
	type answer struct {
		from Contact
		cs   []Contact
		err  error
	}
	for {
		known := make([]Contact, 0, len(seen))
		for _, x := range seen {
			known = append(known, x)
		}
		var ask []Contact
		for _, x := range Closest(known, id, k) {
			if !asked[x.ID] && len(ask) < Alpha {
				ask = append(ask, x)
			}
		}
		if len(ask) == 0 {
			return Closest(known, id, k), nil
		}
		var local []answer
		calls := make(chan *rpc.Call, len(ask))
		from := map[*rpc.Call]Contact{}
		for _, x := range ask {
			asked[x.ID] = true
			if c.self != nil && x.ID == c.self.ID {
				local = append(local, answer{from: x, cs: c.self.findNode(id)})
				continue
			}
			call, err := c.goCall(x.Addr, "Node.FindNode", &FindNodeArgs{Target: id}, new(FindNodeReply), calls)
			if err != nil {
				local = append(local, answer{from: x, err: err})
				continue
			}
			from[call] = x
		}
		for range from {
			call := <-calls
			local = append(local, answer{from: from[call], cs: call.Reply.(*FindNodeReply).Contacts, err: call.Error})
		}
		for _, a := range local {
			if a.err != nil {
				delete(seen, a.from.ID)
				continue
			}
			for _, x := range a.cs {
				seen[x.ID] = x
			}
		}
		if len(seen) == 0 {
			return nil, errors.New("lookup: no node answered")
		}
	}
}

// Get returns the measurements of series key in the quanta covering [from, to), whole
// quanta as the paper returned them, sorted by time. Each quantum's shard is asked of
// its closest replica that answers, all quanta in parallel.
func (c *Client) Get(key string, from, to int64, rf int) ([]Measurement, error) {
	starts, err := c.quantum.Covering(from, to)
	if err != nil {
		return nil, err
	}
	parts := make([][]Measurement, len(starts))
	errs := make([]error, len(starts))
	var wg sync.WaitGroup
	for i, start := range starts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			parts[i], errs[i] = c.getShard(quanta.ShardID(c.format, key, start), rf)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := slices.Concat(parts...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].T < out[j].T })
	return out, nil
}

func (c *Client) getShard(id quanta.ID, rf int) ([]Measurement, error) {
	replicas := Closest(c.contacts, id, rf)
	if c.Lookup { // as Put found them: the contacts alone may not hold the closest nodes
		var err error
		if replicas, err = c.lookup(id, rf); err != nil {
			return nil, fmt.Errorf("paperdht: shard %s: %w", id, err)
		}
	}
	var errs []error
	for _, r := range replicas {
		if c.self != nil && r.ID == c.self.ID {
			if m, ok := c.self.get(id); ok {
				return m, nil
			}
			continue
		}
		var reply GetReply
		call, err := c.goCall(r.Addr, "Node.Get", &GetArgs{ID: id}, &reply, make(chan *rpc.Call, 1))
		if err == nil {
			err = (<-call.Done).Error
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if reply.Held {
			return reply.M, nil
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("paperdht: shard %s: %w", id, errors.Join(errs...))
	}
	return nil, nil // no replica holds it: nothing was written there
}

// Close closes the client's connections.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for addr, cl := range c.conns {
		errs = append(errs, cl.Close())
		delete(c.conns, addr)
	}
	return errors.Join(errs...)
}

// Cluster is n nodes on loopback, each knowing all.
type Cluster struct {
	Nodes    []*Node
	Contacts []Contact
}

// StartCluster starts n nodes on 127.0.0.1.
func StartCluster(n int) (*Cluster, error) {
	cl := &Cluster{}
	for range n {
		node, err := Listen("127.0.0.1:0")
		if err != nil {
			cl.Close()
			return nil, err
		}
		cl.Nodes = append(cl.Nodes, node)
		cl.Contacts = append(cl.Contacts, node.Contact())
	}
	for _, node := range cl.Nodes {
		node.SetContacts(cl.Contacts)
	}
	return cl, nil
}

// Client returns node i's outgoing side (the paper's writer is one of the nodes).
func (cl *Cluster) Client(i int, f quanta.Format, q quanta.Quantum) *Client {
	return NewClient(cl.Nodes[i], cl.Contacts, f, q)
}

// Close stops every node.
func (cl *Cluster) Close() error {
	var errs []error
	for _, n := range cl.Nodes {
		errs = append(errs, n.Close())
	}
	return errors.Join(errs...)
}
