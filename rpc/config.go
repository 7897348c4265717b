package rpc

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/tsdht/tsdht/clusterkey"
)

// ProtocolVersion is the wire protocol this package speaks. It is exchanged
// in the handshake; bump it when a change would confuse an older peer.
const ProtocolVersion = 2

// minProtocolVersion is the oldest protocol version this package still speaks.
const minProtocolVersion = 1

// defaultCallTimeout bounds a Call whose context has no deadline: no call may
// wait forever on a peer that stopped answering.
const defaultCallTimeout = 10 * time.Second

// Config tunes a Client or a Server. Zero fields take the values of
// DefaultConfig, except ClusterKey, where nil means none.
type Config struct {
	// MaxFrameSize is the largest frame payload, in bytes, that is sent or
	// accepted. A received frame's declared length is checked against it
	// before its buffer is allocated, so a hostile length costs nothing; the
	// connection that sent it is closed. Default 4 MiB: with 64 requests in
	// flight per connection, a 512 MB board cannot afford larger.
	MaxFrameSize int

	// HandshakeTimeout bounds the version handshake on a new connection, so a
	// peer that connects and says nothing does not hold a goroutine. Default 5s.
	HandshakeTimeout time.Duration

	// MaxInflightPerConn is how many requests of one connection a Server runs
	// at once. When that many are running the server stops reading the
	// connection until one finishes, which pushes back on the sender through
	// TCP. Default 64.
	MaxInflightPerConn int

	// MaxInflightBytes bounds the request bytes a Server holds at once over all
	// its connections: frames being read and requests whose handlers run. A
	// frame is charged as its bytes arrive, not for the length it declares,
	// so a peer that declares a large frame and stalls holds one 64 KiB chunk
	// until FrameTimeout closes its connection. When the budget is spent,
	// connections are not read, and TCP pushes back on the senders.
	// MaxFrameSize of it is kept so that one frame at a time, in arrival
	// order, can always complete (see byteBudget). Without it, many
	// connections × MaxInflightPerConn × MaxFrameSize could ask a board for
	// gigabytes. Default 64 MiB; never below MaxFrameSize, so that any single
	// valid frame can be read.
	MaxInflightBytes int

	// MaxInflightBytesPerConn bounds the request bytes one connection holds
	// in a Server at once, out of MaxInflightBytes, so that a single peer
	// cannot take the whole budget. Default a quarter of MaxInflightBytes;
	// never below MaxFrameSize nor above MaxInflightBytes.
	MaxInflightBytesPerConn int

	// FrameTimeout bounds how long a Server waits for one frame's bytes once
	// its first byte arrived; time spent waiting for the byte budget does not
	// count. A frame that is not complete by then (a stalled or trickling
	// sender) closes its connection and gives its bytes back to the budget.
	// Default 15s: a 4 MiB frame needs a little over 2 Mbit/s.
	FrameTimeout time.Duration

	// MaxConns caps a Server's inbound connections, those still in their
	// handshake included. A connection that arrives at the cap takes the
	// place of the one idle the longest (a client reconnects transparently
	// when it next calls; a connection still in its handshake counts as idle
	// since it was accepted, and one part-way through a frame since its last
	// byte arrived, so silent and stalled ones go first; one answered in the
	// last second, or in its handshake for less than 100 ms, only when no
	// other is left, and of those one that answered 8 requests or more
	// last); if every connection runs a request, it is refused.
	// Default 256.
	MaxConns int

	// ServerIdleTimeout closes a Server's connection that carried no request
	// for this long; its client reconnects when it next calls, without an
	// error. Default 5m, longer than a Client's IdleTimeout so that clients
	// normally close first.
	ServerIdleTimeout time.Duration

	// ClusterKey is the cluster's key ring (clusterkey.Load reads a
	// --cluster-key-file). With one, every connection proves in its
	// handshake, both ways, that it holds a key the other side accepts
	// before any request is read, and a peer without one is refused with
	// ErrClusterKey. The first key is spoken; all are accepted. Nil: no
	// key, and the port is open to anyone who reaches it.
	ClusterKey clusterkey.Ring

	// DialTimeout bounds connecting to a peer, handshake excluded. Default 3s.
	DialTimeout time.Duration

	// WriteTimeout bounds writing one frame. A peer that does not take a
	// frame within it has stopped reading, and its connection is closed.
	// The deadline is moved forward only once half of it is used, so a write
	// has between WriteTimeout/2 and WriteTimeout. Default 10s.
	WriteTimeout time.Duration

	// IdleTimeout closes a Client's connection after it carried no call for
	// this long. Default 2m.
	IdleTimeout time.Duration

	// Logger receives connection-level problems (refused handshakes, bad
	// frames) at Warn and handler panics at Error. Nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns the defaults, sized for a small cluster of boards
// with 512 MB of RAM on a LAN.
func DefaultConfig() Config {
	return Config{
		MaxFrameSize:       4 << 20,
		HandshakeTimeout:   5 * time.Second,
		MaxInflightPerConn: 64,
		MaxInflightBytes:   64 << 20,
		DialTimeout:        3 * time.Second,
		WriteTimeout:       10 * time.Second,
		IdleTimeout:        2 * time.Minute,

		MaxInflightBytesPerConn: 16 << 20,
		FrameTimeout:            15 * time.Second,
		MaxConns:                256,
		ServerIdleTimeout:       5 * time.Minute,
	}
}

// Validate reports a configuration that cannot work. Zero fields are valid: they
// take the defaults. NewClient and NewServer, which cannot fail, treat a negative
// field as zero.
func (c Config) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"max frame size", int64(c.MaxFrameSize)}, {"handshake timeout", int64(c.HandshakeTimeout)},
		{"max in-flight requests per connection", int64(c.MaxInflightPerConn)},
		{"max in-flight bytes", int64(c.MaxInflightBytes)}, {"dial timeout", int64(c.DialTimeout)},
		{"write timeout", int64(c.WriteTimeout)}, {"idle timeout", int64(c.IdleTimeout)},
		{"max in-flight bytes per connection", int64(c.MaxInflightBytesPerConn)},
		{"frame timeout", int64(c.FrameTimeout)}, {"max connections", int64(c.MaxConns)},
		{"server idle timeout", int64(c.ServerIdleTimeout)},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s %d: must not be negative (0 takes the default)", f.name, f.v))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("rpc: config: %w", err)
	}
	return nil
}

// withDefaults returns c with its zero (or negative) fields replaced by the
// defaults.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxFrameSize <= 0 {
		c.MaxFrameSize = d.MaxFrameSize
	}
	if c.MaxFrameSize > math.MaxInt32 {
		// Frame lengths are uint32; capping at MaxInt32 also keeps every
		// length a valid int on 32-bit ARM.
		c.MaxFrameSize = math.MaxInt32
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = d.HandshakeTimeout
	}
	if c.MaxInflightPerConn <= 0 {
		c.MaxInflightPerConn = d.MaxInflightPerConn
	}
	if c.MaxInflightBytes <= 0 {
		c.MaxInflightBytes = d.MaxInflightBytes
	}
	c.MaxInflightBytes = max(c.MaxInflightBytes, c.MaxFrameSize)
	if c.MaxInflightBytesPerConn <= 0 {
		c.MaxInflightBytesPerConn = c.MaxInflightBytes / 4
	}
	c.MaxInflightBytesPerConn = min(max(c.MaxInflightBytesPerConn, c.MaxFrameSize), c.MaxInflightBytes)
	if c.FrameTimeout <= 0 {
		c.FrameTimeout = d.FrameTimeout
	}
	if c.MaxConns <= 0 {
		c.MaxConns = d.MaxConns
	}
	if c.ServerIdleTimeout <= 0 {
		c.ServerIdleTimeout = d.ServerIdleTimeout
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = d.DialTimeout
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = d.WriteTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = d.IdleTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}
