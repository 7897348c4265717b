package dht

import (
	"errors"
	"fmt"
	"log"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// gossipTransport is memberlist's network transport for a Node: UDP packets and TCP
// streams on one address, as memberlist's NetTransport, but a packet is read into one
// buffer the listener keeps and handed to memberlist as a copy of its own size.
// NetTransport allocates a fresh 64 KiB buffer for every packet it receives, and
// memberlist keeps that buffer as long as it keeps the message: for packets of a few
// hundred bytes that is most of what a busy node allocates, and on one ARM core the
// garbage collector's share of the CPU is latency.
//
// Addresses given to WriteTo are parsed without a resolver when they are literal
// IP:port (what memberlist gossips); a host name is resolved as NetTransport does.
type gossipTransport struct {
	tcp    *net.TCPListener
	udp    *net.UDPConn
	logger *log.Logger

	packetCh chan *memberlist.Packet
	streamCh chan net.Conn

	shutdown atomic.Bool
	done     chan struct{} // closed by Shutdown: a listener blocked handing over gives up
	wg       sync.WaitGroup
}

// gossipPacketMax is the largest UDP payload: the size of the listener's read
// buffer, so that no datagram is cut.
const gossipPacketMax = 64 << 10

// gossipRecvBuf is the socket receive buffer asked of the kernel (best effort), as
// NetTransport does: a burst of gossip is not dropped while memberlist is busy.
const gossipRecvBuf = 2 << 20

var _ memberlist.NodeAwareTransport = (*gossipTransport)(nil)

// newGossipTransport binds TCP and UDP on ip:port. With port 0 the kernel picks a
// port for TCP and UDP binds the same one; when another socket holds that UDP port it
// tries again with a new one, a few times.
func newGossipTransport(ip net.IP, port int, logger *log.Logger) (*gossipTransport, error) {
	tries := 1
	if port == 0 {
		tries = 10
	}
	var err error
	for range tries {
		var t *gossipTransport
		if t, err = bindGossip(ip, port, logger); err == nil {
			return t, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, err
}

func bindGossip(ip net.IP, port int, logger *log.Logger) (*gossipTransport, error) {
	tcp, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip, Port: port})
	if err != nil {
		return nil, fmt.Errorf("dht: gossip TCP listener on %s: %w", net.JoinHostPort(ip.String(), fmt.Sprint(port)), err)
	}
	port = tcp.Addr().(*net.TCPAddr).Port
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: ip, Port: port})
	if err != nil {
		tcp.Close()
		return nil, fmt.Errorf("dht: gossip UDP listener on %s: %w", net.JoinHostPort(ip.String(), fmt.Sprint(port)), err)
	}
	for size := gossipRecvBuf; size >= 64<<10; size /= 2 {
		if udp.SetReadBuffer(size) == nil {
			break
		}
	}
	t := &gossipTransport{
		tcp:      tcp,
		udp:      udp,
		logger:   logger,
		packetCh: make(chan *memberlist.Packet),
		streamCh: make(chan net.Conn),
		done:     make(chan struct{}),
	}
	t.wg.Add(2)
	go t.acceptLoop()
	go t.readLoop()
	return t, nil
}

// Port returns the port both listeners are bound to.
func (t *gossipTransport) Port() int { return t.tcp.Addr().(*net.TCPAddr).Port }

// FinalAdvertiseAddr implements memberlist.Transport: the address given, or the one
// bound when none is.
func (t *gossipTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if ip == "" {
		a := t.tcp.Addr().(*net.TCPAddr)
		if a.IP.IsUnspecified() {
			return nil, 0, errors.New("dht: gossip is bound to every interface: name the address to advertise")
		}
		return a.IP, a.Port, nil
	}
	addr := net.ParseIP(ip)
	if addr == nil {
		return nil, 0, fmt.Errorf("dht: gossip advertise address %q is not an IP address", ip)
	}
	if v4 := addr.To4(); v4 != nil {
		addr = v4
	}
	return addr, port, nil
}

// WriteTo implements memberlist.Transport.
func (t *gossipTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		_, err = t.udp.WriteToUDPAddrPort(b, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
		return time.Now(), err
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return time.Time{}, err
	}
	_, err = t.udp.WriteTo(b, ua)
	return time.Now(), err
}

// WriteToAddress implements memberlist.NodeAwareTransport.
func (t *gossipTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return t.WriteTo(b, a.Addr)
}

// PacketCh implements memberlist.Transport.
func (t *gossipTransport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

// DialTimeout implements memberlist.Transport.
func (t *gossipTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return d.Dial("tcp", addr)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (t *gossipTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(a.Addr, timeout)
}

// StreamCh implements memberlist.Transport.
func (t *gossipTransport) StreamCh() <-chan net.Conn { return t.streamCh }

// Shutdown implements memberlist.Transport: it closes both listeners and returns once
// their goroutines have ended. It may be called more than once.
func (t *gossipTransport) Shutdown() error {
	if t.shutdown.Swap(true) {
		t.wg.Wait()
		return nil
	}
	close(t.done)
	t.tcp.Close()
	t.udp.Close()
	t.wg.Wait()
	return nil
}

// acceptLoop hands accepted TCP connections to memberlist. After a failed accept
// it waits, doubling the wait up to a second, so that a persistent failure (out of
// descriptors) does not spin.
func (t *gossipTransport) acceptLoop() {
	defer t.wg.Done()
	var wait time.Duration
	for {
		conn, err := t.tcp.AcceptTCP()
		if err != nil {
			if t.shutdown.Load() {
				return
			}
			wait = min(max(2*wait, 5*time.Millisecond), time.Second)
			t.logger.Printf("[ERR] memberlist: accepting a TCP connection: %v", err)
			select {
			case <-time.After(wait):
			case <-t.done:
				return
			}
			continue
		}
		wait = 0
		select {
		case t.streamCh <- conn:
		case <-t.done:
			conn.Close()
			return
		}
	}
}

// readLoop reads datagrams into one buffer and hands memberlist a copy of each, of
// its own size: memberlist may keep a packet's bytes after it returns (messages
// queued for its handler), so the buffer itself is never handed out.
func (t *gossipTransport) readLoop() {
	defer t.wg.Done()
	buf := make([]byte, gossipPacketMax)
	for {
		n, addr, err := t.udp.ReadFromUDPAddrPort(buf)
		now := time.Now()
		if err != nil {
			if t.shutdown.Load() {
				return
			}
			t.logger.Printf("[ERR] memberlist: reading a UDP packet: %v", err)
			continue
		}
		if n < 1 {
			t.logger.Printf("[ERR] memberlist: UDP packet too short (%d bytes) from=%s", n, addr)
			continue
		}
		own := make([]byte, n)
		copy(own, buf)
		p := &memberlist.Packet{
			Buf:       own,
			From:      net.UDPAddrFromAddrPort(addr),
			Timestamp: now,
		}
		select {
		case t.packetCh <- p:
		case <-t.done:
			return
		}
	}
}
