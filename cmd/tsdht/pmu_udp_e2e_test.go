package main

import (
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/pmu/sim"
)

// TestPMUEndToEndUDP: as TestPMUEndToEnd, over UDP, two streams at once into a 3-node
// cluster: TCP commands + UDP data (`tsdht pmu --udp-data`), and UDP only (`--udp-only`).
// Each PMU runs at 60 frames/s on a network that drops one datagram in 300 and reorders
// one in 97, and sends its CFG-3 in fragments. Every frame that arrived is stored
// exactly; each dropped one is counted as a missed frame (a gap), not an error; the
// reassembled CFG-3's channel names are tags in the catalog.
func TestPMUEndToEndUDP(t *testing.T) {
	c := startE2ECluster(t, 3, "--sync", "always")
	run := pmuTestSeconds(60*time.Second, 6*time.Second)
	long := strings.Repeat("Substation-West-", 10)
	type stream struct {
		name, prefix string
		s            *sim.Sim
		p            *pmuProc
	}
	var streams []stream
	for _, mode := range []string{"udp-data", "udp-only"} {
		cfg := sim.Config{Rate: 60, DropEvery: 300, ReorderEvery: 97, Cfg3Fragment: 256, Cfg3Names: long,
			Stations: []sim.Station{{Name: "PMU U", Format: simFloatPolar, Phasors: 4, Analogs: 1, Digitals: 1}}}
		local := testutil.FreeAddr(t)
		args := []string{"--udp-data", local}
		if mode == "udp-only" {
			cfg.UDPOnly, cfg.Listen = true, testutil.FreeAddr(t)
			args = append(args, "--udp-only")
		} else {
			cfg.UDPData = local
		}
		s, err := sim.Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		prefix := "e2e/" + mode + "/"
		streams = append(streams, stream{mode, prefix, s, startPMUIngester(t, c.Bin, c.addrs(), s, prefix, t.TempDir(), args...)})
	}
	deadline := time.Now().Add(run)
	for _, st := range streams {
		st.p.waitCounter(st.name+": data frames", 30*time.Second, func(m map[string]int64) bool { return m["data_frames_total"] > 0 })
	}
	time.Sleep(time.Until(deadline)) // the streams run for their set time: that is the test
	for i, st := range streams {
		s, p, prefix := st.s, st.p, st.prefix
		s.Pause(true)
		runs := s.Runs()
		want := map[string][]sample{}
		for _, r := range runs {
			expectFrames(want, s, prefix, r.First, r.Last)
		}
		total := 0
		for _, v := range want {
			total += len(v)
		}
		m := p.waitCounter(st.name+": every sample stored", 60*time.Second, func(m map[string]int64) bool {
			return m["samples_stored_total"] >= int64(total) && m["queued_batches"] == 0
		})
		gaps := runs[len(runs)-1].Last - runs[0].First + 1 - s.Sent()
		if m["connects_total"] != 1 || m["samples_dropped_total"] != 0 || m["samples_rejected_total"] != 0 ||
			m["bad_crc_frames_total"] != 0 || m["bad_frames_total"] != 0 || m["cfg3_errors_total"] != 0 {
			t.Fatalf("%s: counters %v", st.name, m)
		}
		if s.Dropped() < 1 || m["missed_frames"] != gaps || m["late_frames_total"] < 1 {
			t.Fatalf("%s: %d datagrams dropped, %d frames missing between the first and the last sent; the ingester counts %d missed, %d late",
				st.name, s.Dropped(), gaps, m["missed_frames"], m["late_frames_total"])
		}
		n := checkStored(c, i%3, want)
		t.Logf("%s: %d runs of frames, %d dropped datagrams (%d missed frames counted), %d series, %d samples stored exactly",
			st.name, len(runs), s.Dropped(), m["missed_frames"], len(want), n)

		// The CFG-3 came in fragments; its long phasor names are catalog tags.
		var out, errOut string
		var code int
		if !testutil.Poll(30*time.Second, func() bool {
			out, errOut, code = c.Run("", "series", "--cluster", c.Nodes[0].RPC, "--prefix", prefix+"PMU_U/PH1_V/")
			return code == 0 && strings.Count(out, "cfg3_name="+long) == 2 // mag and ang
		}) {
			t.Fatalf("%s: the CFG-3 name is not a tag of PH1 V's series (exit %d %s):\n%s", st.name, code, errOut, out)
		}
		p.stopGracefully()
	}
}
