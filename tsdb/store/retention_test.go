package store

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/series"
)

// recount counts what the store holds by scanning it, to check the counters.
func recount(t *testing.T, p *Pebble) (shards int, points int64, quanta int) {
	t.Helper()
	if !p.enter() {
		t.Fatal("store closed")
	}
	defer p.state.RUnlock()
	c, q, _, err := p.countBefore([]byte{famPair + 1})
	if err != nil {
		t.Fatal(err)
	}
	return int(-c.shards), -c.points, q
}

// wantExact checks that the counters agree with a scan.
func wantExact(t *testing.T, p *Pebble) {
	t.Helper()
	shards, points, _ := recount(t, p)
	if st := p.Stats(); st.Shards != shards || st.Points != points {
		t.Fatalf("Stats says %d shards, %d points; the store holds %d, %d", st.Shards, st.Points, shards, points)
	}
}

func qref(key string, start int64) ShardRef {
	return ShardRef{ID: quanta.ShardID(quanta.QFI, key, start), Start: start}
}

// TestPebbleRetention writes two hours of quanta, reopens the store with a one-hour
// retention, and checks that enforcing it drops exactly the quanta that ended more
// than an hour ago, keeps the counters exact, refuses writes into dropped quanta with
// an error naming the retention, and keeps the series' types.
func TestPebbleRetention(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(SyncAlways)
	o.EnforceInterval = -1
	p := openTest(t, dir, o)
	const q = 10
	now := time.Now()
	first := (now.Add(-2*time.Hour).Unix() / q) * q
	var starts []int64
	for s := first; s <= now.Unix(); s += q {
		starts = append(starts, s)
		for _, key := range []string{"a", "b"} {
			var pts series.Points
			for i := range 5 {
				pts.AppendFloat(s*1e9+int64(i)*1e9, float64(s+int64(i)))
			}
			if err := p.Append(qref(key, s), key, pts); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Most quanta sealed, as the background sealer would have done.
	if _, err := p.SealNow(now.Add(-30 * time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	o.Retention = time.Hour
	p = openTest(t, dir, o)
	defer p.Close()
	if st := p.Stats(); st.Retention != time.Hour || st.OldestQuantum != first || st.DiskBytes <= 0 {
		t.Fatalf("Stats before enforcing: %+v", st)
	}
	expired := func(s int64) bool { return (s+q)*1e9 <= now.UnixNano()-int64(time.Hour) }
	want := 0
	for _, s := range starts {
		if expired(s) {
			want++
		}
	}
	dropped, err := p.EnforceRetention(now)
	if err != nil || dropped != want {
		t.Fatalf("EnforceRetention dropped %d quanta, err %v; want %d", dropped, err, want)
	}
	wantExact(t, p)
	st := p.Stats()
	if st.DroppedQuanta != int64(want) || st.Shards != 2*(len(starts)-want) || st.Points != int64(10*(len(starts)-want)) {
		t.Fatalf("Stats after enforcing: %+v", st)
	}
	if st.OldestQuantum != starts[want] {
		t.Fatalf("OldestQuantum = %d, want %d", st.OldestQuantum, starts[want])
	}
	if st.Series != 2 {
		t.Fatalf("series dropped with their points: %+v", st)
	}
	for i, s := range starts {
		pts, held, err := p.Read(qref("a", s), "a", math.MinInt64, math.MaxInt64)
		if err != nil {
			t.Fatal(err)
		}
		if expired(s) != (i < want) {
			t.Fatalf("quanta not in order of expiry at %d", i)
		}
		if expired(s) && (held || pts.Len() > 0) {
			t.Fatalf("expired quantum %d still holds %d points", s, pts.Len())
		}
		if !expired(s) && (!held || pts.Len() != 5 || pts.F[4] != float64(s+4)) {
			t.Fatalf("kept quantum %d: held=%v %d points", s, held, pts.Len())
		}
	}
	if n, sealed := countFamily(t, p, famUnsealed), countSealed(t, p); n != 2*(len(starts)-want)-sealed || sealed == 0 {
		t.Fatalf("unsealed index after the drop: %d entries, %d pairs sealed, %d kept", n, sealed, 2*(len(starts)-want))
	}

	// A write into an expired quantum is refused and names the retention; the series
	// keeps its type.
	err = p.Append(qref("a", starts[0]), "a", series.Points{Type: series.Float, T: []int64{starts[0] * 1e9}, F: []float64{1}})
	if !errors.Is(err, ErrExpired) || !strings.Contains(err.Error(), "retention of 1h0m0s") {
		t.Fatalf("append into an expired quantum: %v", err)
	}
	t.Logf("append into an expired quantum: %v", err)
	if typ, ok := p.SeriesType("a"); !ok || typ != series.Float {
		t.Fatal("the series lost its type")
	}
	// Nothing more to drop at the same time.
	if n, err := p.EnforceRetention(now); n != 0 || err != nil {
		t.Fatalf("second pass: %d, %v", n, err)
	}
	// A clock a year ahead drops only what is older than the retention before the
	// newest data: the store does not trust it further.
	newestEnd := starts[len(starts)-1] + q
	more := 0
	for _, s := range starts[want:] {
		if s+q <= newestEnd-3600 {
			more++
		}
	}
	if n, err := p.EnforceRetention(now.AddDate(1, 0, 0)); n != more || err != nil {
		t.Fatalf("a year ahead: %d quanta dropped, %v; want %d", n, err, more)
	}
	want += more
	if st := p.Stats(); st.Points != int64(10*(len(starts)-want)) || st.OldestQuantum != starts[want] {
		t.Fatalf("after a clock jump: %+v", st)
	}
	// The floor refuses quanta the clock alone would still allow.
	s := starts[want-1]
	err = p.Append(qref("b", s), "b", series.Points{Type: series.Float, T: []int64{s * 1e9}, F: []float64{1}})
	if !errors.Is(err, ErrExpired) {
		t.Fatalf("append below the floor: %v", err)
	}
	wantExact(t, p)
	counts := p.Stats().Counts()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p = openTest(t, dir, o)
	defer p.Close()
	if got := p.Stats().Counts(); got != counts {
		t.Fatalf("after reopen: %+v, want %+v", got, counts)
	}
	wantExact(t, p)
}

// countFamily counts the keys of one family.
func countFamily(t *testing.T, p *Pebble, fam byte) int {
	t.Helper()
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: []byte{fam}, UpperBound: []byte{fam + 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		n++
	}
	return n
}

// countSealed counts the sealed pairs: those with chunks.
func countSealed(t *testing.T, p *Pebble) int {
	t.Helper()
	n := 0
	it, err := p.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	for valid := it.First(); valid; valid = it.Next() {
		k := it.Key()
		if k[0] == famPair && len(k) > 31 && k[1+29+int(k[29])+1] == kindSummary {
			id := k[1 : len(k)-1]
			if countKeys(t, p, id, kindChunk) > 0 {
				n++
			}
		}
	}
	return n
}

// TestPebbleRetentionRace runs appends and deletes of pairs around a moving retention
// floor while drops below it run: every append is either refused with ErrExpired or
// stored whole, and the counters stay exact.
func TestPebbleRetentionRace(t *testing.T) {
	o := testOptions(SyncNone)
	o.EnforceInterval = -1
	o.Retention = time.Hour
	p := openTest(t, t.TempDir(), o)
	defer p.Close()
	const q = 10
	real := time.Now()
	lo := (real.Add(-50*time.Minute).Unix() / q) * q
	hi := (real.Add(-10*time.Minute).Unix() / q) * q
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var mu sync.Mutex
	refused := 0
	var attempts atomic.Int64
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 2))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				s := lo + q*r.Int64N((hi-lo)/q+1)
				key := fmt.Sprintf("k%d", r.IntN(3))
				var pts series.Points
				for j := range 1 + r.IntN(20) {
					pts.AppendInt(s*1e9+r.Int64N(q*1e9), int64(j))
				}
				err := p.Append(qref(key, s), key, pts)
				attempts.Add(1)
				if errors.Is(err, ErrExpired) {
					mu.Lock()
					refused++
					mu.Unlock()
				} else if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	// A repairer deleting pairs it handed off, meanwhile.
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(99, 2))
		for {
			select {
			case <-stop:
				return
			default:
			}
			s := lo + q*r.Int64N((hi-lo)/q+1)
			key := fmt.Sprintf("k%d", r.IntN(3))
			if err := p.Delete(qref(key, s), key); err != nil {
				t.Error(err)
				return
			}
			attempts.Add(1)
		}
	}()
	total := 0
	for limit := lo + q/2; limit <= hi+q; limit += 3 * q {
		// Let the writers make progress between passes (the deadline bounds a failure).
		for next, deadline := attempts.Load()+20, time.Now().Add(10*time.Second); attempts.Load() < next && time.Now().Before(deadline); {
			runtime.Gosched()
		}
		n, err := p.dropBefore(limit, &p.retFloor)
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	close(stop)
	wg.Wait()
	wantExact(t, p)
	t.Logf("%d quanta dropped under concurrent appends; %d appends refused", total, refused)
}

// TestPebbleDiskBudget fills a store well past its budget and checks that enforcing the
// budget drops the oldest quanta, keeps the newest, and brings the disk usage under the
// budget once pebble has deleted the compacted files; counters stay exact and writes
// into dropped quanta are refused with an error naming the budget.
func TestPebbleDiskBudget(t *testing.T) {
	o := testOptions(SyncNone)
	o.EnforceInterval = -1
	o.MemTableSize = 256 << 10
	o.NoDiskReserve = true
	o.MaxDisk = 6 << 20
	p := openTest(t, t.TempDir(), o)
	defer p.Close()
	// 20 s of quanta of 100-byte random strings: ~200 KiB per quantum, ~20 MiB.
	r := rand.New(rand.NewPCG(1, 1))
	const q = 10
	var starts []int64
	for s := testStart; s < testStart+100*q; s += q {
		starts = append(starts, s)
		var pts series.Points
		for i := range 2000 {
			b := make([]byte, 100)
			for j := range b {
				b[j] = byte('a' + r.IntN(26))
			}
			pts.AppendString(s*1e9+int64(i)*5e6, string(b))
		}
		if err := p.Append(qref("s", s), "s", pts); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.db.Flush(); err != nil {
		t.Fatal(err)
	}
	before := p.DiskUsage()
	if before < 3*o.MaxDisk {
		t.Fatalf("only %s on disk: the test needs more data", FormatSize(before))
	}
	dropped, err := p.EnforceDiskBudget()
	if err != nil || dropped == 0 || dropped == len(starts) {
		t.Fatalf("EnforceDiskBudget dropped %d of %d quanta, err %v", dropped, len(starts), err)
	}
	// Pebble deletes the compacted files in the background: wait for the usage to
	// settle under the budget.
	if !testutil.Poll(20*time.Second, func() bool { return p.DiskUsage() <= o.MaxDisk }) {
		t.Fatalf("disk usage %s stays over the budget of %s:\n%s", FormatSize(p.DiskUsage()), FormatSize(o.MaxDisk), p.db.Metrics())
	}
	after := p.DiskUsage()
	t.Logf("disk usage %s before, %s after dropping %d of %d quanta (budget %s)",
		FormatSize(before), FormatSize(after), dropped, len(starts), FormatSize(o.MaxDisk))
	if after < o.MaxDisk/2 {
		t.Fatalf("dropped far too much: %s left of a %s budget", FormatSize(after), FormatSize(o.MaxDisk))
	}
	wantExact(t, p)
	st := p.Stats()
	if st.DroppedQuanta != int64(dropped) || st.OldestQuantum != starts[dropped] || st.MaxDisk != o.MaxDisk {
		t.Fatalf("Stats: %+v", st)
	}
	for i, s := range starts {
		pts, held, err := p.Read(qref("s", s), "s", math.MinInt64, math.MaxInt64)
		if err != nil {
			t.Fatal(err)
		}
		if i < dropped && held || i >= dropped && pts.Len() != 2000 {
			t.Fatalf("quantum %d of %d: held=%v, %d points", i, dropped, held, pts.Len())
		}
	}
	err = p.Append(qref("s", starts[0]), "s", series.Points{Type: series.String, T: []int64{starts[0] * 1e9}, S: []string{"x"}})
	if !errors.Is(err, ErrExpired) || !strings.Contains(err.Error(), "disk budget of 6.0 MiB") {
		t.Fatalf("append into a dropped quantum: %v", err)
	}
	// Under the budget, a pass drops nothing.
	if n, err := p.EnforceDiskBudget(); n != 0 || err != nil {
		t.Fatalf("second pass: %d, %v", n, err)
	}
}

// TestPebbleDiskBudgetBelowOverhead gives a store a budget smaller than its engine's
// fixed overhead: enforcing it drops the ended quanta and stops there, without
// touching a quantum that has not ended.
func TestPebbleDiskBudgetBelowOverhead(t *testing.T) {
	o := testOptions(SyncNone)
	o.EnforceInterval = -1
	o.MaxDisk = 1 << 10
	p := openTest(t, t.TempDir(), o)
	defer p.Close()
	cur := (time.Now().Unix()/10)*10 + 60 // a quantum that cannot end during the test
	for _, s := range []int64{testStart, cur} {
		if err := p.Append(qref("k", s), "k", series.Points{Type: series.Int, T: []int64{s * 1e9}, I: []int64{1}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.db.Flush(); err != nil {
		t.Fatal(err)
	}
	n, err := p.EnforceDiskBudget()
	if err != nil || n != 1 {
		t.Fatalf("dropped %d, %v; want the one ended quantum", n, err)
	}
	if _, held, _ := p.Read(qref("k", cur), "k", math.MinInt64, math.MaxInt64); !held {
		t.Fatal("a quantum that has not ended was dropped")
	}
	wantExact(t, p)
}

// TestPebblePairsWalksEveryPair walks more pairs than one iterator batch holds, sealed
// and not, and deletes during the walk.
func TestPebblePairsWalksEveryPair(t *testing.T) {
	p := openTest(t, t.TempDir(), testOptions(SyncNone))
	defer p.Close()
	const n = 2*walkBatch + 17
	for i := range n {
		s := testStart + int64(i%50)*10
		key := fmt.Sprintf("k%d", i)
		if err := p.Append(qref(key, s), key, series.Points{Type: series.Int, T: []int64{s * 1e9}, I: []int64{int64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.SealNow(time.Unix(testStart+300, 0)); err != nil { // about half
		t.Fatal(err)
	}
	seen := map[string]int{}
	last := int64(math.MinInt64)
	err := p.Pairs(func(r ShardRef, key string) bool {
		if r.Start < last {
			t.Errorf("walk not in quantum order: %d after %d", r.Start, last)
		}
		last = r.Start
		if r.ID != qref(key, r.Start).ID {
			t.Errorf("pair %s at %d has the wrong shard ID", key, r.Start)
		}
		seen[key]++
		// Deleting the pair being walked is allowed.
		if err := p.Delete(r, key); err != nil {
			t.Error(err)
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != n {
		t.Fatalf("walked %d pairs, want %d", len(seen), n)
	}
	for k, c := range seen {
		if c != 1 {
			t.Fatalf("%s walked %d times", k, c)
		}
	}
	if st := p.Stats(); st.Shards != 0 || st.Points != 0 || st.Series != n {
		t.Fatalf("after deleting every pair: %+v", st)
	}
	wantExact(t, p)
}
