package store

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble"

	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
)

// lookupFixture stores n keys of 60-byte values over several flushed tables (as a
// node's catalog is spread over levels) and returns a key maker.
func lookupFixture(tb testing.TB, n int) (*Pebble, func(i int) []byte) {
	p := openTest(tb, tb.TempDir(), DefaultPebbleOptions())
	key := func(i int) []byte { return entryKey(fmt.Sprintf("readings,name=truck_%d#f%d", i/13, i%13)) }
	for r := range 10 {
		b := p.db.NewBatch()
		for i := r; i < n; i += 10 {
			if err := b.Set(key(i), fmt.Appendf(nil, "value %d", i), nil); err != nil {
				tb.Fatal(err)
			}
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			tb.Fatal(err)
		}
		if err := p.db.Flush(); err != nil {
			tb.Fatal(err)
		}
	}
	return p, key
}

// lookupMany answers every key, stored or not, one or many, in any order, as a Get
// of each would.
func TestLookupMany(t *testing.T) {
	p, key := lookupFixture(t, 1000)
	defer p.Close()
	for _, idx := range [][]int{{}, {5}, {1500}, {3, 1200, 7, 999, 2000, 0}, {10, 11, 12, 13, 5000, 14}} {
		keys := make([][]byte, len(idx))
		for j, i := range idx {
			keys[j] = key(i)
		}
		var got []string
		err := p.lookupMany(keys, func(j int, v []byte, found bool) error {
			if found != (idx[j] < 1000) {
				t.Errorf("key %d: found %v", idx[j], found)
			}
			if found {
				got = append(got, string(v))
			} else {
				got = append(got, "-")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, i := range idx {
			if i < 1000 {
				want = append(want, fmt.Sprintf("value %d", i))
			} else {
				want = append(want, "-")
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("lookupMany(%v) = %q, want %q", idx, got, want)
		}
	}
	stop := fmt.Errorf("stop")
	if err := p.lookupMany([][]byte{key(1), key(2)}, func(int, []byte, bool) error { return stop }); err != stop {
		t.Errorf("an error of fn: got %v, want it returned", err)
	}
}

// BenchmarkLookupMany reads 1,000 keys in key order, half of them stored, from 10,000
// spread over ten tables: a Get each, and lookupMany.
func BenchmarkLookupMany(b *testing.B) {
	p, key := lookupFixture(b, 10000)
	defer p.Close()
	var keys [][]byte
	for i := range 1000 {
		keys = append(keys, key(i*10+i%2*20000))
	}
	slices.SortFunc(keys, bytes.Compare)
	b.Run("get", func(b *testing.B) {
		for b.Loop() {
			for _, k := range keys {
				if err := p.lookupMany([][]byte{k}, func(int, []byte, bool) error { return nil }); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("many", func(b *testing.B) {
		for b.Loop() {
			if err := p.lookupMany(keys, func(int, []byte, bool) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// EntriesOf answers as Entry of each key does: in the order asked, a key named twice
// twice, a key with no entry left out.
func TestPebbleEntriesOfAsEntry(t *testing.T) {
	p := openTest(t, t.TempDir(), testOptions(SyncAlways))
	defer p.Close()
	for i, k := range []string{"b", "d", "a"} {
		if _, err := p.MergeEntry(catalog.Entry{Key: k, Type: series.Float, Created: int64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	keys := []string{"d", "c", "a", "d", "b"}
	got, err := p.EntriesOf(keys)
	if err != nil {
		t.Fatal(err)
	}
	var want []catalog.Entry
	for _, k := range keys {
		if e, ok, err := p.Entry(k); err != nil {
			t.Fatal(err)
		} else if ok {
			want = append(want, e)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("EntriesOf(%q) gave %d entries, Entry of each %d", keys, len(got), len(want))
	}
	for i := range want {
		if !catalog.Equal(got[i], want[i]) {
			t.Fatalf("entry %d: EntriesOf gave %+v, Entry %+v", i, got[i], want[i])
		}
	}
	if !slices.Equal(keys, []string{"d", "c", "a", "d", "b"}) {
		t.Fatalf("EntriesOf reordered its argument: %q", keys)
	}
}
