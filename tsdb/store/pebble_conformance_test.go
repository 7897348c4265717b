package store_test

import (
	"math"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/store/storetest"
)

func openPebble(t *testing.T, o store.PebbleOptions) *store.Pebble {
	t.Helper()
	o.SealInterval = -1 // sealing is driven by the test
	p, err := store.OpenPebble(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPebbleConformance(t *testing.T) {
	for _, mode := range []store.SyncMode{store.SyncAlways, store.SyncBatch, store.SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) store.Store {
				return openPebble(t, store.PebbleOptions{Sync: mode})
			})
		})
	}
}

// sealingStore seals everything after every append, so that the conformance suite
// also runs against sealed chunks, late raw points beside them, and re-seals.
type sealingStore struct{ *store.Pebble }

func (s sealingStore) Append(ref store.ShardRef, key string, pts series.Points) error {
	if err := s.Pebble.Append(ref, key, pts); err != nil {
		return err
	}
	_, err := s.SealNow(time.Unix(math.MaxInt64/2, 0))
	return err
}

func TestPebbleConformanceSealed(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		// Tiny chunks: several per pair.
		return sealingStore{openPebble(t, store.PebbleOptions{Sync: store.SyncNone, ChunkMaxPoints: 3})}
	})
}
