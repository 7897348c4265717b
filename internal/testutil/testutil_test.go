package testutil

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeT records a failure instead of ending the test, so that the failure paths can
// be checked.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
}

func TestWaitForReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	f := &fakeT{TB: t}
	WaitFor(f, time.Minute, func() bool { calls++; return calls == 5 }, "the fifth call")
	if f.failed != "" || calls != 5 {
		t.Fatalf("failed %q after %d calls; want no failure after 5", f.failed, calls)
	}
}

func TestWaitForNamesWhatItWaitedFor(t *testing.T) {
	f := &fakeT{TB: t}
	calls := 0
	start := time.Now()
	WaitFor(f, 30*time.Millisecond, func() bool { calls++; return false }, "node %d", 7)
	if took := time.Since(start); took < 30*time.Millisecond || took > 5*time.Second {
		t.Errorf("gave up after %v; want about 30ms", took)
	}
	if want := "timed out after 30ms waiting for node 7"; f.failed != want {
		t.Errorf("failure %q, want %q", f.failed, want)
	}
	// It polls more than once, and does not spin: the pause grows.
	if calls < 3 || calls > 30 {
		t.Errorf("cond called %d times in 30ms; want a few, backing off", calls)
	}
}

func TestWaitNoErrorReportsTheLastError(t *testing.T) {
	f := &fakeT{TB: t}
	n := 0
	WaitNoError(f, 20*time.Millisecond, func() error { n++; return fmt.Errorf("attempt %d refused", n) }, "the server")
	if want := fmt.Sprintf("waiting for the server; last error: attempt %d refused", n); !strings.HasSuffix(f.failed, want) {
		t.Errorf("failure %q does not end with %q", f.failed, want)
	}
	f = &fakeT{TB: t}
	n = 0
	WaitNoError(f, time.Minute, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	}, "the third try")
	if f.failed != "" || n != 3 {
		t.Errorf("failed %q after %d tries; want success at 3", f.failed, n)
	}
}

func TestPollTriesOnceMoreAfterTheDeadline(t *testing.T) {
	if Poll(0, func() bool { return false }) {
		t.Fatal("Poll reported a condition that never held")
	}
	// A condition that comes true only once the deadline has passed is still seen.
	start := time.Now()
	if !Poll(20*time.Millisecond, func() bool { return time.Since(start) > 20*time.Millisecond }) {
		t.Fatal("Poll gave up without calling cond after its deadline")
	}
}

func TestFreeAddrBindsTCPAndUDP(t *testing.T) {
	lo, hi := belowEphemeral()
	seen := map[string]bool{}
	for range 20 {
		a := FreeAddr(t)
		if seen[a] {
			t.Fatalf("FreeAddr gave %s twice", a)
		}
		seen[a] = true
		_, port, _ := net.SplitHostPort(a)
		if p, _ := strconv.Atoi(port); p < lo || p >= hi {
			t.Fatalf("port %d outside [%d, %d), below the ephemeral range", p, lo, hi)
		}
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("TCP on %s: %v", a, err)
		}
		u, err := net.ListenPacket("udp", a)
		l.Close()
		if err != nil {
			t.Fatalf("UDP on %s: %v", a, err)
		}
		u.Close()
	}
}

func TestAliveInCountsAliveRows(t *testing.T) {
	status := "NODE ID\tRPC\tSTATE\tSHARDS\n" +
		"aaaa 127.0.0.1:1 alive 3\n" +
		"bbbb 127.0.0.1:2 suspect 1\n" +
		"cccc 127.0.0.1:3 alive 0\n" +
		"alive\n"
	if n := AliveIn(status); n != 2 {
		t.Fatalf("AliveIn = %d, want 2", n)
	}
}

func TestRunCmdReturnsTheExitCode(t *testing.T) {
	out, errOut, code := RunCmd(t, exec.Command("sh", "-c", "cat; echo oops >&2; exit 3"), "in")
	if out != "in" || errOut != "oops\n" || code != 3 {
		t.Fatalf("got %q %q %d", out, errOut, code)
	}
}

// TestClusterStartsKillsAndRestarts runs real nodes: they see each other, a killed
// node is seen gone, and a restarted one comes back as itself, on its data.
func TestClusterStartsKillsAndRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds tsdht and starts real node processes")
	}
	c := StartCluster(t, 2, "--rf", "2")
	id := func() string {
		out, errOut, code := c.Run("", "status", "--cluster", c.Nodes[1].RPC, "--json")
		if code != 0 {
			t.Fatalf("status: exit %d: %s", code, errOut)
		}
		return out
	}
	before := id()
	if !strings.Contains(before, c.Nodes[0].RPC) || !strings.Contains(before, c.Nodes[1].RPC) {
		t.Fatalf("status does not list both nodes:\n%s", before)
	}
	c.Kill(1)
	if c.Nodes[1].Running() {
		t.Fatal("a killed node still counts as running")
	}
	c.WaitAlive(1, time.Minute)
	c.Start(1)
	c.WaitAlive(2, time.Minute)
	if !strings.Contains(c.Nodes[1].Log(), "---- start") || strings.Count(c.Nodes[1].Log(), "---- start") != 2 {
		t.Errorf("node 1's log does not hold both runs:\n%s", c.Nodes[1].Log())
	}
}

func TestMain(m *testing.M) { Main(m) }

func TestSameJSON(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{`{"a":[1,"x",null]}`, `{"a":[1.0000000000001,"x",null]}`, true},
		{`{"a":[1,"x"]}`, `{"a":[1.001,"x"]}`, false},
		{`{"a":1}`, `{"a":1,"b":2}`, false},
		{`[1,2]`, `[1]`, false},
		{`{"a":"1"}`, `{"a":1}`, false},
	} {
		var a, b any
		if err := json.Unmarshal([]byte(c.a), &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(c.b), &b); err != nil {
			t.Fatal(err)
		}
		if got := SameJSON(a, b); got != c.same {
			t.Errorf("SameJSON(%s, %s) = %v, want %v", c.a, c.b, got, c.same)
		}
	}
}

func TestListenIsClosedWhenTheTestEnds(t *testing.T) {
	var addr string
	t.Run("inner", func(t *testing.T) {
		l := Listen(t)
		addr = l.Addr().String()
		if !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Fatalf("listening on %s, want loopback", addr)
		}
	})
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("%s still accepts after its test ended", addr)
	}
}

func TestWaitHTTPWaitsFor2xx(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	WaitHTTP(t, srv.URL, time.Minute)
	if n := calls.Load(); n != 3 {
		t.Fatalf("WaitHTTP returned after %d requests; the third was the first 2xx", n)
	}
	f := &fakeT{TB: t}
	WaitHTTP(f, srv.URL+"/", 0)
	if f.failed != "" {
		t.Fatalf("a server answering 200 failed: %s", f.failed)
	}
	down := "http://" + FreeAddr(t)
	WaitHTTP(f, down, 10*time.Millisecond)
	if !strings.Contains(f.failed, down) || !strings.Contains(f.failed, "connection refused") {
		t.Fatalf("failure %q does not name the address and the refusal", f.failed)
	}
}
