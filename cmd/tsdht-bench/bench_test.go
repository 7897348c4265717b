package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// runApp runs `tsdht-bench args…` in process, its results to out.
func runApp(out io.Writer, args ...string) error {
	app := newApp()
	app.Writer, app.ErrWriter = out, io.Discard
	return app.Run(append([]string{"tsdht-bench"}, args...))
}

// runBenchJSON runs `tsdht-bench args… --json` in process and returns its JSON lines,
// each decoded; anything else on stdout fails the test.
func runBenchJSON(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	var out bytes.Buffer
	if err := runApp(&out, append(args, "--json")...); err != nil {
		t.Fatalf("bench %s: %v", strings.Join(args, " "), err)
	}
	var res []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("stdout line %q is not a JSON object: %v", line, err)
		}
		res = append(res, m)
	}
	return res
}

// requireFields checks that every result has the fields and that numbers are numbers
// and strings strings.
func requireFields(t *testing.T, m map[string]any, fields ...string) {
	t.Helper()
	for _, f := range fields {
		v, ok := m[f]
		if !ok {
			t.Errorf("result %v lacks %q", m, f)
			continue
		}
		switch f {
		case "bench", "id_format", "sync", "store", "target":
			if _, ok := v.(string); !ok {
				t.Errorf("%q = %v: want a string", f, v)
			}
		default:
			if _, ok := v.(float64); !ok {
				t.Errorf("%q = %v: want a number", f, v)
			}
		}
	}
}

var commonFields = []string{"bench", "id_format", "rf", "sync", "store", "nodes", "target"}

func TestBenchJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("starts in-process clusters")
	}
	t.Run("write", func(t *testing.T) {
		res := runBenchJSON(t, "write", "--local", "3", "--rf", "1,3", "--count", "30", "--warmup", "5", "--store", "memory", "--paper")
		if len(res) != 4 {
			t.Fatalf("%d results, want 4 (qfi, kfi × rf 1, 3)", len(res))
		}
		seen := map[string]bool{}
		for _, m := range res {
			requireFields(t, m, append(commonFields, "count", "write_quorum", "mean_ms", "p50_ms", "p99_ms", "points_per_s",
				"floor_mean_ms", "floor_p50_ms", "floor_p99_ms", "floor_peers", "x_floor",
				"bare_mean_ms", "bare_p50_ms", "x_bare", "rebuilt_mean_ms", "rebuilt_p50_ms", "rebuilt_over_tsdht")...)
			if m["rebuilt_mean_ms"].(float64) <= 0 || (m["rf"] == 3.0 && m["bare_mean_ms"].(float64) <= 0) {
				t.Errorf("result %v: want the rebuild's and (rf 3) the bare floor's latencies measured", m)
			}
			if m["bench"] != "write" || m["count"] != 30.0 || m["sync"] != "none" || m["store"] != "memory" {
				t.Errorf("result %v: want bench write, count 30, sync none, store memory", m)
			}
			seen[m["id_format"].(string)+"/"+jsonNum(m["rf"])] = true
		}
		for _, want := range []string{"qfi/1", "qfi/3", "kfi/1", "kfi/3"} {
			if !seen[want] {
				t.Errorf("no result for %s", want)
			}
		}
	})
	t.Run("read", func(t *testing.T) {
		res := runBenchJSON(t, "read", "--local", "3", "--rf", "2", "--id-format", "kfi", "--points", "1200",
			"--spans", "1,10", "--reads", "3", "--sync", "none")
		if len(res) != 2 {
			t.Fatalf("%d results, want 2 (spans 1, 10)", len(res))
		}
		for i, m := range res {
			requireFields(t, m, append(commonFields, "points", "span_s", "quanta", "reads", "points_returned", "mean_ms",
				"p50_ms", "p99_ms", "cold_ms", "points_per_s")...)
			span := []float64{1, 10}[i]
			got := m["points_returned"].(float64)
			if m["span_s"] != span || got < 60*span || got > 60*span+1 || m["points"] != 1200.0 || m["reads"] != 3.0 {
				t.Errorf("result %v: want span %v s, %v–%v points of 1200, 3 reads", m, span, 60*span, 60*span+1)
			}
			if m["sync"] != "none" || m["store"] != "disk" || m["values"] != "float64" {
				t.Errorf("result %v: want sync none on disk, float64 values", m)
			}
		}
		// --float32 writes float32 readings (the bench checks every point read back) and
		// says so; --read-quorum-only is reported.
		res = runBenchJSON(t, "read", "--local", "3", "--rf", "3", "--id-format", "qfi", "--points", "1200",
			"--spans", "10", "--reads", "2", "--sync", "none", "--float32", "--read-quorum-only")
		if len(res) != 1 || res[0]["values"] != "float32" || res[0]["read_quorum_only"] != true {
			t.Errorf("results %v: want one, of float32 values, read_quorum_only", res)
		}
	})
	t.Run("ingest", func(t *testing.T) {
		res := runBenchJSON(t, "ingest", "--local", "3", "--id-format", "qfi", "--series", "3", "--batch", "60",
			"--seconds", "0.5", "--store", "memory")
		if len(res) != 1 {
			t.Fatalf("%d results, want 1", len(res))
		}
		m := res[0]
		requireFields(t, m, append(commonFields, "series", "seconds", "batch", "points", "batches", "mean_ms", "p50_ms",
			"p99_ms", "points_per_s")...)
		if m["series"] != 3.0 || m["batch"] != 60.0 || m["points"].(float64) != 60*m["batches"].(float64) ||
			m["points"].(float64) == 0 || m["points_per_s"].(float64) <= 0 {
			t.Errorf("result %v: want 3 series, batches of 60, points = 60 × batches > 0", m)
		}
	})
}

func TestBenchRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"write", "--local", "3", "--rf", "4"},                       // rf above the nodes
		{"write", "--local", "3", "--sync", "sometimes"},             // unknown sync mode
		{"read", "--local", "3", "--points", "100", "--spans", "10"}, // span longer than the history
		{"write", "--cluster", "127.0.0.1:1", "--rf", "1,4"},         // a cluster has one rf
	} {
		if err := runApp(io.Discard, args...); err == nil {
			t.Errorf("bench %s: no error", strings.Join(args, " "))
		}
	}
}

func jsonNum(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// The report shows each --command as given: a comma inside one (--rf 1,4,7) must not
// split it into lines.
func TestBenchReportKeepsCommandsVerbatim(t *testing.T) {
	var out bytes.Buffer
	err := runApp(&out, "report", "--command", "tsdht-bench write --rf 1,4,7", "--command", "second",
		"../../docs/bench/paper-loopback.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "```sh\ntsdht-bench write --rf 1,4,7\nsecond\n```") {
		t.Fatalf("commands not shown verbatim:\n%s", out.String())
	}
}

// --level 2 makes the report a section of a longer document (scripts/bench-report):
// its title one level down, its tables another, and without --machine no machine line.
func TestBenchReportAsASection(t *testing.T) {
	var out bytes.Buffer
	err := runApp(&out, "report", "--level", "2", "--no-paper-note", "--title", "Ingest here", "../../docs/bench/ingest.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if !strings.HasPrefix(s, "## Ingest here\n") || !strings.Contains(s, "\n### Ingest — concurrent 60 Hz series") {
		t.Errorf("headings not one level down:\n%s", s)
	}
	if strings.Contains(s, "Measured") || strings.Contains(s, "The paper: Krentz") {
		t.Errorf("a section states neither machine nor the paper's set-up:\n%s", s)
	}
	if err := runApp(io.Discard, "report", "--level", "0", "../../docs/bench/ingest.jsonl"); err == nil {
		t.Error("--level 0: no error")
	}
}
