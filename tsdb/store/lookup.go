package store

import (
	"bytes"
	"errors"

	"github.com/cockroachdb/pebble"
)

// lookupMany reads the stored values of keys and calls fn with each key's index, its
// value and whether it is stored, in the order of keys (give them in key order). More
// than one key is read through one iterator over their span: a Get each made pebble
// load every level's tables again, several times the cost for the hundreds of catalog
// entries, posting-list members or pair summaries a batch looks up
// (BenchmarkLookupMany). v is valid only during fn.
func (p *Pebble) lookupMany(keys [][]byte, fn func(i int, v []byte, found bool) error) error {
	return p.lookupKeys(keys, false, fn)
}

// lookupMostlyAbsent is lookupMany for keys that are mostly stored nowhere, such as the
// summaries of the pairs a batch writes first. Each key is sought by prefix (every key
// is its own prefix: wholeKeyComparer), which asks each table's bloom filter before it
// loads a block, as a Get does. A pair's summary key sits among its blocks, so a plain
// seek to an absent one reads a block of another pair's points in every table it
// crosses, from disk when the block cache does not hold it. BenchmarkLookupAbsent
// compares the two on stored and absent keys.
func (p *Pebble) lookupMostlyAbsent(keys [][]byte, fn func(i int, v []byte, found bool) error) error {
	return p.lookupKeys(keys, true, fn)
}

func (p *Pebble) lookupKeys(keys [][]byte, byPrefix bool, fn func(i int, v []byte, found bool) error) error {
	switch len(keys) {
	case 0:
		return nil
	case 1:
		v, closer, err := p.db.Get(keys[0])
		if errors.Is(err, pebble.ErrNotFound) {
			return fn(0, nil, false)
		}
		if err != nil {
			return err
		}
		defer closer.Close()
		return fn(0, v, true)
	}
	lo, hi := keys[0], keys[0]
	for _, k := range keys[1:] {
		if bytes.Compare(k, lo) < 0 {
			lo = k
		}
		if bytes.Compare(k, hi) > 0 {
			hi = k
		}
	}
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: append(hi[:len(hi):len(hi)], 0)})
	if err != nil {
		return err
	}
	defer it.Close()
	for i, k := range keys {
		var found bool
		if byPrefix {
			found = it.SeekPrefixGE(k) && bytes.Equal(it.Key(), k)
		} else {
			found = it.SeekGE(k) && bytes.Equal(it.Key(), k)
		}
		if !found {
			if err := it.Error(); err != nil {
				return err
			}
		}
		var v []byte
		if found {
			v = it.Value()
		}
		if err := fn(i, v, found); err != nil {
			return err
		}
	}
	return nil
}
