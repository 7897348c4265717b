package store

import (
	"encoding/binary"
	"encoding/gob"
	"math"
	"os"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/tsdht/tsdht/tsdb/series"
)

// TestFormat2StoreUpgrades opens a store as format 2 left it — version-1 chunks, the
// seal generation under 'g' — and checks that its points read back bit for bit, that
// the store is stamped format 3, and that the next seal moves the generation.
func TestFormat2StoreUpgrades(t *testing.T) {
	f, err := os.Open("../chunk/testdata/v1-chunks.gob")
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Chunks [][]byte
		Points []series.Points
	}
	err = gob.NewDecoder(f).Decode(&golden)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	// The last cases are PMU channels: float points of one quantum.
	v1, want := golden.Chunks[len(golden.Chunks)-1], golden.Points[len(golden.Points)-1]
	q := int64(60) // the golden quantum holds 600 points of 60 Hz, one frame maybe lost
	ref := ShardRef{ID: testRef.ID, Start: want.T[0] / 1e9 / q * q}
	if want.T[want.Len()-1] >= (ref.Start+q)*1e9 {
		t.Fatal("golden points span more than a quantum")
	}

	dir := t.TempDir()
	o := testOptions(SyncNone)
	o.Quantum = 60
	p := openTest(t, dir, o)
	if err := p.Append(ref, "pmu1/freq", want); err != nil {
		t.Fatal(err)
	}
	if n, err := p.SealNow(time.Unix(ref.Start+3600, 0)); err != nil || n != 1 {
		t.Fatalf("SealNow = %d, %v", n, err)
	}
	// Make it format 2: the chunk in version 1, the generation under 'g'.
	id := pairID(ref, "pmu1/freq")
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: pairKey(nil, id, kindChunk), UpperBound: pairKey(nil, id, kindBlock)})
	if err != nil {
		t.Fatal(err)
	}
	var chunks int
	b := p.db.NewBatch()
	for valid := it.First(); valid; valid = it.Next() {
		gen, n := binary.Uvarint(it.Value())
		if n <= 0 || it.Value()[n] != 2 {
			t.Fatalf("sealed chunk is not version 2")
		}
		b.Set(append([]byte(nil), it.Key()...), append(binary.AppendUvarint(nil, gen), v1...), nil)
		chunks++
	}
	it.Close()
	if chunks != 1 {
		t.Fatalf("%d chunks", chunks)
	}
	b.Set(formatKey, binary.AppendUvarint(nil, 2), nil)
	b.Set(genKeyOld, binary.AppendUvarint(nil, p.seal.gen), nil)
	b.Delete(genKey, nil)
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	p = openTest(t, dir, o)
	defer p.Close()
	got, _, err := p.Read(ref, "pmu1/freq", math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	if got.Len() != want.Len() {
		t.Fatalf("read %d points, want %d", got.Len(), want.Len())
	}
	for i := range want.T {
		if got.T[i] != want.T[i] || math.Float64bits(got.F[i]) != math.Float64bits(want.F[i]) {
			t.Fatalf("point %d differs", i)
		}
	}
	if v, closer, err := p.db.Get(formatKey); err != nil {
		t.Fatal(err)
	} else {
		format, _ := binary.Uvarint(v)
		closer.Close()
		if format != storeFormat {
			t.Fatalf("format %d after open, want %d", format, storeFormat)
		}
	}
	// A late point into the sealed quantum, sealed again: the generation moves to 'q'.
	late := series.Points{Type: series.Float, T: []int64{want.T[0] + 1}, F: []float64{42}}
	if err := p.Append(ref, "pmu1/freq", late); err != nil {
		t.Fatal(err)
	}
	if n, err := p.SealNow(time.Unix(ref.Start+7200, 0)); err != nil || n != 1 {
		t.Fatalf("SealNow = %d, %v", n, err)
	}
	if _, closer, err := p.db.Get(genKeyOld); err == nil {
		closer.Close()
		t.Fatal("the format-2 generation key is still there after a seal")
	}
	if _, closer, err := p.db.Get(genKey); err != nil {
		t.Fatalf("generation key: %v", err)
	} else {
		closer.Close()
	}
	got, _, err = p.Read(ref, "pmu1/freq", math.MinInt64, math.MaxInt64)
	if err != nil || got.Len() != want.Len()+1 || got.F[1] != 42 {
		t.Fatalf("after the late point: %d points, %v", got.Len(), err)
	}
}
