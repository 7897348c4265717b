package rpc

import (
	"context"
	"net"
)

// Transport is how connections are made: TCP in production (TCPTransport),
// in memory for simulations and fault injection (MemNetwork). Clients and
// servers only ever see net.Conn and net.Listener, so everything above the
// transport runs unchanged on either.
type Transport interface {
	// Listen starts accepting connections on addr.
	Listen(addr string) (net.Listener, error)
	// Dial connects to addr, giving up when ctx is done.
	Dial(ctx context.Context, addr string) (net.Conn, error)
}
