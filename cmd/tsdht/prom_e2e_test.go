package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/prometheus/prompb"

	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/promapi"
)

// promSeries is one series of a Prometheus API matrix or vector answer.
type promSeries struct {
	Metric map[string]string `json:"metric"`
	Values [][2]any          `json:"values"`
	Value  [2]any            `json:"value"`
}

type promAnswer struct {
	Status    string          `json:"status"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Data      json.RawMessage `json:"data"`
}

// promGet asks a Prometheus HTTP API (Prometheus' or tsdht's) and decodes its answer.
func promGet(t *testing.T, addr, path string, params url.Values) (int, promAnswer) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path + "?" + params.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a promAnswer
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("%s%s: %d %s: %v", addr, path, resp.StatusCode, b, err)
	}
	return resp.StatusCode, a
}

func promMatrix(t *testing.T, addr, q string, start, end time.Time, step time.Duration) ([]promSeries, error) {
	t.Helper()
	code, a := promGet(t, addr, "/api/v1/query_range", url.Values{"query": {q},
		"start": {fmtSeconds(start)}, "end": {fmtSeconds(end)}, "step": {fmt.Sprint(step.Seconds())}})
	if code != 200 || a.Status != "success" {
		return nil, fmt.Errorf("%s: %d %s: %s", q, code, a.ErrorType, a.Error)
	}
	var d struct {
		ResultType string       `json:"resultType"`
		Result     []promSeries `json:"result"`
	}
	if err := json.Unmarshal(a.Data, &d); err != nil || d.ResultType != "matrix" {
		return nil, fmt.Errorf("%s: %s: %v", q, a.Data, err)
	}
	return d.Result, nil
}

func fmtSeconds(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}

// sameMatrix reports where two matrices differ: the same series (labels), and at
// each step the same value within a relative 1e-9 (NaN equal to NaN).
func sameMatrix(a, b []promSeries) error {
	index := func(m []promSeries) map[string]promSeries {
		out := make(map[string]promSeries)
		for _, s := range m {
			k, _ := json.Marshal(s.Metric)
			out[string(k)] = s
		}
		return out
	}
	ia, ib := index(a), index(b)
	for k, sa := range ia {
		sb, ok := ib[k]
		if !ok {
			return fmt.Errorf("series %s only in prometheus", k)
		}
		if len(sa.Values) != len(sb.Values) {
			return fmt.Errorf("series %s: %d steps in prometheus, %d in tsdht", k, len(sa.Values), len(sb.Values))
		}
		for i := range sa.Values {
			va, _ := strconv.ParseFloat(sa.Values[i][1].(string), 64)
			vb, _ := strconv.ParseFloat(sb.Values[i][1].(string), 64)
			same := va == vb || (math.IsNaN(va) && math.IsNaN(vb)) || math.Abs(va-vb) <= 1e-9*math.Max(math.Abs(va), math.Abs(vb))
			if sa.Values[i][0] != sb.Values[i][0] || !same {
				return fmt.Errorf("series %s step %d: prometheus %v, tsdht %v", k, i, sa.Values[i], sb.Values[i])
			}
		}
	}
	for k := range ib {
		if _, ok := ia[k]; !ok {
			return fmt.Errorf("series %s only in tsdht", k)
		}
	}
	return nil
}

// startPrometheus starts Prometheus on webAddr with conf, its data in dir.
func startPrometheus(t *testing.T, bin, dir, webAddr, conf string, flags ...string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.StartLogged(t, "prometheus "+filepath.Base(dir), exec.Command(bin, append([]string{"--config.file=" + cfg,
		"--storage.tsdb.path=" + filepath.Join(dir, "data"), "--web.listen-address=" + webAddr}, flags...)...))
	testutil.WaitHTTP(t, "http://"+webAddr+"/-/ready", 30*time.Second)
}

// TestPromQLAgainstPrometheus runs Debian's Prometheus: it scrapes itself and a
// `tsdht node --http` every second and remote-writes into the node. The same PromQL
// range queries asked of both must answer the same series and values; a second
// Prometheus with the node as its remote read must read back what the first wrote;
// streamed XOR chunks must hold what samples do; line protocol must show as
// measurement_field; the page's /api/v1/series?prefix= must still answer.
func TestPromQLAgainstPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("drives a real Prometheus for about 20 s")
	}
	prom := testutil.NeedTool(t, "prometheus", "prometheus")
	_, addr := startHTTPNode(t)

	// Line protocol, as VictoriaMetrics names it.
	now := time.Now()
	if code, body := httpPost(t, "http://"+addr+"/write?db=telegraf", fmt.Sprintf("cpu,host=a usage_idle=97.5,n=3i %d\n", now.Add(-time.Minute).UnixNano())); code != 204 {
		t.Fatalf("/write: %d %s", code, body)
	}
	code, a := promGet(t, addr, "/api/v1/query", url.Values{"query": {`cpu_usage_idle{host="a"} + cpu_n`}, "time": {fmtSeconds(now)}})
	if code != 200 || !strings.Contains(string(a.Data), `"value":[`) || !strings.Contains(string(a.Data), `"100.5"`) ||
		!strings.Contains(string(a.Data), `"db":"telegraf"`) {
		t.Fatalf("line protocol through PromQL: %d %s %s", code, a.Data, a.Error)
	}

	dir := t.TempDir()
	webA := testutil.FreeAddr(t)
	startPrometheus(t, prom, filepath.Join(dir, "a"), webA, fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: prometheus
    static_configs:
      - targets: [%q]
  - job_name: tsdht
    static_configs:
      - targets: [%q]
remote_write:
  - url: http://%s/api/v1/write
    queue_config:
      batch_send_deadline: 1s
`, webA, addr, addr))

	// Fifteen scrapes of each job, in tsdht.
	enough := func() bool {
		_, a := promGet(t, addr, "/api/v1/query", url.Values{"query": {`min(count_over_time(up[1m]))`}})
		var d struct {
			Result []promSeries `json:"result"`
		}
		json.Unmarshal(a.Data, &d)
		if len(d.Result) != 1 {
			return false
		}
		n, _ := strconv.Atoi(fmt.Sprint(d.Result[0].Value[1]))
		return n >= 15
	}
	if !testutil.Poll(60*time.Second, enough) {
		t.Fatal("after 60 s tsdht holds fewer than 15 samples of up per job")
	}

	// A range whose steps fall between scrapes: Prometheus 2 selects [t-r, t] and the
	// engine tsdht embeds (Prometheus 3) (t-r, t], which differ only for a sample
	// exactly at t-r.
	end := time.Now().Add(-2 * time.Second).Truncate(time.Second).Add(stepOffset(t, webA))
	start := end.Add(-6 * time.Second)
	queries := []string{
		`rate(prometheus_http_requests_total[5s])`,
		`sum by (job) (rate(process_cpu_seconds_total[5s]))`,
		`histogram_quantile(0.9, sum by (le) (rate(tsdht_http_request_duration_seconds_bucket{job="tsdht"}[5s])))`,
		`histogram_quantile(0.5, rate(prometheus_http_request_duration_seconds_bucket{handler=~"/metrics|/-/ready"}[5s]))`,
		`avg_over_time(go_goroutines[5s])`,
		`count({__name__=~"go_gc_.*", job=~"prom.*|tsdht"})`,
		`up{job=~"tsd.+"}`,
		`count by (job) (scrape_samples_scraped)`,
	}
	var want []promSeries
	for _, q := range queries {
		var err error
		want, err = promMatrix(t, webA, q, start, end, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if len(want) == 0 {
			t.Fatalf("prometheus answers %s with no series: nothing to compare", q)
		}
		var last error
		if !testutil.Poll(15*time.Second, func() bool {
			got, err := promMatrix(t, addr, q, start, end, time.Second)
			if err == nil {
				err = sameMatrix(want, got)
			}
			last = err
			return err == nil
		}) {
			t.Errorf("%s: %v", q, last)
		} else {
			t.Logf("%s: %d series of %d steps equal", q, len(want), len(want[0].Values))
		}
	}

	// A second Prometheus, with tsdht as its only storage, reads back what the first wrote.
	webB := testutil.FreeAddr(t)
	startPrometheus(t, prom, filepath.Join(dir, "b"), webB, fmt.Sprintf(`remote_read:
  - url: http://%s/api/v1/read
    read_recent: true
`, addr))
	for _, q := range []string{`up`, `rate(tsdht_http_requests_total{job="tsdht"}[5s])`} {
		want, err := promMatrix(t, webA, q, start, end, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got, err := promMatrix(t, webB, q, start, end, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := sameMatrix(want, got); err != nil || len(want) == 0 {
			t.Errorf("remote read of %s by prometheus: %v (%d series)", q, err, len(want))
		}
	}

	// Streamed XOR chunks hold what samples hold.
	query := &prompb.Query{StartTimestampMs: start.Add(-time.Minute).UnixMilli(), EndTimestampMs: end.UnixMilli(),
		Matchers: []*prompb.LabelMatcher{{Type: prompb.LabelMatcher_EQ, Name: "__name__", Value: "up"}}}
	samples := remoteRead(t, addr, query, prompb.ReadRequest_SAMPLES)
	streamed := remoteRead(t, addr, query, prompb.ReadRequest_STREAMED_XOR_CHUNKS)
	if len(samples) != 2 || !reflect.DeepEqual(samples, streamed) {
		t.Errorf("remote read of up: samples %v, streamed chunks %v", samples, streamed)
	}

	// The page's own listing is still there beside match[].
	resp, err := http.Get("http://" + addr + "/api/v1/series?prefix=" + url.QueryEscape("up{"))
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), `"key":"up{instance=`) {
		t.Errorf("page's /api/v1/series?prefix=: %d %s", resp.StatusCode, page)
	}
	code, a = promGet(t, addr, "/api/v1/series", url.Values{"match[]": {`up{job="tsdht"}`}})
	if code != 200 || !strings.Contains(string(a.Data), `"__name__":"up"`) || strings.Contains(string(a.Data), `"prometheus"`) {
		t.Errorf("/api/v1/series?match[]=: %d %s %s", code, a.Data, a.Error)
	}
	code, a = promGet(t, addr, "/api/v1/label/job/values", nil)
	if code != 200 || string(a.Data) != `["prometheus","tsdht"]` {
		t.Errorf("/api/v1/label/job/values: %d %s %s", code, a.Data, a.Error)
	}
}

// stepOffset returns the offset into a second that lies farthest from the ms of
// every sample of up Prometheus scraped.
func stepOffset(t *testing.T, webA string) time.Duration {
	_, a := promGet(t, webA, "/api/v1/query", url.Values{"query": {`up[30s]`}})
	var d struct {
		Result []promSeries `json:"result"`
	}
	json.Unmarshal(a.Data, &d)
	var offs []int
	for _, s := range d.Result {
		for _, v := range s.Values {
			offs = append(offs, int(math.Round(v[0].(float64)*1000))%1000)
		}
	}
	best, bestDist := 0, -1
	for o := 0; o < 1000; o += 5 {
		dist := 1000
		for _, x := range offs {
			d := (o - x + 1000) % 1000
			dist = min(dist, d, 1000-d)
		}
		if dist > bestDist {
			best, bestDist = o, dist
		}
	}
	if bestDist < 20 {
		t.Fatalf("scrapes at %v ms into the second leave no step clear of them", offs)
	}
	return time.Duration(best) * time.Millisecond
}

// remoteRead sends one query to addr's /api/v1/read asking for typ and returns each
// series' labels and samples as text.
func remoteRead(t *testing.T, addr string, q *prompb.Query, typ prompb.ReadRequest_ResponseType) map[string][]string {
	t.Helper()
	req := &prompb.ReadRequest{Queries: []*prompb.Query{q}, AcceptedResponseTypes: []prompb.ReadRequest_ResponseType{typ}}
	b, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post("http://"+addr+"/api/v1/read", "application/x-protobuf", bytes.NewReader(snappy.Encode(nil, b)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("remote read: %d %s", resp.StatusCode, body)
	}
	out := make(map[string][]string)
	key := func(ls []prompb.Label) string {
		var parts []string
		for _, l := range ls {
			parts = append(parts, l.Name+"="+l.Value)
		}
		return strings.Join(parts, ",")
	}
	if typ == prompb.ReadRequest_SAMPLES {
		raw, err := snappy.Decode(nil, body)
		if err != nil {
			t.Fatal(err)
		}
		var rr prompb.ReadResponse
		if err := rr.Unmarshal(raw); err != nil || len(rr.Results) != 1 {
			t.Fatalf("read response: %v %d", err, len(rr.Results))
		}
		for _, ts := range rr.Results[0].Timeseries {
			k := key(ts.Labels)
			for _, s := range ts.Samples {
				out[k] = append(out[k], fmt.Sprintf("%d:%v", s.Timestamp, s.Value))
			}
		}
		return out
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-streamed-protobuf") {
		t.Fatalf("streamed read answered %s", ct)
	}
	err = promapi.ReadFrames(bytes.NewReader(body), 4<<20, func(_ int64, lset []prompb.Label, samples []prompb.Sample) error {
		k := key(lset)
		for _, s := range samples {
			out[k] = append(out[k], fmt.Sprintf("%d:%v", s.Timestamp, s.Value))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
