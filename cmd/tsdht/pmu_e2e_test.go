package main

import (
	"bufio"
	"net/http"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/pmu/c37118"
	"github.com/tsdht/tsdht/pmu/ingest"
	"github.com/tsdht/tsdht/pmu/sim"
	"github.com/tsdht/tsdht/pmu/spool"
)

// The PMU end-to-end tests run real `tsdht node` processes and real `tsdht pmu`
// processes; the simulated PMU runs in the test process and serves real TCP.

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// addrs lists the nodes' RPC addresses, as --cluster takes them.
func (c *e2eCluster) addrs() string {
	var a []string
	for _, p := range c.Nodes {
		a = append(a, p.RPC)
	}
	return strings.Join(a, ",")
}

// pmuProc is a running `tsdht pmu`.
type pmuProc struct {
	t       *testing.T
	cmd     *exec.Cmd
	log     *testutil.SyncBuffer
	metrics string
}

func startPMUIngester(t *testing.T, bin, cluster string, s *sim.Sim, prefix, spoolDir string, extra ...string) *pmuProc {
	t.Helper()
	p := &pmuProc{t: t, log: &testutil.SyncBuffer{}, metrics: testutil.FreeAddr(t)}
	args := []string{"pmu", "--cluster", cluster, "--connect", s.Addr(), "--idcode", strconv.Itoa(int(s.Settings().IDCode)),
		"--prefix", prefix, "--metrics", p.metrics, "--timeout", "5s", "--stats-every", "5s"}
	if spoolDir != "" {
		args = append(args, "--spool", spoolDir)
	}
	args = append(args, extra...)
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stderr = p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Signal(syscall.SIGTERM)
			p.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("tsdht pmu log (tail):\n%s", tail(p.log.String(), 4000))
		}
	})
	return p
}

// counters reads the ingester's /metrics; nil while it does not answer.
func (p *pmuProc) counters() map[string]int64 {
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && !strings.HasPrefix(f[0], "#") {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			out[strings.TrimPrefix(f[0], "tsdht_pmu_")] = v
		}
	}
	return out
}

func (p *pmuProc) waitCounter(what string, within time.Duration, cond func(m map[string]int64) bool) map[string]int64 {
	p.t.Helper()
	var m map[string]int64
	if !testutil.Poll(within, func() bool {
		m = p.counters()
		return m != nil && cond(m)
	}) {
		p.t.Fatalf("timed out after %v waiting for %s; counters %v", within, what, m)
	}
	return m
}

// sample is one expected stored value.
type sample struct {
	t int64
	v float64
}

// expectFrames adds the expected samples of frames [first, last] to want.
func expectFrames(want map[string][]sample, s *sim.Sim, prefix string, first, last int64) {
	for k := first; k <= last; k++ {
		ts := s.Time(k)
		for key, v := range s.Expected(k, prefix) {
			want[key] = append(want[key], sample{ts, v})
		}
	}
}

// checkStored reads every series of want over its whole span through node i and
// requires exactly the expected points: same timestamps, same float64 values.
func checkStored(c *e2eCluster, i int, want map[string][]sample) int {
	c.t.Helper()
	n := 0
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		exp := want[key]
		sort.Slice(exp, func(a, b int) bool { return exp[a].t < exp[b].t })
		from, to := exp[0].t, exp[len(exp)-1].t+1
		out, errOut, code := c.Run("", "get", "--cluster", c.Nodes[i].RPC, "--series", key,
			"--from", strconv.FormatInt(from, 10), "--to", strconv.FormatInt(to, 10))
		if code != 0 {
			c.t.Fatalf("get %s: exit %d: %s", key, code, errOut)
		}
		got := parseCSV(c.t, out)
		if len(got) != len(exp) {
			missing := 0
			have := map[int64]bool{}
			for _, g := range got {
				have[g.t] = true
			}
			var miss []int64
			for _, e := range exp {
				if !have[e.t] {
					miss = append(miss, e.t)
					missing++
				}
			}
			c.t.Fatalf("%s: %d points stored, %d expected (%d missing: %v…); expected span %d..%d", key, len(got), len(exp), missing,
				miss[:min(len(miss), 5)], exp[0].t, exp[len(exp)-1].t)
		}
		for j := range exp {
			if got[j].t != exp[j].t || got[j].v != exp[j].v {
				c.t.Fatalf("%s point %d: stored (%d, %v), sent (%d, %v)", key, j, got[j].t, got[j].v, exp[j].t, exp[j].v)
			}
		}
		n += len(exp)
	}
	return n
}

func pmuTestSeconds(long, short time.Duration) time.Duration {
	if testing.Short() {
		return short
	}
	return long
}

const simFloatPolar = c37118.FormatPolar | c37118.FormatPhasorFloat | c37118.FormatFreqFloat | c37118.FormatAnalogFloat

// TestPMUEndToEnd: a simulated PMU at 60 frames/s (4 phasors, FREQ, DFREQ, 1 analog,
// 1 digital word) and a 2-PMU int16 rectangular PDC stream at 50 Hz, each read by a
// `tsdht pmu` process into a 3-node cluster; every sample comes back exactly.
func TestPMUEndToEnd(t *testing.T) {
	c := startE2ECluster(t, 3, "--sync", "always")
	run := pmuTestSeconds(60*time.Second, 4*time.Second)
	cases := []struct {
		name   string
		prefix string
		cfg    sim.Config
	}{
		{"float polar 60 fps", "e2e/a/", sim.Config{Rate: 60, Stations: []sim.Station{
			{Name: "PMU A", Format: simFloatPolar, Phasors: 4, Analogs: 1, Digitals: 1}}}},
		{"int16 rectangular PDC of 2 PMUs at 50 Hz", "e2e/b/", sim.Config{IDCode: 200, Rate: 50, Stations: []sim.Station{
			{Name: "NORTH", Format: 0, Phasors: 4, Analogs: 1, Digitals: 1, NominalHz: 50},
			{Name: "SOUTH", Format: c37118.FormatFreqFloat, Phasors: 2, Analogs: 1, NominalHz: 50}}}},
	}
	// Both streams run at once, as two PMUs feeding one cluster would.
	type running struct {
		s *sim.Sim
		p *pmuProc
	}
	var rs []running
	for _, tc := range cases {
		s, err := sim.Start(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		rs = append(rs, running{s, startPMUIngester(t, c.Bin, c.addrs(), s, tc.prefix, t.TempDir())})
	}
	deadline := time.Now().Add(run)
	for i := range rs {
		rs[i].p.waitCounter("data frames", 30*time.Second, func(m map[string]int64) bool { return m["data_frames_total"] > 0 })
	}
	time.Sleep(time.Until(deadline)) // the stream runs for its set time: that is the test
	for i, tc := range cases {
		r := rs[i]
		r.s.Pause(true)
		// Several runs of frames on one connection are fine (a simulator that fell more
		// than a second behind skips ahead: those frames were never sent); a second
		// connection would lose what the first one's socket held, and is a failure.
		runs := r.s.Runs()
		if m := r.p.counters(); m["connects_total"] != 1 {
			t.Fatalf("%s: the PMU connection broke: %d connections, runs %v", tc.name, m["connects_total"], runs)
		}
		want := map[string][]sample{}
		frames := int64(0)
		for _, run := range runs {
			expectFrames(want, r.s, tc.prefix, run.First, run.Last)
			frames += run.Last - run.First + 1
		}
		total := 0
		for _, v := range want {
			total += len(v)
		}
		m := r.p.waitCounter("every sample stored", 60*time.Second, func(m map[string]int64) bool {
			return m["samples_stored_total"] >= int64(total) && m["queued_batches"] == 0
		})
		if m["samples_dropped_total"] != 0 || m["samples_rejected_total"] != 0 || m["bad_crc_frames_total"] != 0 {
			t.Fatalf("%s: counters %v", tc.name, m)
		}
		n := checkStored(c, i%3, want)
		t.Logf("%s: %d frames, %d series, %d samples stored exactly", tc.name, frames, len(want), n)
		// Station, idcode, unit and nominal frequency are tags of every series in the
		// catalog (DESIGN.md's PMU naming).
		var out, errOut string
		var code, tagged int
		if !testutil.Poll(30*time.Second, func() bool {
			out, errOut, code = c.Run("", "series", "--cluster", c.Nodes[0].RPC, "--prefix", tc.prefix)
			tagged = 0
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				if strings.Contains(l, "station=") && strings.Contains(l, "idcode=") && strings.Contains(l, "nominal_hz=") {
					tagged++
				}
			}
			return code == 0 && tagged == len(want)
		}) {
			t.Fatalf("%s: %d of %d series tagged in the catalog (exit %d %s):\n%s", tc.name, tagged, len(want), code, errOut, out)
		}
		r.p.stopGracefully()
	}
}

// stopGracefully sends SIGTERM and requires a clean exit, with its final counters
// logged, within 30 s.
func (p *pmuProc) stopGracefully() {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			p.t.Fatalf("tsdht pmu after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		p.cmd.Process.Signal(syscall.SIGQUIT) // its goroutines go to the log
		<-done
		p.t.Fatalf("tsdht pmu did not exit within 30 s of SIGTERM")
	}
	if !strings.Contains(p.log.String(), "msg=stopped") {
		p.t.Fatalf("tsdht pmu exited without its final counters")
	}
}

// TestPMUStoreAndForward: the whole cluster is killed mid-stream and restarted on its
// data directories; meanwhile the ingester, spooling, is killed with SIGKILL and
// restarted. Nothing that reached the spool is lost, and nothing after the restart.
func TestPMUStoreAndForward(t *testing.T) {
	c := startE2ECluster(t, 3, "--sync", "always")
	outage := pmuTestSeconds(20*time.Second, 6*time.Second)
	s, err := sim.Start(sim.Config{Rate: 60, Stations: []sim.Station{
		{Name: "PMU S", Format: simFloatPolar, Phasors: 4, Analogs: 1, Digitals: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const prefix = "e2e/sf/"
	spoolDir := t.TempDir()
	p := startPMUIngester(t, c.Bin, c.addrs(), s, prefix, spoolDir)
	p.waitCounter("samples stored", 30*time.Second, func(m map[string]int64) bool { return m["samples_stored_total"] > 1000 })

	c.KillAll()
	outageEnd := time.Now().Add(outage)
	p.waitCounter("batches spooled", 30*time.Second, func(m map[string]int64) bool { return m["queued_batches"] >= 3 })
	time.Sleep(outage / 3)

	// SIGKILL the ingester while it spools, then see what the spool holds.
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.cmd.Wait()
	// The simulator records the frames it sent as runs of consecutive indices, and the
	// test tells the two processes' frames apart by a gap between runs. A restart faster
	// than a frame period (1/60 s: a fast machine makes one) leaves none, so wait until
	// two frames fell due after the last one sent: the dead connection takes at most one
	// more write before it fails.
	for {
		runs := s.Runs()
		due := time.Unix(0, s.Time(runs[len(runs)-1].Last+3))
		if time.Now().After(due) {
			break
		}
		time.Sleep(time.Until(due))
	}
	recs, err := spool.ReadAll(spoolDir)
	if err != nil {
		t.Fatal(err)
	}
	var lastSpooled int64
	spooledSamples := 0
	for _, r := range recs {
		b, err := ingest.DecodeBatch(r)
		if err != nil {
			t.Fatalf("spool record after SIGKILL: %v", err)
		}
		spooledSamples += b.Len()
		for i := range b.Points {
			if n := b.Points[i].Len(); n > 0 && b.Points[i].T[n-1] > lastSpooled {
				lastSpooled = b.Points[i].T[n-1]
			}
		}
	}
	if len(recs) < 3 {
		t.Fatalf("spool holds %d batches after SIGKILL", len(recs))
	}
	runsBefore := s.Runs()
	p2 := startPMUIngester(t, c.Bin, c.addrs(), s, prefix, spoolDir)
	p2.waitCounter("data after restart", 30*time.Second, func(m map[string]int64) bool { return m["data_frames_total"] > 60 })
	time.Sleep(time.Until(outageEnd))
	c.StartAll()
	c.WaitAlive(len(c.Nodes), time.Minute)
	time.Sleep(2 * time.Second) // two more seconds of live data after the recovery
	s.Pause(true)

	runs := s.Runs()
	if len(runs) != 2 || len(runsBefore) != 1 {
		t.Fatalf("expected one run of frames per ingester process: before %v, after %v", runsBefore, runs)
	}
	// First process: every frame up to the last spooled one. Frames after it were in
	// the killed process's memory (at most one flush interval) or in its socket.
	want := map[string][]sample{}
	first := runs[0]
	last := first.First
	for k := first.First; k <= first.Last && s.Time(k) <= lastSpooled; k++ {
		last = k
	}
	lostFrames := first.Last - last
	expectFrames(want, s, prefix, first.First, last)
	expectFrames(want, s, prefix, runs[1].First, runs[1].Last)
	// The restarted process replays the spool, then its own samples: done when every
	// sample it decoded went to the queue and the queue is empty.
	m := p2.waitCounter("spool drained", 120*time.Second, func(m map[string]int64) bool {
		return m["samples_queued_total"] == m["samples_total"] && m["queued_batches"] == 0
	})
	if m["samples_dropped_total"] != 0 || m["samples_rejected_total"] != 0 {
		t.Fatalf("counters %v", m)
	}
	t.Logf("run 1 frames %d..%d (%d..%d), last spooled %d (frame %d); run 2 %d..%d (%d..%d)", first.First, first.Last,
		s.Time(first.First), s.Time(first.Last), lastSpooled, last, runs[1].First, runs[1].Last, s.Time(runs[1].First), s.Time(runs[1].Last))
	n := checkStored(c, 1, want)
	t.Logf("outage %v: %d batches (%d samples) in the spool at SIGKILL; %d frames after the last spooled one were in the killed process; %d samples stored exactly",
		outage, len(recs), spooledSamples, lostFrames, n)
	if lostFrames > 2*60 {
		t.Fatalf("%d frames of the killed ingester never reached its spool; at most ~1 s (one flush) may", lostFrames)
	}
}
