package main

import (
	"strings"
	"testing"
	"time"
)

// TestPutDuringFailureDetection kills two of five nodes (rf 3, write quorum 2) and puts
// at once, before the others have noticed: shards whose replica sets hold both dead
// nodes cannot reach quorum until failure detection takes them out of placement. The
// put retries those shards, succeeds once detection is done, and says that it waited;
// every point reads back.
func TestPutDuringFailureDetection(t *testing.T) {
	c := startE2ECluster(t, 5, "--rf", "3")
	key := "retry/detect"
	t0 := time.Now().Add(-time.Hour).Truncate(time.Minute).UnixNano()
	all := pmuPoints(t0, 60*60*3) // three minutes: 18 quanta, 18 replica sets
	c.Kill(3)
	c.Kill(4)
	start := time.Now()
	_, errOut, code := c.Run(csvOf(all), "put", "--cluster", c.Nodes[0].RPC, "--series", key)
	if code != 0 {
		t.Fatalf("put during failure detection: exit %d: %s", code, errOut)
	}
	t.Logf("put took %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(errOut))
	if !strings.Contains(errOut, "stored 10800 points") {
		t.Fatalf("put says: %s", errOut)
	}
	c.checkRead(1, key, all, all[0].t, all[len(all)-1].t+1)
}
