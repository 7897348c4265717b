package store

import (
	"errors"
	"testing"

	"github.com/tsdht/tsdht/tsdb/chunk"
	"github.com/tsdht/tsdht/tsdb/series"
)

// TestStatsCountFlashWrites: FlashBytesWritten grows with what is written (at least the
// WAL records of the appends), AppendedPoints counts new points only, and once the
// engine has failed Stats keeps answering with the last figures instead of asking
// pebble (whose metrics may then block for good).
func TestStatsCountFlashWrites(t *testing.T) {
	p := openTest(t, t.TempDir(), testOptions(SyncAlways))
	defer p.Close()
	st := p.Stats()
	if st.AppendedPoints != 0 {
		t.Fatalf("AppendedPoints = %d on an empty store", st.AppendedPoints)
	}
	before := st.FlashBytesWritten
	pts := series.Points{Type: series.Float}
	for i := range 600 {
		pts.AppendFloat(testStart*1e9+int64(i)*16_666_667, float64(i))
	}
	if err := p.Append(testRef, "k", pts); err != nil {
		t.Fatal(err)
	}
	if err := p.Append(testRef, "k", pts.Slice(0, 10)); err != nil { // rewrites: not new
		t.Fatal(err)
	}
	st = p.Stats()
	if st.AppendedPoints != 600 {
		t.Errorf("AppendedPoints = %d, want 600", st.AppendedPoints)
	}
	block, err := new(chunk.Encoder).Encode(nil, pts)
	if err != nil {
		t.Fatal(err)
	}
	if st.FlashBytesWritten-before < int64(len(block)) { // the WAL holds the block at least
		t.Errorf("FlashBytesWritten grew by %d bytes for 600 points, whose block takes %d", st.FlashBytesWritten-before, len(block))
	}
	if st.DiskBytes <= 0 {
		t.Errorf("DiskBytes = %d", st.DiskBytes)
	}

	err = errors.New("injected engine failure")
	p.failed.Store(&err)
	defer p.failed.Store(nil)
	if err := p.Append(testRef, "k", pts.Slice(0, 1)); err == nil {
		t.Fatal("a failed engine took an append")
	}
	if again := p.Stats(); again.FlashBytesWritten != st.FlashBytesWritten || again.DiskBytes != st.DiskBytes {
		t.Errorf("after the failure Stats = %d / %d, want the last figures %d / %d",
			again.FlashBytesWritten, again.DiskBytes, st.FlashBytesWritten, st.DiskBytes)
	}
}

// TestFlashBytesCountEachWriteOnce: FlashBytesWritten is the WAL's bytes plus the
// tables flushed and compacted, each counted once, and single-point appends write a
// few hundred bytes each, not more (pebble's Metrics.Total folds the WAL into its
// flushed bytes: adding the WAL again once doubled it).
func TestFlashBytesCountEachWriteOnce(t *testing.T) {
	p := openTest(t, t.TempDir(), testOptions(SyncNone))
	defer p.Close()
	const n = 3000
	for i := range n {
		ts := testStart*1e9 + int64(i)*16_666_667
		if err := p.Append(testRef, "k", series.Points{Type: series.Float, T: []int64{ts}, F: []float64{float64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	m := p.db.Metrics()
	var tables uint64
	for _, l := range m.Levels {
		tables += l.BytesFlushed + l.BytesCompacted
	}
	want := int64(m.WAL.BytesWritten + tables)
	if got := p.Stats().FlashBytesWritten; got != want {
		t.Errorf("FlashBytesWritten %d, want %d: WAL %d + tables %d", got, want, m.WAL.BytesWritten, tables)
	}
	if tables == 0 || m.WAL.BytesWritten == 0 {
		t.Errorf("WAL %d bytes, tables %d: both should have been written", m.WAL.BytesWritten, tables)
	}
}
