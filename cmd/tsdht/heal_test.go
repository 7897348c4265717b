package main

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

// processIngest streams 1 s batches of 60 Hz points for several series through the live
// nodes of an e2e cluster with `tsdht put`, recording what was acknowledged.
type processIngest struct {
	c    *e2eCluster
	keys []string
	base int64

	mu      sync.Mutex
	live    []int              // nodes to send puts to
	acked   map[string][]point // exit 0 and "stored N points"
	tried   map[string][]point // everything sent
	paused  bool
	stop    chan struct{}
	done    chan struct{}
	batches int
}

func (in *processIngest) run() {
	defer close(in.done)
	for sec := 0; ; sec++ {
		select {
		case <-in.stop:
			return
		default:
		}
		in.mu.Lock()
		paused, live := in.paused, append([]int(nil), in.live...)
		in.mu.Unlock()
		if paused {
			time.Sleep(20 * time.Millisecond)
			sec--
			continue
		}
		for k, key := range in.keys {
			pts := pmuPoints(in.base+int64(sec)*int64(time.Second), 60)
			in.mu.Lock()
			in.tried[key] = append(in.tried[key], pts...)
			in.mu.Unlock()
			node := live[(sec+k)%len(live)]
			_, errOut, code := in.c.Run(csvOf(pts), "put", "--cluster", in.c.Nodes[node].RPC, "--series", key, "--timeout", "5s")
			if code == 0 && strings.Contains(errOut, "stored 60 points") {
				in.mu.Lock()
				in.acked[key] = append(in.acked[key], pts...)
				in.batches++
				in.mu.Unlock()
			}
		}
	}
}

func (in *processIngest) setPaused(p bool) {
	in.mu.Lock()
	in.paused = p
	in.mu.Unlock()
}

// waitBatches waits up to within for n acknowledged batches; the checks that follow
// say what is missing.
func (in *processIngest) waitBatches(n int, within time.Duration) {
	testutil.Poll(within, func() bool {
		in.mu.Lock()
		defer in.mu.Unlock()
		return in.batches >= n
	})
}

// checkAcked reads each series through node i: every acknowledged point is there, and
// every point there was written by some put (failed puts may land on some replicas).
// It returns the quanta (10 s) the series hold, i.e. how many pairs exist.
func (in *processIngest) checkAcked(t *testing.T, i int) int {
	t.Helper()
	in.mu.Lock()
	defer in.mu.Unlock()
	pairs := 0
	for _, key := range in.keys {
		tried := map[int64]float64{}
		for _, p := range in.tried[key] {
			tried[p.t] = p.v
		}
		// The range the writes covered: before failure detection a quantum nobody wrote
		// cannot be proven empty when two of its three replicas are down, and the read
		// would (rightly) fail rather than guess.
		end := in.tried[key][len(in.tried[key])-1].t + 1
		out, errOut, code := in.c.Run("", "get", "--cluster", in.c.Nodes[i].RPC, "--series", key,
			"--from", strconv.FormatInt(in.base, 10), "--to", strconv.FormatInt(end, 10))
		if code != 0 {
			t.Fatalf("get %s via node %d: %s", key, i, errOut)
		}
		got := map[int64]bool{}
		quanta := map[int64]bool{}
		for _, p := range parseCSV(t, out) {
			if v, ok := tried[p.t]; !ok || v != p.v {
				t.Fatalf("%s: point %v was never written", key, p)
			}
			got[p.t] = true
			quanta[p.t/int64(10*time.Second)] = true
		}
		for _, p := range in.acked[key] {
			if !got[p.t] {
				t.Fatalf("%s: acknowledged point %d lost (read through node %d)", key, p.t, i)
			}
		}
		pairs += len(quanta)
	}
	return pairs
}

// waitReplicated waits until the live nodes hold exactly rf copies of every pair and
// none reports an under-replicated pair, as `tsdht status` shows them.
func waitReplicated(t *testing.T, c *e2eCluster, via, pairs, rf int, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	if !testutil.Poll(within, func() bool {
		out, _, code := c.Run("", "status", "--cluster", c.Nodes[via].RPC, "--timeout", "3s")
		last = out
		copies, under := 0, 0
		for _, line := range strings.Split(out, "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 7 || f[2] != "alive" {
				continue
			}
			s, _ := strconv.Atoi(f[3])
			u, _ := strconv.Atoi(f[6])
			copies += s
			under += u
		}
		return code == 0 && copies == rf*pairs && under == 0
	}) {
		t.Fatalf("not back to %d copies of %d pairs within %v; status:\n%s", rf, pairs, within, last)
	}
	return time.Since(start)
}

// Nine real node processes, rf 3, 60 Hz ingest of several series: two nodes SIGKILLed,
// reads stay complete, every pair returns to three live copies; two more; again.
func TestProcessesHealAfterLosses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nine node processes")
	}
	const rf = 3
	c := startE2ECluster(t, 9, "--rf", "3", "--repair-interval", "2s", "--repair-rate", "0")
	in := &processIngest{
		c: c, keys: []string{"pmu1/freq", "pmu1/vang", "pmu2/vmag"},
		base:  (time.Now().Add(-2*time.Hour).Unix()/10)*10*int64(time.Second) + 1_300_000_000,
		live:  []int{0, 1, 3, 4, 6},
		acked: map[string][]point{}, tried: map[string][]point{},
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	go in.run()
	defer func() { close(in.stop); <-in.done }()

	live := 9
	for round, victims := range [][]int{{2, 5}, {7, 8}} {
		in.waitBatches(30*(round+1), time.Minute)
		for _, v := range victims {
			c.Kill(v)
		}
		live -= len(victims)
		in.waitBatches(30*(round+1)+15, time.Minute) // ingest goes on through the loss
		in.setPaused(true)
		in.checkAcked(t, 0) // complete before any repair
		c.WaitAlive(live, 30*time.Second)
		pairs := in.checkAcked(t, 4)
		took := waitReplicated(t, c, 0, pairs, rf, 2*time.Minute)
		t.Logf("round %d: killed %v; %d pairs back at %d live copies %v after failure detection",
			round+1, victims, pairs, rf, took.Round(100*time.Millisecond))
		in.setPaused(false)
	}
	in.setPaused(true)
	in.checkAcked(t, 1)
	in.mu.Lock()
	total := 0
	for _, p := range in.acked {
		total += len(p)
	}
	in.mu.Unlock()
	t.Logf("%d acknowledged points, none lost", total)

}
