package main

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

// TestHTTPBulkNewSeriesIndexed writes hundreds of new tagged series at once through
// /write of a real node with --sync always, as a bulk loader does (their catalog calls
// are coalesced: docs/catalog.md "What a new series costs a write"), kills the node
// with SIGKILL once every write was acknowledged, and lists them after the restart:
// every series is found by each of its tags and by its prefix.
func TestHTTPBulkNewSeriesIndexed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real node process")
	}
	c, addr := startHTTPNode(t, "--sync", "always", "--new-series-per-second", "0")
	const writers, perWriter, racks = 6, 100, 4
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	var wg sync.WaitGroup
	errs := make(chan string, writers)
	for w := range writers {
		wg.Go(func() {
			var b strings.Builder
			for i := range perWriter {
				fmt.Fprintf(&b, "m,host=h%d_%03d,rack=r%d v=%d %d\n", w, i, i%racks, i, t0.Add(time.Duration(w)*time.Second).UnixNano())
			}
			resp, err := http.Post("http://"+addr+"/write?db=bulk", "text/plain", strings.NewReader(b.String()))
			if err != nil {
				errs <- err.Error()
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent {
				errs <- fmt.Sprintf("writer %d: status %d", w, resp.StatusCode)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	c.Kill(0)
	c.Start(0)
	testutil.WaitHTTP(t, "http://"+addr+"/ready", 30*time.Second)

	list := func(args ...string) []string {
		t.Helper()
		out, errOut, code := c.Run("", append([]string{"series", "--cluster", c.Nodes[0].RPC}, args...)...)
		if code != 0 {
			t.Fatalf("series %v: exit %d: %s", args, code, errOut)
		}
		return strings.Fields(out)
	}
	if got := list("--prefix", "bulk/"); len(got) != writers*perWriter {
		t.Fatalf("--prefix bulk/ lists %d series, want %d", len(got), writers*perWriter)
	}
	for r := range racks {
		if got := list("--match", fmt.Sprintf("rack=r%d", r)); len(got) != writers*perWriter/racks {
			t.Fatalf("--match rack=r%d lists %d series, want %d", r, len(got), writers*perWriter/racks)
		}
	}
	for _, host := range []string{"h0_000", "h3_057", "h5_099"} {
		if got := list("--match", "host="+host); len(got) != 1 || !strings.Contains(got[0], "host="+host) {
			t.Fatalf("--match host=%s: %v", host, got)
		}
	}
}
