package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"time"
)

// MemNetwork is a network inside one process, for tests and simulations of
// thousands of nodes, with faults on demand: nodes can be taken down and the
// network partitioned. Addresses are arbitrary non-empty strings.
//
// A connection's source is the addresses its dialing transport listens on,
// so give each simulated node one transport, for its Server and its Client
// both. A transport that listens nowhere dials from an anonymous address that
// no fault applies to, like a test harness outside the cluster.
type MemNetwork struct {
	mu        sync.Mutex
	listeners map[string]*memListener
	down      map[string]bool
	group     map[string]int // partition group of each address named in Partition; nil when healed
	pairs     map[*memPair]struct{}
	anon      int // numbers the anonymous source addresses
}

// NewMemNetwork returns an empty network.
func NewMemNetwork() *MemNetwork {
	return &MemNetwork{
		listeners: make(map[string]*memListener),
		down:      make(map[string]bool),
		pairs:     make(map[*memPair]struct{}),
	}
}

// Transport returns a new transport on n. All transports of one network can
// reach each other, faults aside.
func (n *MemNetwork) Transport() Transport { return &memTransport{net: n} }

// SetDown takes addr down (down=true) or brings it back. While it is down,
// dials to it and from it fail at once, as if its cable were pulled, and the
// connections it had are closed at both ends. Its listeners stay, so the node
// serves again once it is back up.
func (n *MemNetwork) SetDown(addr string, down bool) {
	n.mu.Lock()
	if down {
		n.down[addr] = true
	} else {
		delete(n.down, addr)
	}
	n.mu.Unlock()
	n.closeCut()
}

// Partition splits the network: an address named in one group cannot reach
// an address named in another, and the connections between them are closed.
// Addresses named in no group are unaffected. It replaces any earlier
// partition.
func (n *MemNetwork) Partition(groups ...[]string) {
	n.mu.Lock()
	n.group = make(map[string]int)
	for i, g := range groups {
		for _, addr := range g {
			n.group[addr] = i
		}
	}
	n.mu.Unlock()
	n.closeCut()
}

// Heal removes the partition.
func (n *MemNetwork) Heal() {
	n.mu.Lock()
	n.group = nil
	n.mu.Unlock()
}

// closeCut closes the connections that the faults now in force cut.
func (n *MemNetwork) closeCut() {
	var cut []*memPair
	n.mu.Lock()
	for p := range n.pairs {
		if n.cutLocked(p.from, p.to) != nil {
			cut = append(cut, p)
			delete(n.pairs, p)
		}
	}
	n.mu.Unlock()
	for _, p := range cut { // outside n.mu: closing a conn takes it
		p.client.Close()
		p.server.Close()
	}
}

// cutLocked returns why a dialer listening on from cannot reach to, or nil.
func (n *MemNetwork) cutLocked(from []string, to string) error {
	if n.down[to] {
		return errors.New("host is down")
	}
	for _, f := range from {
		if n.down[f] {
			return fmt.Errorf("local address %s is down", f)
		}
		gf, okf := n.group[f]
		gt, okt := n.group[to]
		if okf && okt && gf != gt {
			return errors.New("network is partitioned")
		}
	}
	return nil
}

func (n *MemNetwork) forget(p *memPair) {
	n.mu.Lock()
	delete(n.pairs, p)
	n.mu.Unlock()
}

// memTransport is one node's view of a MemNetwork.
type memTransport struct {
	net   *MemNetwork
	addrs []string // where it listens; guarded by net.mu
}

// memBacklog bounds the connections a listener holds that it has not yet
// accepted; dials past it are refused, as a full TCP backlog would.
const memBacklog = 4096

func (t *memTransport) Listen(addr string) (net.Listener, error) {
	n := t.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if addr == "" {
		return nil, &net.OpError{Op: "listen", Net: "mem", Err: errors.New("empty address")}
	}
	if n.listeners[addr] != nil {
		return nil, &net.OpError{Op: "listen", Net: "mem", Addr: memAddr(addr), Err: errors.New("address already in use")}
	}
	l := &memListener{t: t, addr: addr, ready: make(chan struct{}, 1), done: make(chan struct{})}
	n.listeners[addr] = l
	t.addrs = append(t.addrs, addr)
	return l, nil
}

func (t *memTransport) Dial(ctx context.Context, addr string) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n := t.net
	n.mu.Lock()
	defer n.mu.Unlock()
	fail := func(err error) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: "mem", Addr: memAddr(addr), Err: err}
	}
	if err := n.cutLocked(t.addrs, addr); err != nil {
		return fail(err)
	}
	l := n.listeners[addr]
	if l == nil {
		return fail(errors.New("connection refused"))
	}
	var src string
	if len(t.addrs) > 0 {
		src = t.addrs[0]
	} else {
		n.anon++
		src = fmt.Sprintf("anonymous-%d", n.anon)
	}
	p := newMemPair(n, slices.Clone(t.addrs), src, addr)
	if !l.enqueue(p.server) {
		return fail(errors.New("connection refused: backlog full"))
	}
	n.pairs[p] = struct{}{}
	return p.client, nil
}

// memListener hands out the server ends of the pairs dialed to it.
type memListener struct {
	t     *memTransport
	addr  string
	mu    sync.Mutex
	queue []*memConn    // dialed, not yet accepted
	ready chan struct{} // poked when queue grows
	done  chan struct{} // closed by Close
	shut  bool
}

func (l *memListener) enqueue(c *memConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shut || len(l.queue) >= memBacklog {
		return false
	}
	l.queue = append(l.queue, c)
	poke(l.ready)
	return true
}

func (l *memListener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		if l.shut {
			l.mu.Unlock()
			return nil, net.ErrClosed
		}
		if len(l.queue) > 0 {
			c := l.queue[0]
			l.queue = l.queue[1:]
			if len(l.queue) > 0 {
				poke(l.ready) // for another Accept
			}
			l.mu.Unlock()
			return c, nil
		}
		l.mu.Unlock()
		select {
		case <-l.ready:
		case <-l.done:
		}
	}
}

// Close stops the listener and refuses the connections it had not accepted.
// Connections it accepted stay open.
func (l *memListener) Close() error {
	n := l.t.net
	n.mu.Lock()
	if n.listeners[l.addr] == l {
		delete(n.listeners, l.addr)
		l.t.addrs = slices.DeleteFunc(l.t.addrs, func(a string) bool { return a == l.addr })
	}
	n.mu.Unlock()

	l.mu.Lock()
	if l.shut {
		l.mu.Unlock()
		return net.ErrClosed
	}
	l.shut = true
	queued := l.queue
	l.queue = nil
	close(l.done)
	l.mu.Unlock()
	for _, c := range queued {
		c.Close()
	}
	return nil
}

func (l *memListener) Addr() net.Addr { return memAddr(l.addr) }

// memAddr is an address on a MemNetwork.
type memAddr string

func (memAddr) Network() string  { return "mem" }
func (a memAddr) String() string { return string(a) }

// memPair is one connection: the dialer's end and the listener's end.
type memPair struct {
	from           []string // addresses the dialing transport listened on
	to             string
	client, server *memConn
}

func newMemPair(n *MemNetwork, from []string, src, dst string) *memPair {
	up, down := newPipe(), newPipe()
	p := &memPair{from: from, to: dst}
	p.client = newMemConn(n, p, memAddr(src), memAddr(dst), down, up)
	p.server = newMemConn(n, p, memAddr(dst), memAddr(src), up, down)
	return p
}

// memConn is one end of a memPair. Unlike net.Pipe, each direction buffers
// up to memPipeSize bytes, so a writer does not wait for the reader to take
// every write, as with a socket.
type memConn struct {
	net           *MemNetwork
	pair          *memPair
	local, remote memAddr
	rx, tx        *pipe
	rd, wd        deadline
	done          chan struct{} // closed by Close
	once          sync.Once
}

func newMemConn(n *MemNetwork, p *memPair, local, remote memAddr, rx, tx *pipe) *memConn {
	return &memConn{net: n, pair: p, local: local, remote: remote, rx: rx, tx: tx,
		rd: newDeadline(), wd: newDeadline(), done: make(chan struct{})}
}

func (c *memConn) Read(b []byte) (int, error) {
	for {
		if err := c.usable(&c.rd); err != nil {
			return 0, c.opErr("read", err)
		}
		n, wait, err := c.rx.read(b)
		if !wait {
			return n, err
		}
		select {
		case <-c.rx.readable:
		case <-c.done:
		case <-c.rd.wait():
		}
	}
}

func (c *memConn) Write(b []byte) (int, error) {
	written := 0
	for {
		if err := c.usable(&c.wd); err != nil {
			return written, c.opErr("write", err)
		}
		n, err := c.tx.write(b[written:])
		written += n
		if err != nil {
			return written, c.opErr("write", err)
		}
		if written == len(b) {
			return written, nil
		}
		select {
		case <-c.tx.writable:
		case <-c.done:
		case <-c.wd.wait():
		}
	}
}

// usable reports whether c is closed or d has passed.
func (c *memConn) usable(d *deadline) error {
	select {
	case <-c.done:
		return net.ErrClosed
	case <-d.wait():
		return os.ErrDeadlineExceeded
	default:
		return nil
	}
}

func (c *memConn) opErr(op string, err error) error {
	return &net.OpError{Op: op, Net: "mem", Source: c.local, Addr: c.remote, Err: err}
}

// Close closes this end: the peer reads what was already written, then EOF;
// its writes fail.
func (c *memConn) Close() error {
	c.once.Do(func() {
		close(c.done)
		c.tx.closeWrite()
		c.rx.closeRead()
		c.net.forget(c.pair)
	})
	return nil
}

func (c *memConn) LocalAddr() net.Addr  { return c.local }
func (c *memConn) RemoteAddr() net.Addr { return c.remote }

func (c *memConn) SetDeadline(t time.Time) error {
	c.rd.set(t)
	c.wd.set(t)
	return nil
}

func (c *memConn) SetReadDeadline(t time.Time) error {
	c.rd.set(t)
	return nil
}

func (c *memConn) SetWriteDeadline(t time.Time) error {
	c.wd.set(t)
	return nil
}

// memPipeSize is how many unread bytes one direction of a memConn holds
// before its writer waits, as a socket buffer would.
const memPipeSize = 64 << 10

// pipe is one direction of a memConn.
type pipe struct {
	mu       sync.Mutex
	buf      []byte // the unread bytes are buf[r:]
	r        int
	eof      bool          // the writer closed: reads drain buf, then get io.EOF
	broken   bool          // the reader closed: writes fail
	readable chan struct{} // poked when bytes arrive or eof is set
	writable chan struct{} // poked when room appears or broken is set
}

func newPipe() *pipe {
	return &pipe{readable: make(chan struct{}, 1), writable: make(chan struct{}, 1)}
}

// read copies unread bytes into b. wait is true when there are none yet.
func (p *pipe) read(b []byte) (n int, wait bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.r == len(p.buf) {
		if p.eof {
			return 0, false, io.EOF
		}
		return 0, true, nil
	}
	n = copy(b, p.buf[p.r:])
	p.r += n
	if p.r == len(p.buf) {
		// Drained: start over, and let go of a large buffer so that
		// thousands of idle connections hold little memory.
		p.r = 0
		p.buf = p.buf[:0]
		if cap(p.buf) > 4<<10 {
			p.buf = nil
		}
	} else {
		poke(p.readable) // for another reader
	}
	poke(p.writable)
	return n, false, nil
}

// write buffers as much of b as there is room for; 0 means wait for room.
func (p *pipe) write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.broken {
		return 0, errors.New("broken pipe")
	}
	n := min(len(b), memPipeSize-(len(p.buf)-p.r))
	if n <= 0 {
		return 0, nil
	}
	if p.r > 0 && len(p.buf)+n > cap(p.buf) {
		p.buf = p.buf[:copy(p.buf, p.buf[p.r:])] // reuse the read part
		p.r = 0
	}
	p.buf = append(p.buf, b[:n]...)
	poke(p.readable)
	return n, nil
}

func (p *pipe) closeWrite() {
	p.mu.Lock()
	p.eof = true
	p.mu.Unlock()
	poke(p.readable)
}

func (p *pipe) closeRead() {
	p.mu.Lock()
	p.broken = true
	p.buf, p.r = nil, 0
	p.mu.Unlock()
	poke(p.writable)
}

// poke signals ch without blocking; ch has room for one signal, and its
// receivers check the state again after waking.
func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// deadline is a settable deadline that can be waited on, as net.Conn
// deadlines need: wait's channel is closed once the deadline passes.
type deadline struct {
	mu    sync.Mutex
	timer *time.Timer
	armed bool // timer is set and may fire
	ch    chan struct{}
}

func newDeadline() deadline { return deadline{ch: make(chan struct{})} }

func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	// A non-nil timer closes the current ch if it fires; armed says it may.
	if d.armed && !d.timer.Stop() {
		<-d.ch // it fired: wait until its func closed ch
	}
	d.armed = false
	if isClosed(d.ch) {
		d.ch = make(chan struct{})
		d.timer = nil
	}
	if t.IsZero() {
		return // the stopped timer is kept for the next deadline
	}
	dur := time.Until(t)
	switch {
	case dur <= 0:
		close(d.ch)
		d.timer = nil
		return
	case d.timer != nil:
		d.timer.Reset(dur) // cheaper than a new timer per write
	default:
		ch := d.ch
		d.timer = time.AfterFunc(dur, func() { close(ch) })
	}
	d.armed = true
}

func (d *deadline) wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ch
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
