package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

// TestCrashRestart is the power-cut test with real processes: a 3-node cluster at rf 3
// with --sync always ingests 60 Hz data from three concurrent writers (`tsdht put`, one
// second of one series per call), all three nodes are SIGKILLed at once in the middle
// of the writes, and restarted on the same data directories and addresses. Then every
// point of every acknowledged put reads back exact, the points of the interrupted puts
// that come back are the ones sent, the nodes kept their identities, and the cluster
// takes writes again. Three rounds, each checking the data of all earlier rounds.
func TestCrashRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills real node processes")
	}
	const (
		nodes   = 3
		rounds  = 3
		writers = 3 // one series each
		perPut  = 60
	)
	c := newE2ECluster(t, nodes, "--rf", "3", "--sync", "always")
	startAll := func() {
		c.StartAll()
		c.WaitAlive(nodes, 60*time.Second)
	}
	startAll()
	ids := c.nodeIDs()
	if len(ids) != nodes {
		t.Fatalf("status lists %d node IDs: %v", len(ids), ids)
	}

	cluster := c.addrs()
	// Every point has a value that says which series, put and offset it belongs to, so a
	// point that comes back can be checked against what was sent.
	base := (time.Now().Add(-30*time.Minute).Unix() / 10) * 10 * int64(time.Second)
	batch := func(w, k int) []point {
		pts := make([]point, perPut)
		for i := range pts {
			pts[i] = point{base + int64(k)*int64(time.Second) + int64(i)*int64(time.Second)/perPut, float64(w*1_000_000+k*perPut+i) + 0.25}
		}
		return pts
	}
	key := func(w int) string { return fmt.Sprintf("crash/pmu%d/freq", w) }

	type outcome struct {
		acked  map[int]bool // put k acknowledged
		failed map[int]bool // put k failed: its points may or may not be stored
		next   int
	}
	out := make([]outcome, writers)
	for w := range out {
		out[w] = outcome{acked: map[int]bool{}, failed: map[int]bool{}}
	}
	var mu sync.Mutex
	ackedTotal := 0
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))

	for round := range rounds {
		// Ingest: each writer puts one second of its series after another until a put
		// fails (the cluster is gone) and records what was acknowledged.
		ackedBefore := ackedTotal
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					mu.Lock()
					k := out[w].next
					out[w].next++
					mu.Unlock()
					stdout, stderr, code, err := runCLI(c.Bin, csvOf(batch(w, k)), "put", "--cluster", cluster, "--series", key(w), "--timeout", "10s")
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					if code == 0 && strings.Contains(stderr, fmt.Sprintf("stored %d points", perPut)) {
						out[w].acked[k] = true
						ackedTotal++
						mu.Unlock()
						continue
					}
					out[w].failed[k] = true
					mu.Unlock()
					if code == 0 {
						t.Errorf("put %d of %s: exit 0 without storing %d points: %s %s", k, key(w), perPut, stdout, stderr)
					}
					return
				}
			}()
		}
		// Let it run, then cut the power in the middle of the writes.
		acked := func() int {
			mu.Lock()
			defer mu.Unlock()
			return ackedTotal - ackedBefore
		}
		if !testutil.Poll(time.Minute, func() bool { return acked() >= 30 }) {
			t.Fatalf("round %d: only %d puts acknowledged in a minute", round, acked())
		}
		time.Sleep(time.Duration(rng.IntN(20_000)) * time.Microsecond) // somewhere inside a put, not at a boundary
		c.KillAll()
		wg.Wait()
		mu.Lock()
		t.Logf("round %d: %d puts acknowledged before the kill; failed: %v %v %v", round, ackedTotal-ackedBefore,
			keys(out[0].failed), keys(out[1].failed), keys(out[2].failed))
		mu.Unlock()

		startAll()
		if got := c.nodeIDs(); !slices.Equal(got, ids) {
			t.Fatalf("round %d: node IDs after the restart %v, before %v", round, got, ids)
		}
		// Every acknowledged point of every round is back, exact; the points of failed
		// puts that are back are the ones sent.
		for w := range writers {
			from, to := base, base+int64(out[w].next)*int64(time.Second)
			stdout, stderr, code := c.Run("", "get", "--cluster", c.Nodes[(round+w)%nodes].RPC, "--series", key(w),
				"--from", strconv.FormatInt(from, 10), "--to", strconv.FormatInt(to, 10))
			if code != 0 {
				t.Fatalf("round %d: get %s: exit %d: %s", round, key(w), code, stderr)
			}
			got := map[int64]float64{}
			for _, p := range parseCSV(t, stdout) {
				got[p.t] = p.v
			}
			wantN, partial := 0, 0
			for k := range out[w].next {
				for _, p := range batch(w, k) {
					v, ok := got[p.t]
					switch {
					case out[w].acked[k] && !ok:
						t.Fatalf("round %d: %s: acknowledged point %d (put %d) lost", round, key(w), p.t, k)
					case ok && v != p.v:
						t.Fatalf("round %d: %s: point %d (put %d) = %v, sent %v", round, key(w), p.t, k, v, p.v)
					case ok && !out[w].acked[k]:
						partial++
					}
					if ok {
						delete(got, p.t)
					}
					if out[w].acked[k] {
						wantN++
					}
				}
			}
			if len(got) > 0 {
				t.Fatalf("round %d: %s: %d points that were never sent came back", round, key(w), len(got))
			}
			t.Logf("round %d: %s: %d acknowledged points back, and %d points of failed puts", round, key(w), wantN, partial)
		}
	}
	// And the cluster takes writes again.
	pts := batch(0, out[0].next)
	if _, stderr, code := c.Run(csvOf(pts), "put", "--cluster", cluster, "--series", key(0)); code != 0 {
		t.Fatalf("put after the last restart: %s", stderr)
	}
}

// runCLI runs the CLI and returns stdout, stderr and the exit code; unlike
// e2eCluster.run it may be called from any goroutine.
func runCLI(bin, stdin string, args ...string) (string, string, int, error) {
	cmd := exec.Command(bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), errb.String(), ee.ExitCode(), nil
	}
	return out.String(), errb.String(), 0, err
}

// nodeIDs returns the sorted node IDs node 0's status lists.
func (c *e2eCluster) nodeIDs() []string {
	c.t.Helper()
	out, stderr, code := c.Run("", "status", "--cluster", c.Nodes[0].RPC, "--timeout", "5s")
	if code != 0 {
		c.t.Fatalf("status: %s", stderr)
	}
	var ids []string
	for _, line := range strings.Split(out, "\n")[1:] {
		if f := strings.Fields(line); len(f) >= 3 {
			ids = append(ids, f[0])
		}
	}
	slices.Sort(ids)
	return ids
}

func keys(m map[int]bool) []int {
	var ks []int
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
