package main

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

// gcGoal matches a collector cycle's heap goal in a GODEBUG=gctrace=1 line.
var gcGoal = regexp.MustCompile(`(?m)^gc \d+ @.* (\d+) MB goal`)

// TestNodeHeapFloor starts a node with GOGC unset and one with GOGC=100, each with
// GODEBUG=gctrace=1, and sends each the same writes through its --http: every cycle
// the first runs once serving has a heap goal of nodeHeapFloor or more
// (docs/deployment.md, "The collector"), and the second, over the same live heap of a
// few MiB, runs some below it (so the check can fail).
func TestNodeHeapFloor(t *testing.T) {
	t.Setenv("GODEBUG", "gctrace=1")
	var body strings.Builder
	for i := range 20_000 {
		fmt.Fprintf(&body, "floor,s=%d v=%d\n", i%100, i)
	}
	goals := func(gogc string) []int {
		t.Setenv("GOGC", gogc)
		addr := testutil.FreeAddr(t)
		c := startE2ECluster(t, 1, "--rf", "1", "--http", addr)
		testutil.WaitHTTP(t, "http://"+addr+"/ready", 30*time.Second)
		var got []int
		deadline := time.Now().Add(20 * time.Second)
		for len(got) < 3 && time.Now().Before(deadline) { // writes until the node has run 3 cycles since serving
			resp, err := http.Post("http://"+addr+"/write?db=floor", "text/plain", strings.NewReader(body.String()))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent {
				t.Fatalf("GOGC=%q: /write answered %d", gogc, resp.StatusCode)
			}
			log := c.Nodes[0].Log()
			_, after, _ := strings.Cut(log, "serving")
			got = got[:0]
			for _, m := range gcGoal.FindAllStringSubmatch(after, -1) {
				n, _ := strconv.Atoi(m[1])
				got = append(got, n)
			}
		}
		if len(got) < 3 {
			t.Fatalf("GOGC=%q: %d collector cycles in 20 s of writes since the node served, want 3", gogc, len(got))
		}
		return got
	}
	const floorMiB = nodeHeapFloor >> 20
	for i, g := range goals("") {
		if g < floorMiB {
			t.Errorf("GOGC unset: cycle %d since serving had a heap goal of %d MiB, want the floor, %d MiB, or more", i+1, g, floorMiB)
		}
	}
	below := 0
	for _, g := range goals("100") {
		if g < floorMiB {
			below++
		}
	}
	if below == 0 {
		t.Errorf("GOGC=100: no cycle below %d MiB: the writes do not show the floor", floorMiB)
	}
}
