package store

import (
	"errors"
	"testing"

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
	if st.FlashBytesWritten-before < 600 { // the WAL holds the block: > 1 byte a point
		t.Errorf("FlashBytesWritten grew by %d bytes for 600 points", st.FlashBytesWritten-before)
	}
	if st.DiskBytes <= 0 {
		t.Errorf("DiskBytes = %d", st.DiskBytes)
	}

	err := errors.New("injected engine failure")
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
