package store

import (
	"fmt"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/tsdht/tsdht/tsdb/series"
)

// walSyncs returns how many times p's engine has synced its WAL.
func walSyncs(t *testing.T, p *Pebble) uint64 {
	t.Helper()
	var m dto.Metric
	if err := p.db.Metrics().LogWriter.FsyncLatency.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// TestDeclareSeriesManySyncsOnce: a replica declaring a write's new series under
// SyncAlways syncs once for all of them (where one DeclareSeries each synced each), and
// what it acknowledged is in the store when it is opened again.
func TestDeclareSeriesManySyncsOnce(t *testing.T) {
	dir := t.TempDir()
	p, err := OpenPebble(dir, PebbleOptions{Sync: SyncAlways, SealInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	keys, ds := make([]string, n), make([]Decl, n)
	for i := range n {
		keys[i], ds[i] = fmt.Sprintf("db/m,host=h%d#f", i), Decl{Type: series.Float, Quantum: 60}
	}
	before := walSyncs(t, p)
	_, errs := p.DeclareSeriesMany(keys, ds)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("declaration %d: %v", i, err)
		}
	}
	// One sync, and at most one more should the engine roll its WAL over meanwhile.
	if syncs := walSyncs(t, p) - before; syncs < 1 || syncs > 2 {
		t.Errorf("%d new series declared with %d WAL syncs; want 1 (2 at most)", n, syncs)
	}
	// Declared again: nothing new to write, nothing to sync.
	before = walSyncs(t, p)
	if _, errs := p.DeclareSeriesMany(keys, ds); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if syncs := walSyncs(t, p) - before; syncs != 0 {
		t.Errorf("declaring %d known series synced the WAL %d times; want 0", n, syncs)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p, err = OpenPebble(dir, PebbleOptions{Sync: SyncAlways, SealInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, k := range keys {
		if d, ok := p.SeriesDecl(k); !ok || d != (Decl{Type: series.Float, Quantum: 60}) {
			t.Fatalf("after reopening, SeriesDecl(%q) = %+v, %v; want float, 60 s", k, d, ok)
		}
	}
	if got := p.Stats().Series; got != n {
		t.Errorf("after reopening, Stats().Series = %d; want %d", got, n)
	}
}
