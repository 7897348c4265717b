package store

import (
	"math"
	"testing"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/series"
)

// TestSealWaitsForASeriesQuantum: a pair of a quantum longer than the store's is sealed
// once its own quantum has ended, not the store's: sealing rewrites a whole pair, and
// re-sealing a pair still being written every few seconds would cost its size each time.
func TestSealWaitsForASeriesQuantum(t *testing.T) {
	o := testOptions(SyncNone)
	p := openTest(t, t.TempDir(), o)
	defer p.Close()
	q := int64(p.Quantum())
	const long = quanta.Quantum(3600)
	start := testStart - testStart%int64(long)
	short := ShardRef{ID: quanta.ShardID(quanta.QFI, "short", start), Start: start}
	hourly := ShardRef{ID: quanta.ShardID(quanta.QFI, "hourly", start), Start: start, Q: long}
	pt := series.Points{Type: series.Float, T: []int64{start * 1e9}, F: []float64{1}}
	for _, r := range []struct {
		ref ShardRef
		key string
	}{{short, "short"}, {hourly, "hourly"}} {
		if err := p.Append(r.ref, r.key, pt); err != nil {
			t.Fatal(err)
		}
	}
	grace := int64(p.opts.SealGrace / time.Second)
	n, err := p.SealNow(time.Unix(start+q+grace, 0))
	if err != nil || n != 1 {
		t.Fatalf("seal after the store's quantum ended: %d pairs, %v; want 1 (the short one)", n, err)
	}
	if n, err = p.SealNow(time.Unix(start+int64(long)+grace-1, 0)); err != nil || n != 0 {
		t.Fatalf("seal a second before the hour ended (with grace): %d pairs, %v; want 0", n, err)
	}
	if n, err = p.SealNow(time.Unix(start+int64(long)+grace, 0)); err != nil || n != 1 {
		t.Fatalf("seal once the hour ended: %d pairs, %v; want 1", n, err)
	}
	got, held, err := p.Read(hourly, "hourly", start*1e9, (start+int64(long))*1e9)
	if err != nil || !held || got.Len() != 1 {
		t.Fatalf("read of the sealed hour: %d points, held %v, %v", got.Len(), held, err)
	}
}

// TestSealScansPastPairsNotDue: more pairs not yet due than one scan's batch hold back
// none of those that are.
func TestSealScansPastPairsNotDue(t *testing.T) {
	p := openTest(t, t.TempDir(), testOptions(SyncNone))
	defer p.Close()
	const long = quanta.Quantum(3600)
	start := testStart - testStart%int64(long)
	pt := series.Points{Type: series.Float, T: []int64{start * 1e9}, F: []float64{1}}
	for i := range 20 * sealBatch {
		key := "hourly" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
		if err := p.Append(ShardRef{ID: quanta.ShardID(quanta.QFI, key, start), Start: start, Q: long}, key, pt); err != nil {
			t.Fatal(err)
		}
	}
	// A pair of the store's quantum, after all of them in the index (a later start).
	q := int64(p.Quantum())
	late := start + q
	ref := ShardRef{ID: quanta.ShardID(quanta.QFI, "short", late), Start: late}
	if err := p.Append(ref, "short", series.Points{Type: series.Float, T: []int64{late * 1e9}, F: []float64{1}}); err != nil {
		t.Fatal(err)
	}
	grace := int64(p.opts.SealGrace / time.Second)
	if n, err := p.SealNow(time.Unix(late+q+grace, 0)); err != nil || n != 1 {
		t.Fatalf("seal: %d pairs, %v; want 1", n, err)
	}
}

// TestDeclaredQuantumSurvivesRestart, and a record written before series had quanta of
// their own reads as the cluster's quantum, known.
func TestDeclaredQuantumSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	p := openTest(t, dir, testOptions(SyncAlways))
	if _, err := p.DeclareSeries("hourly", Decl{Type: series.Float, Quantum: 3600}); err != nil {
		t.Fatal(err)
	}
	if err := p.db.Set(metaKey("legacy"), []byte{metaVersion, byte(series.Int)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = openTest(t, dir, testOptions(SyncAlways))
	defer p.Close()
	if d, ok := p.SeriesDecl("hourly"); !ok || d.Quantum != 3600 || d.NoQuantum {
		t.Errorf("after a restart: %+v, %v; want quantum 3600", d, ok)
	}
	if d, ok := p.SeriesDecl("legacy"); !ok || d.Quantum != 0 || d.NoQuantum || d.Type != series.Int {
		t.Errorf("a version-1 record: %+v, %v; want int with the cluster's quantum (0), known", d, ok)
	}
	if d, err := p.DeclareSeries("legacy", Decl{Type: series.Int, Quantum: 3600}); err != nil || d.Quantum != 0 {
		t.Errorf("declaring a quantum for a version-1 series: %+v, %v; want it to keep the cluster's", d, err)
	}
}

// sealAll is a background sealer's pass that treats every pair as done with.
func (p *Pebble) sealAll(now time.Time) error { return p.sealPass(now, math.MaxInt64) }

// TestBackgroundSealLeavesABackfillAlone: the background sealer does not rewrite a pair
// of an ended quantum that an append wrote within SealGrace (a backfill still going);
// once the pair has been left alone that long, it is sealed.
func TestBackgroundSealLeavesABackfillAlone(t *testing.T) {
	p := openTest(t, t.TempDir(), testOptions(SyncNone))
	defer p.Close()
	ref := ShardRef{ID: quanta.ShardID(quanta.QFI, "old", testStart), Start: testStart}
	if err := p.Append(ref, "old", series.Points{Type: series.Float, T: []int64{testStart * 1e9}, F: []float64{1}}); err != nil {
		t.Fatal(err)
	}
	later := time.Unix(testStart, 0).Add(24 * time.Hour) // the quantum ended long ago
	written := time.Now()
	if n, err := p.sealIdle(later, written.Add(-time.Second).UnixNano()); err != nil || n != 0 {
		t.Fatalf("a pass while the pair is being written sealed %d pairs, %v; want 0", n, err)
	}
	if n, err := p.sealIdle(later, written.Add(time.Second).UnixNano()); err != nil || n != 1 {
		t.Fatalf("a pass once the pair was left alone sealed %d pairs, %v; want 1", n, err)
	}
}
