package backup_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb"
	"github.com/tsdht/tsdht/tsdb/backup"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// cluster starts n in-process nodes (real TCP, memory stores) and returns a client.
func cluster(t *testing.T, n int) *client.Client {
	t.Helper()
	lc, err := tsdb.StartLocal(context.Background(), n, t.TempDir(), func(i int, cfg *tsdb.Config) {
		cfg.DHT.Quantum = 10
		if n < 3 {
			cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = n, 1, 1
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	var addrs []string
	for _, nd := range lc.Nodes {
		addrs = append(addrs, nd.RPCAddr())
	}
	cl, err := client.New(addrs, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// floats returns n points at 1 Hz from t0 (ns), values from v0.
func floats(t0 int64, n int, v0 float64) series.Points {
	p := series.Points{Type: series.Float}
	for i := range n {
		p.AppendFloat(t0+int64(i)*1e9, v0+float64(i))
	}
	return p
}

// written returns the quantum starts of the blocks run wrote, by series.
func written(t *testing.T, dir string, run backup.Run) map[string][]int64 {
	t.Helper()
	m := manifest(t, dir)
	files := map[string]bool{}
	for _, f := range run.Files {
		files[f] = true
	}
	out := map[string][]int64{}
	for _, s := range m.Series {
		for _, b := range s.Blocks {
			if files[b.File] {
				out[s.Key] = append(out[s.Key], b.Start)
			}
		}
	}
	return out
}

func manifest(t *testing.T, dir string) backup.Manifest {
	t.Helper()
	var m backup.Manifest
	b, err := os.ReadFile(filepath.Join(dir, backup.ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	if err := jsonUnmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// An incremental run re-reads exactly the quanta the cluster's statistics show
// changed: a late write, a range delete; a whole-series delete drops the series;
// unchanged quanta are kept, and superseded files removed.
func TestIncrementalWritesOnlyWhatChanged(t *testing.T) {
	cl := cluster(t, 3)
	ctx := context.Background()
	t0 := (time.Now().Add(-time.Hour).UnixNano() / 100e9) * 100e9 // a whole 100 s, an hour ago
	// Every write at every replica: an overwrite is not ordered across replicas
	// (DESIGN-NOTES.md, known gaps), so a first write acknowledged at a quorum and still
	// on its way to the third replica (a hint replayed later, on a slow machine) could
	// land after the overwrite there, and a read merging the replicas could return the
	// old value.
	all := wire.PutOptions{WriteQuorum: 3}
	for _, key := range []string{"a", "b", "gone"} {
		if _, err := cl.Put(ctx, key, floats(t0, 100, 0), all); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	o := backup.Options{Dir: dir}
	r1, err := backup.Backup(ctx, cl, o)
	if err != nil {
		t.Fatal(err)
	}
	if r1.Written != 30 || r1.Points != 300 {
		t.Fatalf("run 1 wrote %d quanta, %d points; want 30, 300", r1.Written, r1.Points)
	}
	// Nothing changed: nothing written; a file an interrupted run left is removed.
	leftover := filepath.Join(dir, backup.DataDir, "r000002-0001.tsb")
	if err := os.WriteFile(leftover, []byte("TSDHTBAK\x01half a block"), 0o644); err != nil {
		t.Fatal(err)
	}
	r2, err := backup.Backup(ctx, cl, o)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Written != 0 || r2.Kept != 30 || len(r2.Files) != 0 {
		t.Fatalf("run 2 over an unchanged cluster wrote %d quanta (%d files), kept %d", r2.Written, len(r2.Files), r2.Kept)
	}
	if _, err := os.Stat(leftover); err == nil {
		t.Fatalf("the interrupted run's %s is still there", leftover)
	}
	// A value overwritten at a quantum's end, a point added inside another, a range
	// deleted, a series deleted whole.
	q3, q5, q7 := t0/1e9+30, t0/1e9+50, t0/1e9+70
	// At every replica before the run: a describe at read quorum may otherwise take a
	// replica's statistics from before the overwrite (docs/backup.md).
	late := series.Points{Type: series.Float}
	late.AppendFloat((q3+9)*1e9, -1)
	if _, err := cl.Put(ctx, "a", late, all); err != nil {
		t.Fatal(err)
	}
	extra := series.Points{Type: series.Float}
	extra.AppendFloat(q5*1e9+5e8, 0.5)
	if _, err := cl.Put(ctx, "b", extra, all); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Delete(ctx, "b", q7*1e9, (q7+10)*1e9); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.DeleteSeries(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	r3, err := backup.Backup(ctx, cl, o)
	if err != nil {
		t.Fatal(err)
	}
	got := written(t, dir, r3)
	if len(got["a"]) != 1 || got["a"][0] != q3 || len(got["b"]) != 1 || got["b"][0] != q5 || len(got) != 2 {
		t.Fatalf("run 3 wrote %v; want a: [%d], b: [%d]", got, q3, q5)
	}
	if r3.Dropped != 1 || r3.Kept != 17 {
		t.Fatalf("run 3 dropped %d, kept %d quanta; want 1 (b's deleted quantum), 17", r3.Dropped, r3.Kept)
	}
	m := manifest(t, dir)
	if len(m.Series) != 2 {
		t.Fatalf("the manifest lists %d series after a whole-series delete, want 2", len(m.Series))
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, backup.DataDir)); len(ents) != len(m.Files) || len(m.Files) != 2 {
		t.Fatalf("%d files on disk, %d listed; want run 1's and run 3's", len(ents), len(m.Files))
	}

	// A float value rewritten inside a quantum, count, ends and extremes unchanged: the
	// statistics do not show it (docs/backup.md); a full run reads everything again
	// and writes that quantum alone.
	q1 := t0/1e9 + 10
	mid := series.Points{Type: series.Float}
	mid.AppendFloat((q1+5)*1e9, 15.5)
	if _, err := cl.Put(ctx, "a", mid, all); err != nil {
		t.Fatal(err)
	}
	r4, err := backup.Backup(ctx, cl, o)
	if err != nil {
		t.Fatal(err)
	}
	if r4.Written != 0 {
		t.Fatalf("an incremental run saw a mid-quantum rewrite (wrote %d quanta): update docs/backup.md", r4.Written)
	}
	full := o
	full.Full = true
	r5, err := backup.Backup(ctx, cl, full)
	if err != nil {
		t.Fatal(err)
	}
	if got := written(t, dir, r5); len(got) != 1 || len(got["a"]) != 1 || got["a"][0] != q1 || r5.Kept != 18 {
		t.Fatalf("a full run wrote %v and kept %d; want a: [%d], and the other 18 kept", got, r5.Kept, q1)
	}

	// The backup restores what the cluster holds.
	dst := cluster(t, 2)
	s, err := backup.Restore(ctx, dst, dir, backup.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Points != 191 { // a: 100 (one overwritten), b: 100 + 1 − 10
		t.Fatalf("restored %d points, want 191", s.Points)
	}
	for _, key := range []string{"a", "b"} {
		want, _ := cl.Get(ctx, key, t0, t0+100e9, wire.GetOptions{})
		have, err := dst.Get(ctx, key, t0, t0+100e9, wire.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if have.Points.Len() != want.Points.Len() {
			t.Fatalf("%s: %d points restored, the source holds %d", key, have.Points.Len(), want.Points.Len())
		}
		for i := range want.Points.T {
			if have.Points.T[i] != want.Points.T[i] || have.Points.F[i] != want.Points.F[i] {
				t.Fatalf("%s point %d: %d=%v, want %d=%v", key, i, have.Points.T[i], have.Points.F[i], want.Points.T[i], want.Points.F[i])
			}
		}
	}
}

// A backup directory holds one selection; another is refused, naming both.
func TestAnotherSelectionRefused(t *testing.T) {
	cl := cluster(t, 1)
	ctx := context.Background()
	if _, err := cl.Put(ctx, "x/1", floats(time.Now().Add(-time.Minute).UnixNano(), 3, 0), wire.PutOptions{Quantum: quanta.Quantum(60)}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := backup.Backup(ctx, cl, backup.Options{Dir: dir, Prefix: "x/"}); err != nil {
		t.Fatal(err)
	}
	_, err := backup.Backup(ctx, cl, backup.Options{Dir: dir, Match: []catalog.Tag{{K: "k", V: "v"}}})
	if err == nil || !strings.Contains(err.Error(), `prefix "x/"`) {
		t.Fatalf("a second selection into the directory: %v", err)
	}
	m := manifest(t, dir)
	if len(m.Series) != 1 || m.Series[0].Quantum != 60 {
		t.Fatalf("manifest series %+v: want x/1 with its quantum of 60 s", m.Series)
	}
}

// Verify names a truncated file, and Restore of it writes nothing.
func TestTruncatedFileNamed(t *testing.T) {
	cl := cluster(t, 1)
	ctx := context.Background()
	if _, err := cl.Put(ctx, "t", floats(time.Now().Add(-time.Hour).UnixNano(), 50, 0), wire.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r, err := backup.Backup(ctx, cl, backup.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, r.Files[0])
	b, _ := os.ReadFile(p)
	os.WriteFile(p, b[:len(b)-3], 0o644)
	if _, err := backup.Verify(dir); err == nil || !strings.Contains(err.Error(), r.Files[0]) || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("verify of a truncated file: %v", err)
	}
	dst := cluster(t, 1)
	if _, err := backup.Restore(ctx, dst, dir, backup.RestoreOptions{}); err == nil || !strings.Contains(err.Error(), "nothing was restored") {
		t.Fatalf("restore of a damaged backup: %v", err)
	}
	if es, _ := dst.Series(ctx, nil, ""); len(es) != 0 {
		t.Fatalf("restore of a damaged backup wrote %d series", len(es))
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// A run that would list more quanta than the manifest may hold fails before it writes,
// saying what to do, and leaves the directory as it was.
func TestTooManyQuantaRefused(t *testing.T) {
	cl := cluster(t, 1)
	ctx := context.Background()
	if _, err := cl.Put(ctx, "long", floats(time.Now().Add(-time.Hour).UnixNano(), 100, 0), wire.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	_, err := backup.Backup(ctx, cl, backup.Options{Dir: dir, MaxBlocks: 5})
	if err == nil || !strings.Contains(err.Error(), "more than 5 quanta") || !strings.Contains(err.Error(), "--from") {
		t.Fatalf("a backup of 10 quanta with room for 5: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, backup.ManifestName)); err == nil {
		t.Fatal("the failed run wrote a manifest")
	}
}
