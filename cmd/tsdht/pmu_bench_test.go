package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/pmu/sim"
	"github.com/tsdht/tsdht/tsdb"
)

// BenchmarkPMUIngest measures 10 PMUs × 60 frames/s (4 phasors, FREQ, DFREQ, 1 analog,
// 1 digital word each: 14 series, 8,400 samples/s in all) ingested into ONE `tsdht node`
// process by `tsdht pmu` processes: the CPU share and RSS of the node and of the
// ingesters, and the delay from a frame's timestamp to its being readable (polled on two
// streams every 200 ms). Cases: ten streams (one `tsdht pmu` per PMU) and one PDC stream
// carrying the ten PMUs (one `tsdht pmu`). The measuring window is PMU_BENCH_SECONDS
// (default 20); each case runs once whatever b.N is. With TSDHT_TEST_BINARY pointing
// at an ARMv7 build wrapped in qemu-arm-static, the figures are the emulated board's:
// scripts/bench-pmu --arm does that, pinned to one core.
//
//	go test -run XXX -bench PMUIngest -benchtime 1x ./cmd/tsdht   # or scripts/bench-pmu [--arm]
func BenchmarkPMUIngest(b *testing.B) {
	secs := 20
	if s := os.Getenv("PMU_BENCH_SECONDS"); s != "" {
		secs, _ = strconv.Atoi(s)
	}
	for _, tc := range []struct {
		name    string
		streams int // `tsdht pmu` processes
		perPDC  int // PMUs per stream
		rate    int // frames per second
		pmu     sim.Station
	}{
		{"10 streams", 10, 1, 60, pmu14},
		{"1 PDC stream of 10 PMUs", 1, 10, 60, pmu14},
		// A large PDC: 116 PMUs of 12 phasors each (26 series: magnitude and angle of
		// each, FREQ, DFREQ), 3,016 channels at 30 frames/s, to say whether one node and
		// one ingester keep up. Its configuration frame must fit C37.118's 64 KiB.
		{"1 PDC stream of 116 PMUs, 3,016 channels at 30 fps", 1, 116, 30, sim.Station{Format: simFloatPolar, Phasors: 12}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			benchPMU(b, tc.streams, tc.perPDC, tc.rate, tc.pmu, time.Duration(secs)*time.Second)
		})
	}
}

// procCPU returns a process's user+system CPU time, from /proc/PID/stat.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ is 100 on Linux
}

// procRSS returns a process's current and peak resident set, in MiB.
func procRSS(pid int) (cur, peak float64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 {
			v, _ := strconv.ParseFloat(f[1], 64)
			switch f[0] {
			case "VmRSS:":
				cur = v / 1024
			case "VmHWM:":
				peak = v / 1024
			}
		}
	}
	return
}

// perFrameOf returns how many samples one frame of every stream carries.
func perFrameOf(sims []*sim.Sim) int {
	n := 0
	for _, s := range sims {
		n += len(s.Expected(0, ""))
	}
	return n
}

// pmu14 is the benchmark's usual PMU: 4 phasors, FREQ, DFREQ, 1 analog, 1 digital word.
var pmu14 = sim.Station{Format: simFloatPolar, Phasors: 4, Analogs: 1, Digitals: 1}

func benchPMU(b *testing.B, streams, perPDC, rate int, pmu sim.Station, window time.Duration) {
	bin := testutil.Binary(b)
	c := testutil.NewCluster(b, 1, "--rf", "1")
	c.StartAll()
	node, rpcAddr := c.Nodes[0].Cmd, c.Nodes[0].RPC
	client, err := tsdb.NewClient([]string{rpcAddr}, tsdb.DefaultClientConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()

	var procs []*exec.Cmd
	var sims []*sim.Sim
	for i := 0; i < streams; i++ {
		var st []sim.Station
		for j := 0; j < perPDC; j++ {
			p := pmu
			p.Name = fmt.Sprintf("PMU%02d", i*perPDC+j)
			st = append(st, p)
		}
		s, err := sim.Start(sim.Config{IDCode: uint16(100 + i), Rate: rate, Stations: st})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		sims = append(sims, s)
		cmd := exec.Command(bin, "pmu", "--cluster", rpcAddr, "--connect", s.Addr(), "--idcode", strconv.Itoa(100+i),
			"--prefix", "bench/", "--spool", filepath.Join(b.TempDir(), "spool"), "--stats-every", "0", "--log-level", "warn")
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
		procs = append(procs, cmd)
	}
	// Warm up: every stream delivering.
	warm := time.Now().Add(2 * time.Minute)
	for i, s := range sims {
		testutil.WaitFor(b, time.Until(warm), func() bool { return s.Sent() >= int64(2*rate) }, "stream %d to send %d frames", i, 2*rate)
	}

	// Delay probe: the newest readable freq sample of two streams, every 200 ms.
	var mu sync.Mutex
	var delays []time.Duration
	lastDelay := map[string]time.Duration{} // per probed key, the newest sample's delay when last read
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, i := range []int{0, len(sims) - 1} {
		key := fmt.Sprintf("bench/PMU%02d/freq", i*perPDC)
		wg.Add(1)
		go func() {
			defer wg.Done()
			seen := time.Now().UnixNano()
			t := time.NewTicker(200 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
				}
				now := time.Now().UnixNano()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				res, err := client.Get(ctx, key, seen, now+int64(time.Second), tsdb.GetOptions{})
				cancel()
				if err != nil {
					continue
				}
				mu.Lock()
				for _, ts := range res.Points.T {
					if ts >= seen {
						delays = append(delays, time.Duration(now-ts))
					}
				}
				mu.Unlock()
				if n := len(res.Points.T); n > 0 {
					seen = res.Points.T[n-1] + 1
					mu.Lock()
					lastDelay[key] = time.Duration(now - res.Points.T[n-1])
					mu.Unlock()
				}
			}
		}()
	}

	cpu0 := procCPU(node.Process.Pid)
	var ing0 time.Duration
	for _, p := range procs {
		ing0 += procCPU(p.Process.Pid)
	}
	start := time.Now()
	time.Sleep(window) // the measuring window
	elapsed := time.Since(start)
	nodeCPU := procCPU(node.Process.Pid) - cpu0
	var ingCPU time.Duration
	var ingRSS, ingPeak float64
	for _, p := range procs {
		ingCPU += procCPU(p.Process.Pid)
		r, pk := procRSS(p.Process.Pid)
		ingRSS += r
		ingPeak = max(ingPeak, pk)
	}
	ingCPU -= ing0
	nodeRSS, nodePeak := procRSS(node.Process.Pid)
	close(stop)
	wg.Wait()

	mu.Lock()
	sort.Slice(delays, func(i, j int) bool { return delays[i] < delays[j] })
	q := func(p float64) float64 {
		if len(delays) == 0 {
			return 0
		}
		return float64(delays[int(p*float64(len(delays)-1))]) / 1e6
	}
	p50, p99, n := q(0.5), q(0.99), len(delays)
	// Whether the node keeps up: the delay of the newest sample readable at the end of
	// the window (a node falling behind shows it growing with the window, not near p50).
	var last float64
	for _, d := range lastDelay {
		last = max(last, float64(d)/1e6)
	}
	mu.Unlock()
	load, _ := os.ReadFile("/proc/loadavg")
	b.ReportMetric(float64(n), "readable_samples")
	if n == 0 {
		// A node that does not keep up at all is a result, not a failed benchmark: the
		// figures say so (no delay, readable_samples 0).
		b.Logf("no probed sample became readable during the %v window: the node does not keep up with %d samples/s", elapsed.Round(time.Second), perFrameOf(sims)*rate)
	}
	b.ReportMetric(100*nodeCPU.Seconds()/elapsed.Seconds(), "node_cpu_%")
	b.ReportMetric(nodeRSS, "node_rss_MiB")
	b.ReportMetric(100*ingCPU.Seconds()/elapsed.Seconds(), "pmu_cpu_%")
	b.ReportMetric(ingRSS, "pmu_rss_MiB")
	if n > 0 {
		b.ReportMetric(p50, "delay_p50_ms")
		b.ReportMetric(p99, "delay_p99_ms")
		b.ReportMetric(last, "delay_end_ms")
	}
	b.ReportMetric(float64(perFrameOf(sims)*rate), "samples_per_s")
	b.Logf("%d stream(s) × %d PMU(s) at %d frames/s for %v: node CPU %.1f%% RSS %.1f MiB (peak %.1f); %d ingester process(es) CPU %.1f%% RSS %.1f MiB in all (peak of one %.1f); delay to readable p50 %.0f ms p99 %.0f ms over %d samples, at the end %.0f ms; loadavg %s",
		streams, perPDC, rate, elapsed.Round(time.Second), 100*nodeCPU.Seconds()/elapsed.Seconds(), nodeRSS, nodePeak,
		len(procs), 100*ingCPU.Seconds()/elapsed.Seconds(), ingRSS, ingPeak, p50, p99, n, last, strings.TrimSpace(string(load)))
}
