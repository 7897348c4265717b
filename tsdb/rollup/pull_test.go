package rollup

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// fakeSource is a cluster of two raw replicas holding one point (value 1) in every
// quantum of [first, last] (ns), and a home list.
type fakeSource struct {
	q           quanta.Quantum
	first, last int64
	mu          sync.Mutex
	homes       []dht.Peer
	disagree    int64 // a quantum whose second replica holds another copy; 0: none
	asked       []int64
}

func (f *fakeSource) Homes(context.Context, string) ([]dht.Peer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.homes, nil
}

func (f *fakeSource) Entry(_ context.Context, key string) (catalog.Entry, error) {
	return catalog.Entry{Key: key, Type: series.Float, First: f.first, Last: f.last, HasBounds: true}, nil
}

func (f *fakeSource) QuantumStats(_ context.Context, _ string, starts []int64) ([][]Answer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range starts {
		f.asked = append(f.asked, f.q.BeginNanos(s))
	}
	out := make([][]Answer, len(starts))
	for i, start := range starts {
		s := f.q.BeginNanos(start)
		out[i] = make([]Answer, 2)
		for j := range out[i] {
			a := Answer{OK: true}
			if s >= f.first && s <= f.last {
				p := agg.Partial{Type: series.Float, Count: 1, Min: 1, Max: 1, Sum: 1}
				a.Res = wire.ShardAggResult{Held: true, Count: 1, Type: series.Float, Hash: uint64(s), Windows: []agg.Window{{Start: s, Partial: p}}}
				if j == 1 && s == f.disagree {
					a.Res.Hash++
				}
			}
			out[i][j] = a
		}
	}
	return out, nil
}

// readOf reads [from, to) of level width and returns the known ranges and the windows.
func readOf(t *testing.T, r *Homes, key string, width, from, to int64) ([]int64, []agg.Window) {
	t.Helper()
	resp, err := r.Read(&wire.RollupReadReq{Key: key, Width: width, From: from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	var ws []agg.Window
	if len(resp.Packed) > 0 {
		if _, ws, err = agg.DecodeWindowsWire(resp.Packed); err != nil {
			t.Fatal(err)
		}
	}
	return resp.Known, ws
}

// A home needs nothing of the cluster but a Source: it pulls up to the series' bounds
// (no quantum past them is asked for), settles a window only where the replicas agree,
// merges the coarser levels once every finer window under them is settled, and drops
// a series at the second pass it is no longer one of its homes.
func TestHomesPullThroughSource(t *testing.T) {
	q := quanta.Quantum(10)
	day, hour, min := int64(24*time.Hour), int64(time.Hour), int64(time.Minute)
	t0 := agg.WindowStart(time.Now().UnixNano(), day) - 3*day
	src := &fakeSource{q: q, first: t0, last: t0 + hour - 1, homes: []dht.Peer{{ID: "me"}}, disagree: t0 + 30*min}
	cfg := Config{}.WithDefaults(q)
	r := NewHomes(cfg, src, Options{Quantum: q, ReadQuorum: 2, Self: "me"})
	ctx := context.Background()
	const key = "k"
	if known, _ := readOf(t, r, key, min, t0, t0+hour); len(known) != 0 {
		t.Fatalf("before any pull the home vouches for %v", known)
	}
	if err := r.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range src.asked {
		if s > src.last {
			t.Fatalf("the home asked for quantum %d, past the series' bounds", (s-t0)/int64(q.Duration()))
		}
	}
	known, ws := readOf(t, r, key, min, t0, t0+hour)
	if want := fmt.Sprint([]int64{t0, t0 + 30*min, t0 + 31*min, t0 + hour}); fmt.Sprint(known) != want {
		t.Fatalf("minutes known %v, want all but the one the replicas disagree on %v", known, want)
	}
	if len(ws) != 59 || ws[0].Count != 6 {
		t.Fatalf("%d minutes held (first %+v), want 59 of 6 points", len(ws), ws[0])
	}
	if known, _ := readOf(t, r, key, hour, t0, t0+hour); len(known) != 0 {
		t.Fatalf("the hour over an unsettled minute is vouched for: %v", known)
	}

	src.mu.Lock()
	src.disagree = 0 // repaired
	src.mu.Unlock()
	if err := r.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	known, ws = readOf(t, r, key, day, t0, t0+day)
	if fmt.Sprint(known) != fmt.Sprint([]int64{t0, t0 + day}) || len(ws) != 1 || ws[0].Count != 360 || ws[0].Sum != 360 {
		t.Fatalf("the day after the repair: known %v, windows %+v; want it whole with 360 points", known, ws)
	}

	src.mu.Lock()
	src.homes = []dht.Peer{{ID: "other"}}
	src.mu.Unlock()
	for pass := range 2 {
		if err := r.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		if got, want := r.Stats().Series, 1-pass; got != want {
			t.Fatalf("after %d passes away: %d series held, want %d", pass+1, got, want)
		}
	}
	if d := r.Stats().Dropped; d != 1 {
		t.Fatalf("%d series dropped, want 1", d)
	}
}
