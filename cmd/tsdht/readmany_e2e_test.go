package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

// A query over many series costs each node one read request, not one per series: on 3
// node processes at rf 3, InfluxQL's GROUP BY "host" over 8 hosts, raw and aggregated,
// sent to node 0's /query, makes nodes 1 and 2 each answer exactly one read or
// aggregate request (tsdht_replica_read_requests_total on their /metrics), and the
// answer holds every host's values.
func TestReadManyOneRequestPerNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 node processes")
	}
	c := newE2ECluster(t, 3, "--rf", "3")
	https := make([]string, 3)
	for i, p := range c.Nodes {
		https[i] = testutil.FreeAddr(t)
		p.Args = []string{"--http", https[i]}
	}
	c.StartAll()
	c.WaitAlive(3, time.Minute)
	for _, a := range https {
		testutil.WaitHTTP(t, "http://"+a+"/ready", 30*time.Second)
	}

	// 8 hosts, a point a minute for 2 hours.
	base := time.Now().Add(-3 * time.Hour).Truncate(time.Hour)
	var b strings.Builder
	for i := range 120 {
		for h := range 8 {
			fmt.Fprintf(&b, "cpu,host=h%d usage=%d %d\n", h, h*1000+i, base.Add(time.Duration(i)*time.Minute).UnixNano())
		}
	}
	if code, body := httpPost(t, "http://"+https[0]+"/write?db=dash", b.String()); code != http.StatusNoContent {
		t.Fatalf("write: %d %s", code, body)
	}
	from, to := base.UnixNano(), base.Add(2*time.Hour).UnixNano()
	for _, q := range []struct {
		name, q string
		values  int // per host
	}{
		{"raw", fmt.Sprintf(`SELECT "usage" FROM cpu WHERE time >= %d AND time < %d GROUP BY "host"`, from, to), 120},
		{"mean", fmt.Sprintf(`SELECT mean("usage") FROM cpu WHERE time >= %d AND time < %d GROUP BY time(10m), "host"`, from, to), 12},
	} {
		// A replica may still be receiving the write (acknowledged at the write
		// quorum): a read that finds replicas differing asks again. Once they agree,
		// the query costs each node one request.
		var deltas []int64
		testutil.WaitFor(t, 20*time.Second, func() bool {
			before := replicaReads(t, https[1:])
			code, body := httpQuery(t, https[0], "dash", q.q)
			if code != http.StatusOK {
				t.Fatalf("%s: %d %s", q.name, code, body)
			}
			checkHosts(t, q.name, body, 8, q.values)
			after := replicaReads(t, https[1:])
			deltas = []int64{after[0] - before[0], after[1] - before[1]}
			return deltas[0] == 1 && deltas[1] == 1
		}, "%s over 8 hosts to cost nodes 1 and 2 one read request each (last: %v)", q.name, &deltas)
	}
}

// replicaReads scrapes tsdht_replica_read_requests_total from each node's /metrics.
func replicaReads(t *testing.T, addrs []string) []int64 {
	t.Helper()
	out := make([]int64, len(addrs))
	for i, a := range addrs {
		resp, err := http.Get("http://" + a + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		found := false
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "tsdht_replica_read_requests_total "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("%s/metrics: %q: %v", a, sc.Text(), err)
				}
				out[i], found = int64(f), true
			}
		}
		resp.Body.Close()
		if !found {
			t.Fatalf("%s/metrics has no tsdht_replica_read_requests_total", a)
		}
	}
	return out
}

// checkHosts checks that a /query answer holds hosts series of values rows each.
func checkHosts(t *testing.T, name string, body []byte, hosts, values int) {
	t.Helper()
	var ans struct {
		Results []struct {
			Series []struct {
				Tags   map[string]string `json:"tags"`
				Values [][]any           `json:"values"`
			} `json:"series"`
			Error string `json:"error"`
		} `json:"results"`
	}
	if err := json.Unmarshal(body, &ans); err != nil || len(ans.Results) != 1 {
		t.Fatalf("%s: %v: %s", name, err, body)
	}
	r := ans.Results[0]
	if r.Error != "" || len(r.Series) != hosts {
		t.Fatalf("%s: %d series (want %d), error %q", name, len(r.Series), hosts, r.Error)
	}
	for _, s := range r.Series {
		if len(s.Values) != values {
			t.Fatalf("%s: host %s has %d values, want %d", name, s.Tags["host"], len(s.Values), values)
		}
	}
}
