package store_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
)

// TestAppendBatchThen: committed is called once, before AppendBatchThen returns, when the
// points are already readable; a batch started from it appends after this one (its
// points, later in time, need no merge and the counts come out exact); a refused batch
// never calls it.
func TestAppendBatchThen(t *testing.T) {
	for _, mode := range []store.SyncMode{store.SyncAlways, store.SyncBatch} {
		t.Run(mode.String(), func(t *testing.T) {
			p := openPebble(t, store.PebbleOptions{Sync: mode})
			defer p.Close()
			const start = 1_700_000_000
			sec := int64(start) * 1e9
			refs := []store.ShardRef{
				{ID: quanta.ShardID(quanta.QFI, "a", start), Start: start},
				{ID: quanta.ShardID(quanta.QFI, "b", start), Start: start},
			}
			batch := func(from int64, n int) []store.PairAppend {
				var out []store.PairAppend
				for i, key := range []string{"a", "b"} {
					var pts series.Points
					for k := range n {
						pts.AppendFloat(sec+from+int64(k), float64(from+int64(k)))
					}
					out = append(out, store.PairAppend{Ref: refs[i], Key: key, Points: pts})
				}
				return out
			}
			var calls int
			var readable int
			var second sync.WaitGroup
			var secondErr error
			err := p.AppendBatchThen(batch(0, 100), func() {
				calls++
				got, _, err := p.Read(refs[0], "a", sec, sec+1e9)
				if err != nil {
					t.Errorf("read from committed: %v", err)
				}
				readable = got.Len()
				second.Add(1)
				go func() { // the next batch, as a writer would start it
					defer second.Done()
					secondErr = p.AppendBatchThen(batch(100, 100), nil)
				}()
			})
			if err != nil {
				t.Fatal(err)
			}
			if calls != 1 || readable != 100 {
				t.Fatalf("committed called %d times with %d points readable; want once, with 100", calls, readable)
			}
			second.Wait()
			if secondErr != nil {
				t.Fatal(secondErr)
			}
			for i, key := range []string{"a", "b"} {
				got, _, err := p.Read(refs[i], key, sec, sec+1e9)
				if err != nil || got.Len() != 200 {
					t.Fatalf("%s: read %d points (%v), want 200", key, got.Len(), err)
				}
			}
			if st := p.Stats(); st.Points != 400 || st.Series != 2 {
				t.Fatalf("stats %+v, want 400 points of 2 series", st)
			}
			// A batch refused whole (b holds floats) never reports a commit.
			bad := batch(300, 1)
			bad[1].Points = series.Points{Type: series.Int, T: []int64{sec + 300}, I: []int64{1}}
			called := false
			err = p.AppendBatchThen(bad, func() { called = true })
			if !errors.Is(err, series.ErrTypeMismatch) || called {
				t.Fatalf("a refused batch: err %v, committed called %v; want a type mismatch, not called", err, called)
			}
		})
	}
}
