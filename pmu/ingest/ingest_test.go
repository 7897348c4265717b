package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/pmu/c37118"
	"github.com/tsdht/tsdht/pmu/sim"
	"github.com/tsdht/tsdht/tsdb/series"
)

// memStore is an in-process Writer with tsdht's semantics (a timestamp written twice
// keeps the last value; one type per series) that can be made unreachable.
type memStore struct {
	mu    sync.Mutex
	data  map[string]map[int64]float64
	types map[string]series.Type
	down  atomic.Bool
	puts  atomic.Int64
	metas atomic.Pointer[Stream]
}

func newMemStore() *memStore {
	return &memStore{data: map[string]map[int64]float64{}, types: map[string]series.Type{}}
}

var errDown = errors.New("cluster unreachable (test)")

func (m *memStore) Put(ctx context.Context, key string, pts series.Points) (int, error) {
	m.puts.Add(1)
	if m.down.Load() {
		return 0, errDown
	}
	if err := pts.Valid(); err != nil {
		return 0, Rejected(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.types[key]; ok && t != pts.Type {
		return 0, Rejected(fmt.Errorf("type mismatch on %q", key))
	}
	m.types[key] = pts.Type
	s := m.data[key]
	if s == nil {
		s = map[int64]float64{}
		m.data[key] = s
	}
	for i, t := range pts.T {
		if pts.Type == series.Int {
			s[t] = float64(pts.I[i])
		} else {
			s[t] = pts.F[i]
		}
	}
	return pts.Len(), nil
}

func (m *memStore) Describe(ctx context.Context, s Stream) error {
	m.metas.Store(&s)
	return nil
}

func (m *memStore) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, s := range m.data {
		n += len(s)
	}
	return n
}

type rig struct {
	t    *testing.T
	sim  *sim.Sim
	in   *Ingester
	st   *memStore
	stop context.CancelFunc
	done chan error
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startRig(t *testing.T, sc sim.Config, ic Config) *rig {
	t.Helper()
	s, err := sim.Start(sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ic.Connect = s.Addr()
	ic.IDCode = s.Settings().IDCode
	if ic.Flush == 0 {
		ic.Flush = 100 * time.Millisecond
	}
	ic.BackoffMin, ic.BackoffMax = 20*time.Millisecond, 200*time.Millisecond
	if ic.Logger == nil {
		ic.Logger = quietLogger()
	}
	st := newMemStore()
	in, err := New(ic, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &rig{t: t, sim: s, in: in, st: st, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- in.Run(ctx, 5*time.Second) }()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// expectAll checks that every sample of every frame the simulator sent is stored,
// value for value and timestamp for timestamp, and that nothing else is.
func (r *rig) expectAll(prefix string) {
	r.t.Helper()
	want := 0
	for _, run := range r.sim.Runs() {
		for k := run.First; k <= run.Last; k++ {
			want += len(r.sim.Expected(k, prefix))
		}
	}
	testutil.WaitFor(r.t, 20*time.Second, func() bool { return r.st.count() >= want }, "%d samples stored", want)
	r.st.mu.Lock()
	defer r.st.mu.Unlock()
	for _, run := range r.sim.Runs() {
		for k := run.First; k <= run.Last; k++ {
			ts := r.sim.Time(k)
			for key, v := range r.sim.Expected(k, prefix) {
				got, ok := r.st.data[key][ts]
				if !ok {
					r.t.Fatalf("frame %d: %s@%d missing", k, key, ts)
				}
				if got != v && !(math.IsNaN(got) && math.IsNaN(v)) {
					r.t.Fatalf("frame %d: %s@%d = %v, want %v", k, key, ts, got, v)
				}
			}
		}
	}
	if n := 0; true {
		for _, s := range r.st.data {
			n += len(s)
		}
		if n != want {
			r.t.Fatalf("store holds %d samples, the simulator sent %d", n, want)
		}
	}
}

const (
	floatPolar = c37118.FormatPolar | c37118.FormatPhasorFloat | c37118.FormatFreqFloat | c37118.FormatAnalogFloat
)

func TestEveryFormatStoredExactly(t *testing.T) {
	cases := map[string]sim.Config{
		"float polar":       {Stations: []sim.Station{{Name: "PMU1", Format: floatPolar, Phasors: 4, Analogs: 1, Digitals: 1}}},
		"int16 rectangular": {Stations: []sim.Station{{Name: "Sub A/bay 3", Format: 0, Phasors: 4, Analogs: 1, Digitals: 1}}},
		"int16 polar 2005":  {Version: c37118.Version2005, Stations: []sim.Station{{Name: "OLD", Format: c37118.FormatPolar, Phasors: 2, Analogs: 2, Digitals: 2}}},
		"PDC 2 PMUs 50 Hz": {IDCode: 100, Rate: 50, Stations: []sim.Station{
			{Name: "NORTH", Format: 0, Phasors: 3, Analogs: 1, Digitals: 1, NominalHz: 50},
			{Name: "SOUTH", Format: floatPolar, Phasors: 2, NominalHz: 50}}},
	}
	for name, sc := range cases {
		t.Run(name, func(t *testing.T) {
			r := startRig(t, sc, Config{Prefix: "site/"})
			testutil.WaitFor(t, 10*time.Second, func() bool { return r.sim.Sent() >= 30 }, "30 frames")
			r.sim.Pause(true)
			r.expectAll("site/")
			meta := r.st.metas.Load()
			if meta == nil || len(meta.Series) != len(r.sim.Expected(0, "site/")) || meta.Config.IDCode != r.sim.Settings().IDCode {
				t.Fatalf("metadata: %+v", meta)
			}
			testutil.WaitFor(t, 5*time.Second, func() bool {
				m := r.st.metas.Load()
				return m.Header == r.sim.Settings().Header && m.Config3 != nil && len(m.Config3.PMUs) == len(r.sim.Settings().Stations)
			}, "header text and CFG-3")
		})
	}
}

func TestClusterDownSpoolsThenReplaysInOrder(t *testing.T) {
	dir := t.TempDir()
	r := startRig(t, sim.Config{Rate: 120}, Config{Spool: dir})
	r.st.down.Store(true)
	testutil.WaitFor(t, 10*time.Second, func() bool { return r.in.Stats().QueuedBatches >= 5 }, "batches spooled")
	if r.st.count() != 0 {
		t.Fatal("stored while down")
	}
	r.st.down.Store(false)
	testutil.WaitFor(t, 10*time.Second, func() bool { return r.in.Stats().QueuedBatches == 0 }, "spool drained")
	r.sim.Pause(true)
	r.expectAll("")
	if st := r.in.Stats(); st.WriteRetries == 0 || st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSpoolSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s, err := sim.Start(sim.Config{Rate: 200})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st := newMemStore()
	st.down.Store(true)
	cfg := Config{Connect: s.Addr(), Spool: dir, Flush: 50 * time.Millisecond, Logger: quietLogger(),
		BackoffMin: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond}
	in, err := New(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- in.Run(ctx, 0) }()
	testutil.WaitFor(t, 10*time.Second, func() bool { return in.Stats().QueuedBatches >= 5 }, "spooled")
	cancel()
	<-done
	spooled := in.Stats().Samples
	// A second ingester on the same spool, with the cluster back, writes it all.
	st.down.Store(false)
	s.Pause(true)
	in2, err := New(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go in2.Run(ctx2, time.Second)
	testutil.WaitFor(t, 10*time.Second, func() bool { return int64(st.count()) == spooled }, "replayed")
}

func TestFullQueueDropsAreCounted(t *testing.T) {
	r := startRig(t, sim.Config{Rate: 1000}, Config{MemoryBytes: 64 << 10, Flush: 20 * time.Millisecond})
	r.st.down.Store(true)
	testutil.WaitFor(t, 20*time.Second, func() bool { return r.in.Stats().Dropped > 0 }, "drops")
	st := r.in.Stats()
	if st.QueuedBytes > 64<<10 {
		t.Fatalf("queue over its bound: %+v", st)
	}
	r.st.down.Store(false)
	r.sim.Pause(true)
	testutil.WaitFor(t, 10*time.Second, func() bool { return r.in.Stats().QueuedBatches == 0 }, "queue drained")
	testutil.WaitFor(t, 10*time.Second, func() bool {
		st = r.in.Stats()
		return st.Samples == st.Stored+st.Dropped
	}, "accounting")
	if int64(r.st.count()) != st.Stored {
		t.Fatalf("store %d, stats %+v", r.st.count(), st)
	}
}

func TestBadCRCFramesCountedNeverStored(t *testing.T) {
	r := startRig(t, sim.Config{CorruptEvery: 7}, Config{})
	testutil.WaitFor(t, 10*time.Second, func() bool { return r.sim.Corrupted() >= 5 }, "frames")
	r.sim.Pause(true)
	r.expectAll("") // exactly the good frames, no sample of a corrupt one
	testutil.WaitFor(t, 5*time.Second, func() bool { return r.in.Stats().BadCRC == r.sim.Corrupted() }, "bad CRC count")
}

func TestConfigChangeIsReread(t *testing.T) {
	r := startRig(t, sim.Config{}, Config{})
	testutil.WaitFor(t, 10*time.Second, func() bool { return r.in.Stats().ConfigChanges == 1 && r.sim.Sent() > 5 }, "first config")
	r.sim.BumpConfig()
	testutil.WaitFor(t, 10*time.Second, func() bool { return r.in.Stats().ConfigChanges == 2 }, "config re-read")
	if got := r.in.Stream().Config.PMUs[0].CfgCnt; got != 1 {
		t.Fatalf("CFGCNT %d after the change, want 1", got)
	}
}

func TestReconnectsAfterTheStreamDrops(t *testing.T) {
	r := startRig(t, sim.Config{}, Config{})
	testutil.WaitFor(t, 10*time.Second, func() bool { return r.in.Stats().DataFrames > 5 }, "data")
	r.sim.DropConnections()
	testutil.WaitFor(t, 10*time.Second, func() bool { return r.in.Stats().Connects >= 2 }, "reconnect")
	n := r.in.Stats().DataFrames
	testutil.WaitFor(t, 10*time.Second, func() bool { return r.in.Stats().DataFrames > n+5 }, "data again")
	r.sim.Pause(true)
	r.expectAll("")
}

func TestNaming(t *testing.T) {
	for in, want := range map[string]string{"  Sub A/bay 3 ": "Sub_A_bay_3", "ok.name_-9": "ok.name_-9", "": "_", "ü": "_"} {
		if got := CleanName(in); got != want {
			t.Errorf("CleanName(%q) = %q, want %q", in, got, want)
		}
	}
	cfg := &c37118.Config{PMUs: []c37118.PMU{
		{Station: "A", Phasors: []c37118.Phasor{{Name: "V"}, {Name: "V"}}, NominalHz: 60},
		{Station: "A", Format: c37118.FormatPolar, Phasors: []c37118.Phasor{{Name: "freq", Kind: c37118.PhasorCurrent}}, NominalHz: 50},
	}}
	m, err := mapChannels(cfg, "p/")
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]SeriesMeta{}
	for _, s := range m.meta {
		if _, dup := keys[s.Key]; dup {
			t.Fatalf("duplicate key %q", s.Key)
		}
		keys[s.Key] = s
	}
	for _, k := range []string{"p/A/V/re", "p/A/V_2/im", "p/A_2/freq_2/mag", "p/A_2/freq_2/ang", "p/A_2/freq", "p/A/stat", "p/A_2/timequality"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("missing key %q among %v", k, keys)
		}
	}
	if u := keys["p/A_2/freq_2/ang"].Unit; u != "rad" {
		t.Errorf("angle unit %q", u)
	}
	if tg := keys["p/A_2/freq_2/mag"].Tags(); tg["unit"] != "A" || tg["nominal_hz"] != "50" {
		t.Errorf("tags %v", tg)
	}
	long := string(make([]byte, 300))
	if _, err := mapChannels(cfg, long); err == nil {
		t.Error("a prefix making keys over 256 bytes was accepted")
	}
}

func FuzzDecodeBatch(f *testing.F) {
	var b Batch
	b.addFloat("a/b", 1, 2.5)
	b.addInt("c", 5, -3)
	f.Add(AppendBatch(nil, &b))
	f.Fuzz(func(t *testing.T, rec []byte) {
		b, err := DecodeBatch(rec)
		if err != nil {
			return
		}
		if b.Len() > 8*len(rec) {
			t.Fatalf("%d points from %d bytes", b.Len(), len(rec))
		}
	})
}

func TestFloatFreqDeviationReading(t *testing.T) {
	r := startRig(t, sim.Config{}, Config{FloatFreq: FloatFreqDeviation})
	testutil.WaitFor(t, 10*time.Second, func() bool { return r.sim.Sent() >= 10 }, "frames")
	r.sim.Pause(true)
	run := r.sim.Runs()[0]
	want := r.sim.Expected(run.First, "")["PMU1/freq"] + 60 // the simulator sends the actual frequency
	testutil.WaitFor(t, 10*time.Second, func() bool {
		r.st.mu.Lock()
		defer r.st.mu.Unlock()
		_, ok := r.st.data["PMU1/freq"][r.sim.Time(run.First)]
		return ok
	}, "stored")
	r.st.mu.Lock()
	defer r.st.mu.Unlock()
	if got := r.st.data["PMU1/freq"][r.sim.Time(run.First)]; got != want {
		t.Fatalf("deviation reading stored %v, want %v", got, want)
	}
}

func TestRejectedWritesAreCountedNotRetried(t *testing.T) {
	st := newMemStore()
	st.types["PMU1/freq"] = series.Int // another writer made it an int series
	s, err := sim.Start(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	in, err := New(Config{Connect: s.Addr(), Flush: 50 * time.Millisecond, Logger: quietLogger()}, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- in.Run(ctx, time.Second) }()
	testutil.WaitFor(t, 10*time.Second, func() bool { return s.Sent() >= 30 }, "frames")
	s.Pause(true)
	testutil.WaitFor(t, 10*time.Second, func() bool {
		x := in.Stats()
		return x.Queued == x.Samples && x.QueuedBatches == 0
	}, "all written or rejected")
	cancel()
	<-done
	x := in.Stats()
	freq := int64(len(st.data["PMU1/dfreq"]))
	if x.Rejected != freq || x.Stored+x.Rejected != x.Samples || x.WriteRetries != 0 {
		t.Fatalf("rejected %d (want %d, one per frame), stats %+v", x.Rejected, freq, x)
	}
}

// A cancel must end Run while the PMU keeps sending: the read loop re-arms its deadline
// on every frame, so a cancel landing between frames must not be overwritten by it.
func TestStopsPromptlyWhileFramesFlow(t *testing.T) {
	s, err := sim.Start(sim.Config{Rate: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 0; i < 40; i++ {
		in, err := New(Config{Connect: s.Addr(), Flush: 10 * time.Millisecond, Logger: quietLogger(),
			BackoffMin: time.Millisecond, BackoffMax: 10 * time.Millisecond}, newMemStore())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- in.Run(ctx, 0) }()
		sent := s.Sent()
		testutil.WaitFor(t, 10*time.Second, func() bool { return in.Stats().DataFrames > 0 && s.Sent() > sent+int64(i%7) }, "frames")
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("run %d: Run did not return within 10 s of its cancel while frames kept coming", i)
		}
	}
}
