// Package netyieldtest holds the probe that the tests of netyield and of its callers
// share: a goroutine that can become runnable only through the runtime's network
// poller, and that records how far the code under test had got when it ran.
package netyieldtest

import (
	"net"
	"sync/atomic"
	"testing"

	"github.com/tsdht/tsdht/internal/netyield"
)

// Probe is a connected pair of loopback TCP connections with a goroutine reading one
// end. Send writes a byte to the other end; the reader, once the runtime has polled the
// network and run it, records what progress returned at that moment.
type Probe struct {
	ln   net.Listener
	c, s net.Conn
	at   atomic.Int64
}

// NewProbe connects the pair and starts the reader, and returns once the reader is
// parked in the poller. progress is what the reader records; the probe is closed when
// the test ends.
func NewProbe(t testing.TB, progress func() int64) *Probe {
	t.Helper()
	p := &Probe{}
	var err error
	if p.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.ln.Close() })
	if p.c, err = net.Dial("tcp", p.ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.c.Close() })
	if p.s, err = p.ln.Accept(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.s.Close() })
	p.at.Store(-1)
	started := make(chan struct{})
	go func() {
		close(started)
		if _, err := p.s.Read(make([]byte, 1)); err == nil {
			p.at.Store(progress())
		}
	}()
	<-started
	netyield.Yield() // the reader reaches its Read and parks in the poller
	return p
}

// Send writes the byte that makes the reader runnable through the poller.
func (p *Probe) Send(t testing.TB) {
	t.Helper()
	if _, err := p.c.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
}

// RanAt is what progress returned when the reader ran: -1 if it has not run yet.
func (p *Probe) RanAt() int64 { return p.at.Load() }
