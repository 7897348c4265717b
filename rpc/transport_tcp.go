package rpc

import (
	"context"
	"net"
	"time"
)

// keepAlive makes the kernel notice a peer that vanished without closing its
// connections (a board that lost power): about 15s idle, then 3 probes 5s
// apart, so a dead peer's connection fails within ~30s instead of hours.
var keepAlive = net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3}

// TCPTransport makes TCP connections with TCP_NODELAY (small requests must
// not wait for Nagle's algorithm) and keepalive set. The zero value is ready
// to use.
type TCPTransport struct{}

// NewTCPTransport returns a TCPTransport.
func NewTCPTransport() *TCPTransport { return &TCPTransport{} }

// Listen listens on the TCP address addr; ":0" picks a free port.
func (*TCPTransport) Listen(addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAliveConfig: keepAlive}
	l, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, err
	}
	return tcpListener{l}, nil
}

// Dial connects to the TCP address addr.
func (*TCPTransport) Dial(ctx context.Context, addr string) (net.Conn, error) {
	d := net.Dialer{KeepAliveConfig: keepAlive}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if err := setNoDelay(conn); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// tcpListener sets TCP_NODELAY on the connections it accepts.
type tcpListener struct{ net.Listener }

func (l tcpListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if setNoDelay(conn) == nil {
			return conn, nil
		}
		conn.Close() // the peer is already gone; wait for the next one
	}
}

// setNoDelay states TCP_NODELAY explicitly: Go sets it by default today, and
// the latency of every small call depends on it.
func setNoDelay(conn net.Conn) error {
	if tc, ok := conn.(*net.TCPConn); ok {
		return tc.SetNoDelay(true)
	}
	return nil
}
