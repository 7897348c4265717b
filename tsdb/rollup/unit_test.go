package rollup

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

func TestConfigDefaultsAndValidate(t *testing.T) {
	d := Config{}.WithDefaults(quanta.Quantum(10))
	if len(d.Levels) != 3 || d.Horizon != 2*time.Minute || d.MaxSeries != 4096 {
		t.Fatalf("defaults for 10 s quanta: %+v", d)
	}
	if d := (Config{}).WithDefaults(quanta.Quantum(3600)); len(d.Levels) != 2 || d.Levels[0] != time.Hour {
		t.Fatalf("defaults for 1 h quanta keep the levels that are multiples: %v", d.Levels)
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Levels: []time.Duration{15 * time.Second}}, "multiple of the quantum"},
		{Config{Levels: []time.Duration{time.Hour, time.Minute}}, "larger multiple"},
		{Config{Horizon: 5 * time.Second}, "at least two quanta"},
		{Config{MaxSeries: -1}, "must not be negative"},
	} {
		err := c.cfg.Validate(quanta.Quantum(10))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
	if err := (Config{}).Validate(quanta.Quantum(10)); err != nil {
		t.Fatal(err)
	}
}

// Rollups are on unless turned off, wherever a level fits the quantum: a quantum that
// divides none of the default levels leaves them off rather than failing the node.
func TestConfigOnByDefault(t *testing.T) {
	q := quanta.Quantum(10)
	if !(Config{}).WithDefaults(q).On() {
		t.Error("the zero Config keeps no rollups: want them on by default")
	}
	if (Config{Off: true}).WithDefaults(q).On() {
		t.Error("Off keeps rollups")
	}
	odd := quanta.Quantum(7) // divides no minute, hour or day
	if c := (Config{}).WithDefaults(odd); c.On() || c.Validate(odd) != nil {
		t.Errorf("7 s quanta: on %v, validate %v; want off and valid", c.On(), c.Validate(odd))
	}
	if c := (Config{Levels: []time.Duration{70 * time.Second}}).WithDefaults(odd); !c.On() || c.Validate(odd) != nil {
		t.Errorf("7 s quanta with a 70 s level: on %v, validate %v; want on and valid", c.On(), c.Validate(odd))
	}
}

// A home refuses reads it cannot answer with an error naming what to change, and
// answers a series it does not hold yet with nothing known (and starts holding it).
func TestRollupHomeReadChecks(t *testing.T) {
	cfg := Config{Retention: []time.Duration{0, 0, 0}}.WithDefaults(quanta.Quantum(10))
	r := NewHomes(cfg, nil, Options{Quantum: quanta.Quantum(10)})
	min := int64(time.Minute)
	for _, c := range []struct {
		req  wire.RollupReadReq
		code string
		want string
	}{
		{wire.RollupReadReq{Key: "k", Width: 7 * min, From: 0, To: 7 * min}, wire.CodeBadInput, "not a level"},
		{wire.RollupReadReq{Key: "k", Width: min, From: 5, To: min}, wire.CodeBadInput, "aligned"},
		{wire.RollupReadReq{Key: "k", Width: min, From: min, To: min}, wire.CodeBadInput, "non-empty"},
		{wire.RollupReadReq{Key: "k", Width: min, From: 0, To: (wire.MaxRollupReadWindows + 1) * min}, wire.CodeTooLarge, "ask in parts"},
	} {
		_, err := r.Read(&c.req)
		var re *rpc.RemoteError
		if !errors.As(err, &re) || re.Code != c.code || !strings.Contains(re.Msg, c.want) {
			t.Errorf("%+v: %v, want %s %q", c.req, err, c.code, c.want)
		}
	}
	resp, err := r.Read(&wire.RollupReadReq{Key: "k", Width: min, From: 0, To: 10 * min})
	if err != nil || len(resp.Known) != 0 || len(resp.Packed) != 0 {
		t.Fatalf("unknown series: %+v, %v", resp, err)
	}
	if r.series["k"] == nil {
		t.Fatal("the home did not start keeping the series")
	}
	// A settled window, then a mark: unknown again until pulled.
	s := r.series["k"]
	s.started, s.from, s.front = true, 0, 10*min
	if err := r.st.UpdateRollups(store.RollupUpdate{Key: "k", Put: []store.RollupRecord{{Start: 2 * min, Value: windowValue(agg.Partial{Type: series.Float, Count: 1, Hash: 9})}}}); err != nil {
		t.Fatal(err)
	}
	resp, _ = r.Read(&wire.RollupReadReq{Key: "k", Width: min, From: 0, To: 10 * min})
	if len(resp.Known) != 2 || resp.Known[0] != 0 || resp.Known[1] != 10*min {
		t.Fatalf("known %v", resp.Known)
	}
	// Asked for digests, the home lists the same windows by count and digest only.
	dresp, err := r.Read(&wire.RollupReadReq{Key: "k", Width: min, From: 0, To: 10 * min, Digests: true})
	if err != nil || len(dresp.Packed) != 0 || len(dresp.Known) != 2 || dresp.Known[1] != 10*min {
		t.Fatalf("digests: %+v, %v", dresp, err)
	}
	if ds, err := agg.DecodeDigestsWire(dresp.Digests); err != nil || len(ds) != 1 || ds[0].Start != 2*min || ds[0].Count != 1 || ds[0].Hash != 9 {
		t.Fatalf("digests %+v, %v; want the window at 2 min, count 1, hash 9", ds, err)
	}
	if _, err := r.Mark(&wire.RollupMarkReq{Key: "k", Starts: []int64{2*min + 5}}); err != nil {
		t.Fatal(err)
	}
	resp, _ = r.Read(&wire.RollupReadReq{Key: "k", Width: min, From: 0, To: 10 * min})
	if want := []int64{0, 2 * min, 3 * min, 10 * min}; len(resp.Known) != 4 || resp.Known[1] != want[1] || resp.Known[2] != want[2] {
		t.Fatalf("after a mark, known %v, want %v", resp.Known, want)
	}
	if _, err := r.Read(&wire.RollupReadReq{Key: "k", Width: time.Hour.Nanoseconds(), From: 0, To: time.Hour.Nanoseconds()}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Mark(&wire.RollupMarkReq{Key: "k", Starts: make([]int64, wire.MaxRollupMarks+1)}); err == nil {
		t.Fatal("a mark over the limit was taken")
	}
}

// A level serves an aggregate when each of its windows lies inside one of the
// aggregate's: its width divides the aggregate's, or the whole range is one window of
// it (InfluxQL without GROUP BY time() asks for every = math.MaxInt64).
func TestPlanLevelsFitTheWindows(t *testing.T) {
	c := NewClient(Config{Retention: []time.Duration{0, 0, 0}}.WithDefaults(quanta.Quantum(10)), nil, time.Second, nil)
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	min, hour, day := int64(time.Minute), int64(time.Hour), int64(24*time.Hour)
	from, to := now.UnixNano()-7*day+17e9, now.UnixNano()+1
	for _, k := range []struct {
		name     string
		every    int64
		from, to int64
		want     []int64 // levels, coarsest first; nil: rollups do not help
	}{
		{"per hour", hour, from, to, []int64{hour, min}},
		{"per 2 h", 2 * hour, from, to, []int64{hour, min}},
		{"per day", day, from, to, []int64{day, hour, min}},
		{"per 7 min", 7 * min, from, to, []int64{min}},
		{"per 90 s", 90e9, from, to, nil},
		{"whole range", math.MaxInt64, from, to, []int64{day, hour, min}},
		{"whole range inside the horizon", math.MaxInt64, now.UnixNano() - 90e9, to, nil},
		{"one 90 s window", 90e9, agg.WindowStart(from, 90e9), agg.WindowStart(from, 90e9) + 90e9, []int64{day, hour, min}},
	} {
		p, ok := c.Plan(k.from, k.to, k.every, now)
		if ok != (k.want != nil) || ok && fmt.Sprint(p.levels) != fmt.Sprint(k.want) {
			t.Errorf("%s: planned %v (%v), want levels %v", k.name, ok, p.levels, k.want)
		}
	}
}
