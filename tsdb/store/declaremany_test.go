package store

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/tsdht/tsdht/tsdb/catalog"
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

// syncsSince returns how many WAL syncs p's engine has recorded since it had before,
// at least one: the engine records a sync's latency after it wakes the sync's
// waiters, so the count is waited for (with a deadline), not read at once.
func syncsSince(t *testing.T, p *Pebble, before uint64) uint64 {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for walSyncs(t, p) == before && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	return walSyncs(t, p) - before
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
	if syncs := syncsSince(t, p, before); syncs < 1 || syncs > 2 {
		t.Errorf("%d new series declared with %d WAL syncs; want 1 (2 at most)", n, syncs)
	}
	// Declared again: nothing new to write, nothing of its own to sync (the engine's
	// background work may sync once meanwhile).
	before = walSyncs(t, p)
	if _, errs := p.DeclareSeriesMany(keys, ds); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if syncs := walSyncs(t, p) - before; syncs > 1 {
		t.Errorf("declaring %d known series synced the WAL %d times; want none", n, syncs)
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

// BenchmarkDeclareNewSeries declares a write's 70 new series (about what a TSBS IoT
// batch of 5,000 lines names while its trucks appear) under SyncAlways: at once
// (DeclareSeriesMany), and each alone on 64 goroutines, as a registry replica did
// before (their synced commits shared by the engine's group commit).
func BenchmarkDeclareNewSeries(b *testing.B) {
	const n = 70
	for _, mode := range []string{"many", "each"} {
		b.Run(mode, func(b *testing.B) {
			p, err := OpenPebble(b.TempDir(), PebbleOptions{Sync: SyncAlways, SealInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			keys, ds := make([]string, n), make([]Decl, n)
			for i := range ds {
				ds[i] = Decl{Type: series.Float}
			}
			for it := 0; b.Loop(); it++ {
				for i := range keys {
					keys[i] = fmt.Sprintf("db/m,host=h%d,n=%d#f", i, it)
				}
				if mode == "many" {
					p.DeclareSeriesMany(keys, ds)
					continue
				}
				var wg sync.WaitGroup
				sem := make(chan struct{}, 64)
				for i := range keys {
					sem <- struct{}{}
					wg.Go(func() {
						defer func() { <-sem }()
						p.DeclareSeries(keys[i], ds[i])
					})
				}
				wg.Wait()
			}
		})
	}
}

// TestMergeCatalogSyncsOnce: a new series' postings and entry merged together under
// SyncAlways cost one WAL sync, where a merge of each cost one each.
func TestMergeCatalogSyncsOnce(t *testing.T) {
	p, err := OpenPebble(t.TempDir(), PebbleOptions{Sync: SyncAlways, SealInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var lists []catalog.TagMembers
	var es []catalog.Entry
	for i := range 50 {
		key := fmt.Sprintf("db/m,truck=t%d#f", i)
		es = append(es, catalog.Entry{Key: key, Type: series.Float, Created: 9})
		lists = append(lists, catalog.TagMembers{Tag: catalog.Tag{K: "truck", V: fmt.Sprint(i)}, Members: []catalog.Member{{Key: key, Version: 9}}})
	}
	before := walSyncs(t, p)
	if _, err := p.MergeCatalog(lists, es); err != nil {
		t.Fatal(err)
	}
	if syncs := syncsSince(t, p, before); syncs < 1 || syncs > 2 {
		t.Errorf("50 series posted and merged with %d WAL syncs; want 1 (2 at most)", syncs)
	}
}
