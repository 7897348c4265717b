package rpc

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

// TestReapKeepsOldestIdle: at MaxConns a flood of new connections reaps the
// idle ones oldest first, one per new connection, and a scan of every
// connection serves the next reapKeep accepts too.
func TestReapKeepsOldestIdle(t *testing.T) {
	defer func(d time.Duration) { reapKeepFor = d }(reapKeepFor)
	reapKeepFor = time.Minute // the scan's kept connections serve the whole test
	cfg := DefaultConfig()
	cfg.MaxConns = 32
	cfg.HandshakeTimeout = time.Minute
	s, addr := startServer(t, NewTCPTransport(), "127.0.0.1:0", cfg, nil)
	counts := func() (live, scans int) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.live, s.reapScans
	}
	var oldConns []net.Conn
	for range 32 { // silent: in their handshake, idle since they were accepted
		oldConns = append(oldConns, rawConn(t, addr))
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { live, _ := counts(); return live == 32 }, "32 connections accepted")
	accepted := time.Now()
	testutil.WaitFor(t, 5*time.Second, func() bool { return time.Since(accepted) > 2*handshakeGrace }, "the handshake grace to pass")
	for range 16 {
		rawConn(t, addr)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.conns) == 32 && s.reapScans > 0
	}, "16 more accepted")
	for i, conn := range oldConns {
		if i < 16 {
			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		} else {
			conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		}
		_, err := conn.Read(make([]byte, 64))
		timedOut := errors.Is(err, os.ErrDeadlineExceeded)
		switch {
		case i < 16 && timedOut:
			t.Errorf("connection %d of the first 16 (the oldest idle) was not reaped", i)
		case i >= 16 && !timedOut:
			t.Errorf("connection %d of the last 16 was closed (%v) while older idle ones were left", i, err)
		}
	}
	if _, scans := counts(); scans != 1 {
		t.Errorf("%d scans of every connection for 16 reaps, want 1 (the others from the %d it kept)", scans, reapKeep)
	}
}

// TestReapClass: which connections the reaper counts as live. A connection
// through its handshake that has not sent its first request yet is live for
// handshakeGrace from the handshake's end, as one in its handshake is from its
// accept, so that a flood cannot take an honest client between its handshake
// and its first call (TestConnCap once saw that: "request not sent").
func TestReapClass(t *testing.T) {
	now := time.Now()
	ago := func(d time.Duration) int64 { return now.Add(-d).UnixNano() }
	for _, c := range []struct {
		name                   string
		handshaking            bool
		accepted, active, sent time.Duration // how long ago; sent < 0: never answered
		answered               int64
		want                   int
	}{
		{"in its handshake, just accepted", true, time.Millisecond, 0, -1, 0, reapLive},
		{"in its handshake past the grace", true, 2 * handshakeGrace, 0, -1, 0, reapIdle},
		{"handshake done just now, no request yet", false, 2 * handshakeGrace, time.Millisecond, -1, 0, reapLive},
		{"handshake done past the grace, no request yet", false, 4 * handshakeGrace, 2 * handshakeGrace, -1, 0, reapIdle},
		{"answered just now", false, time.Hour, time.Millisecond, time.Millisecond, 1, reapLive},
		{"answered many, just now", false, time.Hour, time.Millisecond, time.Millisecond, settledCalls, reapSettled},
		{"answered long ago", false, time.Hour, 2 * reapGrace, 2 * reapGrace, settledCalls, reapIdle},
	} {
		sc := &serverConn{accepted: now.Add(-c.accepted), handshaking: c.handshaking}
		if !c.handshaking {
			sc.lastActive.Store(ago(c.active))
		}
		if c.sent >= 0 {
			sc.lastServed.Store(ago(c.sent))
		}
		sc.answered.Store(c.answered)
		if _, got := sc.reapClass(now); got != c.want {
			t.Errorf("%s: class %d, want %d", c.name, got, c.want)
		}
	}
}
