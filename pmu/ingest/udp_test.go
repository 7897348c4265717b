package ingest

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/pmu/c37118"
	"github.com/tsdht/tsdht/pmu/sim"
)

// TCP commands + UDP data over a lossy "network": datagrams dropped, reordered,
// duplicated and corrupted, plus garbage from elsewhere. Every frame that arrived is
// stored exactly; a dropped one is a missed frame (a gap), not an error.
func TestUDPDataStoredExactly(t *testing.T) {
	addr := testutil.FreeAddr(t)
	r := startRig(t, sim.Config{Rate: 120, UDPData: addr, DropEvery: 50, ReorderEvery: 13, DuplicateEvery: 17, CorruptEvery: 23,
		Stations: []sim.Station{{Name: "PMU U", Format: floatPolar, Phasors: 4, Analogs: 1, Digitals: 1}}},
		Config{DataUDP: addr})
	testutil.WaitFor(t, 10*time.Second, func() bool { return r.in.Stats().DataFrames > 10 }, "data over UDP")
	// Datagrams that are not frames, or not whole ones, from another socket.
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	frame, _ := r.sim.DataFrame(1)
	for _, b := range [][]byte{[]byte("not a frame at all"), frame[:len(frame)-3], append(append([]byte(nil), frame...), 0)} {
		c.Write(b)
	}
	c.Close()
	testutil.WaitFor(t, 20*time.Second, func() bool { return r.sim.Sent() >= 300 }, "300 frames")
	r.sim.Pause(true)
	r.expectAll("")
	if !testutil.Poll(5*time.Second, func() bool {
		st := r.in.Stats()
		return st.BadCRC == r.sim.Corrupted() && st.BadFrames == 3
	}) {
		st := r.in.Stats()
		t.Fatalf("bad CRC %d (%d corrupted sent), bad frames %d (3 garbage datagrams sent)", st.BadCRC, r.sim.Corrupted(), st.BadFrames)
	}
	st := r.in.Stats()
	sent := r.sim.Sent()
	// The frames that never arrived whole: dropped, corrupted, skipped by a simulator
	// that fell behind — every index between the first and the last frame sent, less
	// those sent.
	runs := r.sim.Runs()
	gaps := runs[len(runs)-1].Last - runs[0].First + 1 - sent
	dups := sent / 17 // lower bounds: frames that fell due while paused were not sent
	if st.MissedFrames != gaps || st.LateFrames < sent/13-2 || st.DuplicateFrames < dups-2 || st.Connects != 1 {
		t.Fatalf("missed %d (gaps %d: %d dropped, %d corrupted), late %d (≈%d reordered), duplicates %d (≈%d), connects %d",
			st.MissedFrames, gaps, r.sim.Dropped(), r.sim.Corrupted(), st.LateFrames, sent/13, st.DuplicateFrames, dups, st.Connects)
	}
	if r.sim.Dropped() < 5 {
		t.Fatalf("only %d datagrams dropped: the test did not test gaps", r.sim.Dropped())
	}
	t.Logf("%d frames stored; %d missed, %d late, %d duplicates, %d bad CRC", sent, st.MissedFrames, st.LateFrames, st.DuplicateFrames, st.BadCRC)
}

// A PMU that goes silent on UDP is asked for data again, then reconnected to.
func TestUDPSilenceAsksAgainThenReconnects(t *testing.T) {
	addr := testutil.FreeAddr(t)
	r := startRig(t, sim.Config{UDPData: addr}, Config{DataUDP: addr, ReadTimeout: 300 * time.Millisecond})
	testutil.WaitFor(t, 10*time.Second, func() bool { return r.in.Stats().DataFrames > 10 }, "data over UDP")
	r.sim.Pause(true)
	testutil.WaitFor(t, 10*time.Second, func() bool { return r.in.Stats().Connects >= 2 }, "a reconnect")
	n := r.in.Stats().DataFrames
	r.sim.Pause(false)
	testutil.WaitFor(t, 10*time.Second, func() bool { return r.in.Stats().DataFrames > n+10 }, "data again")
	r.sim.Pause(true)
	r.expectAll("")
}

func TestUDPAddressInUseIsAClearError(t *testing.T) {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = New(Config{Connect: "127.0.0.1:4712", DataUDP: c.LocalAddr().String(), Logger: quietLogger()}, newMemStore())
	if err == nil || !strings.Contains(err.Error(), "UDP data address") {
		t.Fatalf("err %v", err)
	}
	if err := (Config{Connect: "127.0.0.1:4712", DataUDP: "4713"}).Validate(); err == nil || !strings.Contains(err.Error(), ":PORT") {
		t.Fatalf("a port without a colon: %v", err)
	}
}

// A CFG-3 sent in fragments is reassembled; its metadata (long CFG-3 names) reaches
// the Describer as tags.
func TestFragmentedCFG3IsReassembled(t *testing.T) {
	long := strings.Repeat("Substation-North-Feeder-", 8)
	r := startRig(t, sim.Config{Cfg3Fragment: 100, Cfg3Names: long}, Config{Prefix: "f/"})
	frags, err := r.sim.Config(c37118.TypeCfg3).AppendFragments(100)
	if err != nil || len(frags) < 5 {
		t.Fatalf("the simulator's CFG-3 comes in %d fragments (%v); the test wants several", len(frags), err)
	}
	testutil.WaitFor(t, 10*time.Second, func() bool {
		m := r.st.metas.Load()
		return m != nil && m.Config3 != nil
	}, "CFG-3")
	m := r.st.metas.Load()
	if got := m.Config3.PMUs[0].Phasors[0].Name; got != long+"PH1 V" {
		t.Fatalf("reassembled CFG-3 phasor name %q", got)
	}
	tagged := 0
	for _, sm := range m.Series {
		tags := m.TagsOf(sm)
		if sm.Quantity == "mag" || sm.Quantity == "ang" {
			if !strings.HasPrefix(tags["cfg3_name"], long) {
				t.Fatalf("%s: tags %v lack the CFG-3 name", sm.Key, tags)
			}
			tagged++
		}
	}
	if tagged == 0 || r.in.Stats().Cfg3Errors != 0 {
		t.Fatalf("%d series tagged, %d CFG-3 errors", tagged, r.in.Stats().Cfg3Errors)
	}
}

// UDP-only: commands go as datagrams too, every frame comes back as one; the same
// lossy network; every frame that arrived is stored exactly.
func TestUDPOnlyStoredExactly(t *testing.T) {
	r := startRig(t, sim.Config{UDPOnly: true, Rate: 120, DropEvery: 40, ReorderEvery: 11, DuplicateEvery: 19, Cfg3Fragment: 100,
		Stations: []sim.Station{{Name: "PMU O", Format: floatPolar, Phasors: 2, Analogs: 1, Digitals: 1}}},
		Config{UDPOnly: true, DataUDP: "127.0.0.1:0"})
	testutil.WaitFor(t, 20*time.Second, func() bool { return r.sim.Sent() >= 200 }, "200 frames")
	r.sim.Pause(true)
	r.expectAll("")
	runs := r.sim.Runs()
	gaps := runs[len(runs)-1].Last - runs[0].First + 1 - r.sim.Sent()
	testutil.WaitFor(t, 10*time.Second, func() bool {
		m := r.st.metas.Load()
		return m != nil && m.Config3 != nil && m.Header != ""
	}, "CFG-3 and the header")
	st := r.in.Stats()
	if st.MissedFrames != gaps || st.LateFrames == 0 || st.DuplicateFrames == 0 || st.Connects != 1 || st.BadCRC != 0 || st.BadFrames != 0 {
		t.Fatalf("stats %+v; %d frames missing between the first and the last sent", st, gaps)
	}
}

// UDP-only against a PMU that does not answer: the commands are sent again, with
// back-off, and the error says what is missing.
func TestUDPOnlySilentPMURetries(t *testing.T) {
	pmu, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pmu.Close()
	in, err := New(Config{UDPOnly: true, Connect: pmu.LocalAddr().String(), ReadTimeout: 200 * time.Millisecond,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond, Logger: quietLogger()}, newMemStore())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx, time.Second) }()
	defer func() { cancel(); <-done }()
	// Each round sends "data off" then "send CFG-2": two rounds, four commands.
	pmu.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 100)
	var cmds []uint16
	for len(cmds) < 4 {
		n, _, err := pmu.ReadFrom(buf)
		if err != nil {
			t.Fatalf("after %v commands: %v", cmds, err)
		}
		_, cmd, err := c37118.ParseCommand(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	if cmds[0] != c37118.CmdDataOff || cmds[1] != c37118.CmdSendCFG2 || cmds[2] != c37118.CmdDataOff || cmds[3] != c37118.CmdSendCFG2 {
		t.Fatalf("commands %v", cmds)
	}
}
