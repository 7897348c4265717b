package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/hostile"
	"github.com/tsdht/tsdht/internal/testutil"
)

// hostileRSSBoundKB is the peak resident set (VmHWM) a node may reach while it refuses
// TestHTTPHostileBodies' bodies and stores the ordinary writes beside them.
const hostileRSSBoundKB = 200 << 10

// TestHTTPHostileBodies posts, to a real `tsdht node --http` process, issue #31's
// bodies at once: one /write of 1,000,000 new series (15 MB of line protocol, its parse
// stopped at the series past --new-series-per-request), a
// Prometheus remote write declaring 10,000,000 empty samples (1 MB, 20 MB decompressed),
// a /write of 6,000 new series (past --new-series-per-request) and a 900 KB query of
// 450,000 nested parentheses, while a writer of known series goes on. Each hostile body
// is refused whole (413, the query 400) naming its limit,
// within seconds; every ordinary write is acknowledged (204; a 429 for a busy write
// slot is retried, as clients do); and the node's peak RSS (VmHWM in /proc/PID/status)
// stays under hostileRSSBoundKB.
func TestHTTPHostileBodies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node process and posts 16 MB of hostile bodies")
	}
	c, addr := startHTTPNode(t)
	pid := c.Nodes[0].Cmd.Process.Pid
	base := "http://" + addr
	// Each hostile body, and the ordinary writer, comes from an address of its own:
	// the node's HTTP work budget gives each client its share (docs/http.md), and
	// the bodies spend theirs.
	var clients sync.Map // address → *http.Client
	post := func(from, path, ctype string, hdr map[string]string, body []byte) (int, string) {
		req, err := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(body))
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		req.Header.Set("Content-Type", ctype)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		cl, _ := clients.LoadOrStore(from, testutil.ClientFrom(from, 0))
		resp, err := cl.(*http.Client).Do(req)
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	now := time.Now().Truncate(time.Second)
	ordinary := func(i int) string {
		return fmt.Sprintf("ok,s=a v=%d %d\nok,s=b v=%d %d\n", i, now.Add(time.Duration(i)*time.Millisecond).UnixNano(), i, now.Add(time.Duration(i)*time.Millisecond).UnixNano())
	}
	if code, msg := post("127.0.0.10", "/write?db=card", "text/plain", nil, []byte(ordinary(0))); code != http.StatusNoContent {
		t.Fatalf("the first ordinary write: %d %s", code, msg)
	}

	hostileCases := []struct {
		name, path, ctype, want string
		code                    int
		hdr                     map[string]string
		body                    []byte
	}{
		{"1,000,000 new series", "/write?db=card", "text/plain", "new-series-per-request", http.StatusRequestEntityTooLarge, nil, hostile.NewSeriesLines("c", 1_000_000)},
		{"10,000,000 empty samples", "/api/v1/write", "application/x-protobuf", "MaxSamplesPerRemoteWrite", http.StatusRequestEntityTooLarge,
			map[string]string{"Content-Encoding": "snappy"}, hostile.RemoteWriteBomb(10_000_000)},
		{"6,000 new series", "/write?db=card", "text/plain", "new-series-per-request", http.StatusRequestEntityTooLarge, nil, hostile.NewSeriesLines("d", 6_000)},
		{"450,000 nested parentheses", "/query?db=card", "application/x-www-form-urlencoded", "MaxQueryDepth", http.StatusBadRequest, nil,
			[]byte("q=" + hostile.NestedQuery(450_000))},
	}
	start := time.Now()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	acked := 0
	wg.Go(func() { // the ordinary writer, until the hostile bodies are answered
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			for deadline := time.Now().Add(10 * time.Second); ; {
				code, msg := post("127.0.0.10", "/write?db=card", "text/plain", nil, []byte(ordinary(i)))
				if code == http.StatusNoContent {
					acked++
					break
				}
				if code != http.StatusTooManyRequests || time.Now().After(deadline) {
					t.Errorf("ordinary write %d beside the hostile bodies: %d %s", i, code, msg)
					return
				}
			}
		}
	})
	var hostileWG sync.WaitGroup
	for i, hc := range hostileCases {
		hostileWG.Go(func() {
			for deadline := time.Now().Add(10 * time.Second); ; {
				code, msg := post(fmt.Sprintf("127.0.0.%d", 20+i), hc.path, hc.ctype, hc.hdr, hc.body)
				if code == http.StatusTooManyRequests && time.Now().Before(deadline) {
					continue // a write slot was busy
				}
				if code != hc.code || !strings.Contains(msg, hc.want) {
					t.Errorf("%s: %d %.300s; want %d naming %s", hc.name, code, msg, hc.code, hc.want)
				}
				t.Logf("%s (%d bytes): %d after %v", hc.name, len(hc.body), code, time.Since(start).Round(time.Millisecond))
				return
			}
		})
	}
	hostileWG.Wait()
	took := time.Since(start)
	close(stop)
	wg.Wait()
	hwm := procStatusKB(t, pid, "VmHWM:")
	t.Logf("hostile bodies refused in %v; %d ordinary writes acknowledged meanwhile; node peak RSS %d MB (bound %d MB)",
		took.Round(time.Millisecond), acked, hwm>>10, hostileRSSBoundKB>>10)
	if took > 20*time.Second {
		t.Errorf("refusing the hostile bodies took %v", took)
	}
	if acked == 0 {
		t.Error("no ordinary write was acknowledged beside the hostile bodies")
	}
	if hwm > hostileRSSBoundKB {
		t.Errorf("the node's peak RSS reached %d MB, over the bound of %d MB", hwm>>10, hostileRSSBoundKB>>10)
	}
	// Nothing of the refused writes was stored; the ordinary series were.
	code, b := httpQuery(t, addr, "card", "SHOW SERIES")
	if code != http.StatusOK || strings.Contains(string(b), "c,s=") || strings.Contains(string(b), "d,s=") || !strings.Contains(string(b), "ok,s=a") {
		t.Errorf("SHOW SERIES after the refused writes: %d %.400s", code, b)
	}
}

// procStatusKB reads a field in kB (VmRSS:, VmHWM:) of /proc/PID/status.
func procStatusKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
