package storetest

import (
	"errors"
	"testing"

	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
)

// Declarations of many series at once (store.DeclaresMany), which every store
// implements: a registry replica answers a write's new series with it.
func init() { cases = append(cases, declareManyCases...) }

var declareManyCases = []testCase{
	{"DeclareSeriesManyEqualsDeclaresInOrder", func(t *testing.T, s store.Store, _ func()) {
		dm, ok := s.(store.DeclaresMany)
		if !ok {
			t.Fatalf("%T does not implement store.DeclaresMany", s)
		}
		if _, err := s.DeclareSeries("old", store.Decl{Type: series.Int, Quantum: 60}); err != nil {
			t.Fatal(err)
		}
		mustAppend(t, s, refA, "appended", floats(tsList(sec), 1))
		keys := []string{"new", "old", "old", "twice", "twice", "appended", "", "bad-type"}
		ds := []store.Decl{
			{Type: series.Float, Quantum: 3600},
			{Type: series.Int, Quantum: 600}, // the first quantum stays
			{Type: series.Float},             // another type: refused alone
			{Type: series.String},
			{Type: series.String, Quantum: 10},
			{Type: series.Float, Quantum: 30}, // an appended series learns its quantum
			{Type: series.Float},              // an invalid key
			{Type: series.Unknown},            // not a type one can declare
		}
		before := s.Stats().Series
		out, errs := dm.DeclareSeriesMany(keys, ds)
		if len(out) != len(keys) || len(errs) != len(keys) {
			t.Fatalf("%d answers and %d errors to %d declarations", len(out), len(errs), len(keys))
		}
		for i, want := range []store.Decl{
			{Type: series.Float, Quantum: 3600}, {Type: series.Int, Quantum: 60}, {}, {Type: series.String},
			{}, {Type: series.Float, Quantum: 30},
		} {
			if i == 2 || i == 4 {
				continue
			}
			if errs[i] != nil || out[i].Type != want.Type || out[i].Quantum != want.Quantum || out[i].NoQuantum {
				t.Errorf("declaration %d (%q) = %+v, %v; want %+v", i, keys[i], out[i], errs[i], want)
			}
		}
		if !errors.Is(errs[2], series.ErrTypeMismatch) || out[2].Type != series.Int {
			t.Errorf("declaration of another type = %+v, %v; want the series' type (int) and ErrTypeMismatch", out[2], errs[2])
		}
		if errs[4] != nil || out[4].Type != series.String || out[4].Quantum != 0 {
			t.Errorf("second declaration of a key in one call = %+v, %v; want the first's (string, the cluster's quantum)", out[4], errs[4])
		}
		for i := 6; i < len(keys); i++ {
			if errs[i] == nil {
				t.Errorf("declaration %d (%q, %v) accepted; want it refused", i, keys[i], ds[i].Type)
			}
		}
		for key, want := range map[string]store.Decl{
			"new": {Type: series.Float, Quantum: 3600}, "old": {Type: series.Int, Quantum: 60},
			"appended": {Type: series.Float, Quantum: 30},
		} {
			if d, ok := s.SeriesDecl(key); !ok || d != want {
				t.Errorf("SeriesDecl(%q) = %+v, %v; want %+v", key, d, ok, want)
			}
		}
		if d, ok := s.SeriesDecl("twice"); !ok || d != (store.Decl{Type: series.String}) {
			t.Errorf("SeriesDecl(twice) = %+v, %v; want the first declaration's (string, the cluster's quantum)", d, ok)
		}
		if got := s.Stats().Series; got != before+2 {
			t.Errorf("Stats().Series = %d after declaring 2 new series to %d; want %d", got, before, before+2)
		}
		// What a batch declared is what an append then meets.
		if err := s.Append(refC, "new", ints(tsList(sec+10e9), 1)); !errors.Is(err, series.ErrTypeMismatch) {
			t.Errorf("append of ints to a series declared float: %v; want ErrTypeMismatch", err)
		}
	}},
}
