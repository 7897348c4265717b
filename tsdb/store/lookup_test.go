package store

import (
	"bytes"
	"crypto/sha1"
	"errors"
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

// lookupMany and lookupMostlyAbsent answer every key, stored or not, one or many, in
// any order, as a Get of each would.
func TestLookupMany(t *testing.T) {
	p, key := lookupFixture(t, 1000)
	defer p.Close()
	looks := map[string]func([][]byte, func(int, []byte, bool) error) error{"lookupMany": p.lookupMany, "lookupMostlyAbsent": p.lookupMostlyAbsent}
	for name, look := range looks {
		for _, idx := range [][]int{{}, {5}, {1500}, {3, 1200, 7, 999, 2000, 0}, {10, 11, 12, 13, 5000, 14}} {
			keys := make([][]byte, len(idx))
			for j, i := range idx {
				keys[j] = key(i)
			}
			var got []string
			err := look(keys, func(j int, v []byte, found bool) error {
				if found != (idx[j] < 1000) {
					t.Errorf("%s: key %d: found %v", name, idx[j], found)
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
				t.Errorf("%s(%v) = %q, want %q", name, idx, got, want)
			}
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

// BenchmarkLookupAbsent looks up the summaries of 500 pairs that no table holds, among
// 2,000 pairs' summaries and blocks spread over ten overlapping tables (as flushed
// memtables are), and 500 that are stored: by plain seeks (lookupMany) and by prefix
// seeks that ask the bloom filters first (lookupMostlyAbsent). The block cache holds
// a fraction of the tables (cached: all of them), as a node's holds of a long load.
func BenchmarkLookupAbsent(b *testing.B) {
	for _, cache := range []int64{1 << 20, 64 << 20} {
		name := "small-cache"
		if cache > 1<<20 {
			name = "cached"
		}
		b.Run(name, func(b *testing.B) { benchLookupAbsent(b, cache) })
	}
}

func benchLookupAbsent(b *testing.B, cache int64) {
	o := DefaultPebbleOptions()
	o.CacheSize = cache
	p := openTest(b, b.TempDir(), o)
	defer p.Close()
	id := func(i int) []byte { h := sha1.Sum(fmt.Appendf(nil, "pair %d", i)); return h[:] }
	block := make([]byte, 400)
	for r := range 10 {
		batch := p.db.NewBatch()
		for i := r; i < 2000; i += 10 {
			err := batch.Set(pairKey(nil, id(i), kindSummary), make([]byte, 150), nil)
			for n := range 8 {
				for j := range block {
					block[j] = byte(i*31 + n*7 + j*j)
				}
				err = errors.Join(err, batch.Set(blockKey(nil, id(i), uint64(n)), block, nil))
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		if err := errors.Join(batch.Commit(pebble.NoSync), p.db.Flush()); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		from int
	}{{"absent", 2000}, {"stored", 0}} {
		var keys [][]byte
		for i := range 500 {
			keys = append(keys, pairKey(nil, id(c.from+i*3), kindSummary))
		}
		slices.SortFunc(keys, bytes.Compare)
		for _, l := range []struct {
			name string
			look func([][]byte, func(int, []byte, bool) error) error
		}{{"seek", p.lookupMany}, {"prefix", p.lookupMostlyAbsent}} {
			b.Run(c.name+"/"+l.name, func(b *testing.B) {
				for b.Loop() {
					found := 0
					if err := l.look(keys, func(_ int, _ []byte, ok bool) error {
						if ok {
							found++
						}
						return nil
					}); err != nil {
						b.Fatal(err)
					}
					if want := map[bool]int{true: 0, false: 500}[c.from == 2000]; found != want {
						b.Fatalf("found %d of 500, want %d", found, want)
					}
				}
			})
		}
	}
}
