package storetest

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/tsdht/tsdht/tsdb/store"
)

func init() { cases = append(cases, rollupCases...) }

func asRollups(t *testing.T, s store.Store) store.RollupStore {
	t.Helper()
	r, ok := s.(store.RollupStore)
	if !ok {
		t.Fatalf("%T does not implement store.RollupStore", s)
	}
	return r
}

// records returns key's records of level in [from, to) as "start=value" strings.
func records(t *testing.T, r store.RollupStore, key string, level uint8, from, to int64) []string {
	t.Helper()
	var out []string
	if err := r.RollupRecords(key, level, from, to, func(s int64, v []byte) bool {
		out = append(out, fmt.Sprintf("%d=%s", s, v))
		return true
	}); err != nil {
		t.Fatalf("RollupRecords(%q, %d): %v", key, level, err)
	}
	return out
}

func mustUpdate(t *testing.T, r store.RollupStore, u store.RollupUpdate) {
	t.Helper()
	if err := r.UpdateRollups(u); err != nil {
		t.Fatalf("UpdateRollups(%q): %v", u.Key, err)
	}
}

var rollupCases = []testCase{
	{"RollupHeadsAndRecords", func(t *testing.T, s store.Store, _ func()) {
		r := asRollups(t, s)
		if _, ok, err := r.RollupHead("pmu/f"); ok || err != nil {
			t.Fatalf("head of an unknown series: %v %v", ok, err)
		}
		// Two series whose keys are prefixes of each other, records at two levels,
		// negative starts included.
		for _, k := range []string{"pmu/f", "pmu/f2", "pmu"} {
			u := store.RollupUpdate{Key: k, Head: []byte("head-" + k)}
			for _, st := range []int64{-60, 0, 60, 120, math.MinInt64, math.MaxInt64 - 1} {
				u.Put = append(u.Put, store.RollupRecord{Level: 0, Start: st, Value: []byte(k)})
			}
			u.Put = append(u.Put, store.RollupRecord{Level: 1, Start: 0, Value: []byte("h")})
			mustUpdate(t, r, u)
		}
		if got := records(t, r, "pmu/f", 0, -60, 120); fmt.Sprint(got) != "[-60=pmu/f 0=pmu/f 60=pmu/f]" {
			t.Fatalf("level 0 of pmu/f in [-60, 120): %v", got)
		}
		if got := records(t, r, "pmu/f", 0, math.MinInt64, math.MaxInt64); len(got) != 6 || got[0] != fmt.Sprintf("%d=pmu/f", int64(math.MinInt64)) {
			t.Fatalf("all of level 0: %v", got)
		}
		if got := records(t, r, "pmu/f", 1, math.MinInt64, math.MaxInt64); fmt.Sprint(got) != "[0=h]" {
			t.Fatalf("level 1: %v", got)
		}
		// Stopping early.
		n := 0
		if err := r.RollupRecords("pmu", 0, math.MinInt64, math.MaxInt64, func(int64, []byte) bool { n++; return n < 2 }); err != nil || n != 2 {
			t.Fatalf("fn returning false after 2 records: %d calls, %v", n, err)
		}
		heads := map[string]string{}
		if err := r.RollupHeads(func(k string, h []byte) bool { heads[k] = string(h); return true }); err != nil {
			t.Fatal(err)
		}
		if len(heads) != 3 || heads["pmu/f2"] != "head-pmu/f2" {
			t.Fatalf("RollupHeads: %v", heads)
		}
		// Delete spans, overwrite, keep the head when Head is nil.
		mustUpdate(t, r, store.RollupUpdate{Key: "pmu/f", Delete: []store.RollupSpan{{Level: 0, From: 0, To: 120}},
			Put: []store.RollupRecord{{Level: 0, Start: 60, Value: []byte("new")}}})
		if got := records(t, r, "pmu/f", 0, -60, 200); fmt.Sprint(got) != "[-60=pmu/f 60=new 120=pmu/f]" {
			t.Fatalf("after deleting [0, 120) and putting 60: %v", got)
		}
		if h, ok, _ := r.RollupHead("pmu/f"); !ok || string(h) != "head-pmu/f" {
			t.Fatalf("head after an update without one: %q %v", h, ok)
		}
		// Drop removes one series' head and records, not its neighbours'.
		mustUpdate(t, r, store.RollupUpdate{Key: "pmu/f", Drop: true})
		if _, ok, _ := r.RollupHead("pmu/f"); ok {
			t.Fatal("head still there after Drop")
		}
		if got := records(t, r, "pmu/f", 0, math.MinInt64, math.MaxInt64); len(got) != 0 {
			t.Fatalf("records after Drop: %v", got)
		}
		if got := records(t, r, "pmu/f2", 0, math.MinInt64, math.MaxInt64); len(got) != 6 {
			t.Fatalf("a neighbour lost records to Drop: %v", got)
		}
		if got := records(t, r, "pmu", 1, math.MinInt64, math.MaxInt64); len(got) != 1 {
			t.Fatalf("a neighbour lost records to Drop: %v", got)
		}
		// Drop then Put in one update: the series starts over.
		mustUpdate(t, r, store.RollupUpdate{Key: "pmu", Drop: true, Head: []byte("again"), Put: []store.RollupRecord{{Level: 2, Start: 5, Value: []byte("x")}}})
		if got := records(t, r, "pmu", 0, math.MinInt64, math.MaxInt64); len(got) != 0 {
			t.Fatalf("Drop+Put left old records: %v", got)
		}
		if got := records(t, r, "pmu", 2, 0, 10); fmt.Sprint(got) != "[5=x]" {
			t.Fatalf("Drop+Put: %v", got)
		}
	}},
	{"RollupManyRecordsInOrder", func(t *testing.T, s store.Store, _ func()) {
		r := asRollups(t, s)
		// More than any engine's internal batch, written in two updates out of order.
		const n = 1000
		u1 := store.RollupUpdate{Key: "k", Head: []byte{1}}
		u2 := store.RollupUpdate{Key: "k"}
		for i := int64(n - 1); i >= 0; i-- {
			rec := store.RollupRecord{Level: 0, Start: i * 60, Value: []byte(fmt.Sprint(i))}
			if i%2 == 0 {
				u1.Put = append(u1.Put, rec)
			} else {
				u2.Put = append(u2.Put, rec)
			}
		}
		mustUpdate(t, r, u1)
		mustUpdate(t, r, u2)
		got := records(t, r, "k", 0, 0, n*60)
		if len(got) != n {
			t.Fatalf("%d records, want %d", len(got), n)
		}
		for i, g := range got {
			if g != fmt.Sprintf("%d=%d", i*60, i) {
				t.Fatalf("record %d: %s", i, g)
			}
		}
		if got := records(t, r, "k", 0, 300*60, 302*60); fmt.Sprint(got) != "[18000=300 18060=301]" {
			t.Fatalf("a middle range: %v", got)
		}
	}},
	{"RollupLimits", func(t *testing.T, s store.Store, _ func()) {
		r := asRollups(t, s)
		big := bytes.Repeat([]byte{7}, store.MaxRollupValue+1)
		for name, u := range map[string]store.RollupUpdate{
			"value":   {Key: "k", Put: []store.RollupRecord{{Value: big}}},
			"head":    {Key: "k", Head: big},
			"records": {Key: "k", Put: make([]store.RollupRecord, store.MaxRollupUpdate+1)},
			"key":     {Key: "", Head: []byte{1}},
			"longkey": {Key: strings.Repeat("k", 300), Head: []byte{1}},
		} {
			if err := r.UpdateRollups(u); err == nil {
				t.Errorf("an update over the %s limit was accepted", name)
			}
		}
		if _, ok, _ := r.RollupHead("k"); ok {
			t.Fatal("a refused update stored its head")
		}
		if got := records(t, r, "k", 0, math.MinInt64, math.MaxInt64); len(got) != 0 {
			t.Fatalf("a refused update stored records: %d", len(got))
		}
		// At the limit: accepted.
		mustUpdate(t, r, store.RollupUpdate{Key: "k", Put: []store.RollupRecord{{Value: big[:store.MaxRollupValue]}}})
	}},
	{"RollupsAfterClose", func(t *testing.T, s store.Store, markClosed func()) {
		r := asRollups(t, s)
		mustUpdate(t, r, store.RollupUpdate{Key: "k", Head: []byte{1}})
		markClosed()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := r.UpdateRollups(store.RollupUpdate{Key: "k", Head: []byte{2}}); err == nil {
			t.Fatal("UpdateRollups after Close succeeded")
		}
		if _, _, err := r.RollupHead("k"); err == nil {
			t.Fatal("RollupHead after Close succeeded")
		}
	}},
}
