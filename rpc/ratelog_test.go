package rpc

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

// A flood of bad connections is logged as a burst of lines and then counted, not a
// line per connection; the next line let through says how many were held back.
func TestDroppedConnectionsLogABurstThenCount(t *testing.T) {
	var logs logBuffer
	cfg := DefaultConfig()
	cfg.HandshakeTimeout = 100 * time.Millisecond
	cfg.Logger = logs.logger()
	_, addr := startServer(t, NewTCPTransport(), "127.0.0.1:0", cfg, map[string]HandlerFunc{"echo": echo})
	const flood = 3 * dropLogBurst
	for range flood {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write([]byte("not a hello at all")) // refused at the handshake
		expectClosed(t, conn)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool {
		return strings.Count(logs.String(), `msg="rpc: refused connection"`) >= dropLogBurst
	}, "the burst of refusal lines")
	if n := strings.Count(logs.String(), `msg="rpc: refused connection"`); n != dropLogBurst {
		t.Fatalf("%d bad connections made %d log lines, want the burst of %d", flood, n, dropLogBurst)
	}
	// The window's end lets the next one through with the count of those held back.
	var r rateLog
	var lb logBuffer
	l := lb.logger()
	for range 5 {
		r.warnBurst(l, 2, "x")
	}
	r.mu.Lock()
	r.start = r.start.Add(-rateLogEvery)
	r.mu.Unlock()
	r.warnBurst(l, 2, "x")
	if got := lb.String(); strings.Count(got, "msg=x") != 3 || !strings.Contains(got, "suppressed=3") {
		t.Fatalf("log after a window:\n%s", got)
	}
}
