package testutil

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// FreeAddr returns a 127.0.0.1 address whose port was free for both TCP and UDP a
// moment ago: a node's gossip needs both on one port, and a test that needs only
// one of them loses nothing.
//
// The port is searched below the kernel's ephemeral range. A port picked with ":0"
// comes from that range, and between the check and the real bind any outgoing
// connection on the machine (other test packages run at the same time) may take it
// as its source port, which makes a node fail at start with "address already in use".
func FreeAddr(t testing.TB) string {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

func freePort() (int, error) {
	lo, hi := belowEphemeral()
	for tries := 0; tries < 200; tries++ {
		port := lo + int(nextPort.Add(1))%(hi-lo)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		l.Close()
		if err == nil {
			u.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("no port in [%d, %d) is free for both TCP and UDP on 127.0.0.1; "+
		"look for leftover processes holding ports (ss -tulpn)", lo, hi)
}

// nextPort walks the search range from a random start, so that test processes running
// at the same time rarely try the same ports.
var nextPort = func() *atomic.Int64 {
	var n atomic.Int64
	n.Store(rand.Int64N(1 << 20))
	return &n
}()

// belowEphemeral returns the port range freePort searches: from 10000 up to the start
// of the ephemeral range in /proc/sys/net/ipv4/ip_local_port_range (32768 if unknown).
func belowEphemeral() (lo, hi int) {
	lo, hi = 10000, 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if start, err := strconv.Atoi(f[0]); err == nil && start > lo+1000 {
				hi = start
			}
		}
	}
	return lo, hi
}

// Listen returns a TCP listener on a free 127.0.0.1 port, closed when the test ends,
// for a test that plays the peer itself.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening on 127.0.0.1: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}
