package store

import (
	"testing"
)

// TestPebbleRollupsSurviveReopen: what a home stored is there after a restart, and the
// rollup family leaves the store's counts alone.
func TestPebbleRollupsSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	p := openTest(t, dir, testOptions(SyncAlways))
	if err := p.UpdateRollups(RollupUpdate{Key: "pmu/f", Head: []byte("h"), Put: []RollupRecord{{Level: 1, Start: -3600, Value: []byte("v")}}}); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats().Counts(); st != (Stats{}) {
		t.Fatalf("rollup records counted as data: %+v", st)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = openTest(t, dir, testOptions(SyncAlways))
	defer p.Close()
	h, ok, err := p.RollupHead("pmu/f")
	if err != nil || !ok || string(h) != "h" {
		t.Fatalf("head after reopen: %q %v %v", h, ok, err)
	}
	var got []string
	if err := p.RollupRecords("pmu/f", 1, -3600, 0, func(s int64, v []byte) bool { got = append(got, string(v)); return true }); err != nil || len(got) != 1 || got[0] != "v" {
		t.Fatalf("records after reopen: %v %v", got, err)
	}
}
