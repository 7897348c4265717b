package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BinaryEnv names the variable that points the tests at a tsdht binary built
// elsewhere; make test-arm sets it to a wrapper running the ARMv7 build under qemu.
const BinaryEnv = "TSDHT_TEST_BINARY"

const tsdhtPackage = "github.com/tsdht/tsdht/cmd/tsdht"

var built struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// Binary returns the tsdht binary the end-to-end tests run: $TSDHT_TEST_BINARY when
// set, else a build of cmd/tsdht made once per test binary. A package whose tests
// call it removes that build with Main.
func Binary(t testing.TB) string {
	t.Helper()
	built.once.Do(func() {
		if bin := os.Getenv(BinaryEnv); bin != "" {
			built.path = bin
			return
		}
		built.dir, built.err = os.MkdirTemp("", "tsdht-test-bin-")
		if built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "tsdht")
		built.err = build(built.path)
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

// Build builds cmd/tsdht to out with extra go build flags (for example -ldflags), for
// a test that needs a binary unlike the one Binary shares.
func Build(t testing.TB, out string, flags ...string) {
	t.Helper()
	if err := build(out, flags...); err != nil {
		t.Fatal(err)
	}
}

func build(out string, flags ...string) error {
	args := append(append([]string{"build"}, flags...), "-o", out, tsdhtPackage)
	if b, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}

// Main runs the tests of a package that calls Binary, removes the binary Binary
// built, and exits with the tests' status. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// Proc is one `tsdht node` of a Cluster. Its addresses and data directory stay the
// same across restarts, so that a restarted node comes back as itself.
type Proc struct {
	RPC, Gossip string
	Data        string   // its --data directory (unknown, so empty, for StartCmd's)
	Join        string   // the gossip address it joins through; empty for the seed
	Args        []string // its own flags, after the cluster's
	Cmd         *exec.Cmd
	log         SyncBuffer // its stderr, over all its runs
	cmdline     []string   // set by StartCmd: the whole command line, used as it is
}

// Log returns what the node wrote to stderr over all its runs.
func (p *Proc) Log() string { return p.log.String() }

// Running reports whether the node was started and has not been waited for since.
func (p *Proc) Running() bool { return p.Cmd != nil && p.Cmd.ProcessState == nil }

// Cluster is a set of `tsdht node` processes on loopback, each after the first joining
// through the first. The test's cleanup stops what is still running and, when the
// test failed, logs what each node wrote.
type Cluster struct {
	T     testing.TB
	Bin   string
	Args  []string // flags every node gets
	Nodes []*Proc
	dir   string
}

// StartCluster starts n nodes with args and waits until every one sees n alive.
func StartCluster(t testing.TB, n int, args ...string) *Cluster {
	t.Helper()
	c := NewCluster(t, n, args...)
	c.StartAll()
	c.WaitAlive(n, time.Minute)
	return c
}

// NewCluster gives n nodes their addresses and data directories and starts none.
func NewCluster(t testing.TB, n int, args ...string) *Cluster {
	t.Helper()
	c := &Cluster{T: t, Bin: Binary(t), Args: args, dir: t.TempDir()}
	for range n {
		c.Add()
	}
	t.Cleanup(c.cleanup)
	return c
}

// Add gives one more node its addresses and data directory, joining through the
// first node, and returns it unstarted.
func (c *Cluster) Add(args ...string) *Proc {
	i := len(c.Nodes)
	p := &Proc{RPC: FreeAddr(c.T), Gossip: FreeAddr(c.T), Data: filepath.Join(c.dir, "n"+strconv.Itoa(i)), Args: args}
	if i > 0 {
		p.Join = c.Nodes[0].Gossip
	}
	c.Nodes = append(c.Nodes, p)
	return p
}

// Start starts node i, again on its data directory if it ran before.
func (c *Cluster) Start(i int) {
	c.T.Helper()
	p := c.Nodes[i]
	if p.Running() {
		c.T.Fatalf("node %d (%s) is already running", i, p.RPC)
	}
	args := p.cmdline
	if args == nil {
		args = []string{"node", "--rpc", p.RPC, "--gossip", p.Gossip, "--data", p.Data}
		if p.Join != "" {
			args = append(args, "--join", p.Join)
		}
		args = append(append(args, c.Args...), p.Args...)
	}
	fmt.Fprintf(&p.log, "---- start %v\n", args)
	p.Cmd = exec.Command(c.Bin, args...)
	p.Cmd.Stderr = &p.log
	if err := p.Cmd.Start(); err != nil {
		c.T.Fatalf("starting node %d: %v", i, err)
	}
}

// StartCmd starts one more node from a whole command line (the arguments after the
// binary, beginning with "node"), serving RPC on rpc and gossip on gossip, for a test
// that is given its command lines, as README's examples are. A restart runs it again.
func (c *Cluster) StartCmd(rpc, gossip string, args ...string) *Proc {
	c.T.Helper()
	p := &Proc{RPC: rpc, Gossip: gossip, cmdline: args}
	c.Nodes = append(c.Nodes, p)
	c.Start(len(c.Nodes) - 1)
	return p
}

// StartAll starts the first node and, once it answers, the others: a node exits when
// its seed is not there. It does not wait for them to see each other.
func (c *Cluster) StartAll() {
	c.T.Helper()
	c.Start(0)
	// A node emulated under qemu ($TSDHT_TEST_BINARY in make test-arm) takes far
	// longer to start than a native one.
	WaitFor(c.T, 2*time.Minute, func() bool {
		_, _, code := c.Run("", "status", "--cluster", c.Nodes[0].RPC, "--timeout", "2s")
		return code == 0 || !c.Nodes[0].Running()
	}, "node 0 (%s) to answer status", c.Nodes[0].RPC)
	for i := 1; i < len(c.Nodes); i++ {
		c.Start(i)
	}
}

// Run runs the tsdht CLI with stdin and returns its stdout, stderr and exit code.
func (c *Cluster) Run(stdin string, args ...string) (stdout, stderr string, code int) {
	c.T.Helper()
	return RunCmd(c.T, exec.Command(c.Bin, args...), stdin)
}

// WaitAlive waits until the status of every running node lists want alive members.
func (c *Cluster) WaitAlive(want int, within time.Duration) {
	c.T.Helper()
	deadline := time.Now().Add(within)
	for _, p := range c.Nodes {
		if !p.Running() {
			continue
		}
		var out string
		if !Poll(time.Until(deadline), func() bool {
			var code int
			out, _, code = c.Run("", "status", "--cluster", p.RPC, "--timeout", "2s")
			return code == 0 && AliveIn(out) == want
		}) {
			c.T.Fatalf("timed out after %v waiting for node %s to list %d alive members; its last status:\n%s", within, p.RPC, want, out)
		}
	}
}

// AliveIn counts the members a `tsdht status` table lists as alive.
func AliveIn(status string) int {
	n := 0
	for _, line := range strings.Split(status, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[2] == "alive" {
			n++
		}
	}
	return n
}

// Kill ends node i with SIGKILL, as a crash or a power cut would, and reaps it.
func (c *Cluster) Kill(i int) { c.KillAll(i) }

// KillAll ends the nodes given, or every running node when none is given, with
// SIGKILL sent to all before any is reaped: as close to "at once" as it gets.
func (c *Cluster) KillAll(which ...int) {
	if len(which) == 0 {
		for i := range c.Nodes {
			which = append(which, i)
		}
	}
	for _, i := range which {
		if p := c.Nodes[i]; p.Running() {
			p.Cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	for _, i := range which {
		if p := c.Nodes[i]; p.Running() {
			p.Cmd.Wait()
		}
	}
}

// logTail is how much of a node's log a failed test shows: the end, where the
// failure is.
const logTail = 64 << 10

func (c *Cluster) cleanup() {
	for i, p := range c.Nodes {
		if p.Running() {
			p.Cmd.Process.Signal(syscall.SIGTERM)
			p.Cmd.Wait()
		}
		if c.T.Failed() {
			log := p.Log()
			if len(log) > logTail {
				log = fmt.Sprintf("(%d bytes before)\n%s", len(log)-logTail, log[len(log)-logTail:])
			}
			c.T.Logf("node %d (%s) log:\n%s", i, p.RPC, log)
		}
	}
}
