package store

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/series"
)

// bufferedOptions: a write buffer that drains only when something makes it.
func bufferedOptions(mode SyncMode) PebbleOptions {
	o := testOptions(mode)
	o.BufferWait = time.Hour
	o.SyncInterval = time.Hour
	return o
}

func onePoint(i int) series.Points {
	return series.Points{Type: series.Float, T: []int64{testStart*1e9 + int64(i)*16_666_667}, F: []float64{float64(i)}}
}

// TestBufferMergesAppends: single-point appends wait in the buffer and reach pebble as
// one block, and a read sees them all.
func TestBufferMergesAppends(t *testing.T) {
	for _, mode := range []SyncMode{SyncBatch, SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			p := openTest(t, t.TempDir(), bufferedOptions(mode))
			defer p.Close()
			const n = 120
			for i := range n {
				if err := p.Append(testRef, "k", onePoint(i)); err != nil {
					t.Fatal(err)
				}
			}
			// The first append wrote the series' type (the direct path); the others wait.
			if got := p.buf.unsettled.Load(); got != n-1 {
				t.Fatalf("%d appends wait in the buffer, want %d", got, n-1)
			}
			id := pairID(testRef, "k")
			if got := countKeys(t, p, id, kindBlock); got != 1 {
				t.Fatalf("pebble holds %d blocks before the drain, want the first append's 1", got)
			}
			pts, held, err := p.Read(testRef, "k", math.MinInt64, math.MaxInt64)
			if err != nil || !held {
				t.Fatalf("read: held %v, %v", held, err)
			}
			if pts.Len() != n {
				t.Fatalf("read %d points, want %d", pts.Len(), n)
			}
			for i := range n {
				if pts.F[i] != float64(i) {
					t.Fatalf("point %d holds %v", i, pts.F[i])
				}
			}
			if got := countKeys(t, p, id, kindBlock); got != 2 {
				t.Fatalf("pebble holds %d blocks after one drain, want 2", got)
			}
			if st := p.Stats(); st.Points != n || st.BufferedAppends != n-1 || st.BufferDrains != 1 {
				t.Fatalf("Stats: %d points, %d buffered appends in %d drains; want %d, %d in 1", st.Points, st.BufferedAppends, st.BufferDrains, n, n-1)
			}
		})
	}
}

// TestBufferDrainsOnItsOwn: with nothing reading, SyncNone's timer and SyncBatch's sync
// loop bring the buffer to pebble.
func TestBufferDrainsOnItsOwn(t *testing.T) {
	for _, mode := range []SyncMode{SyncBatch, SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			o := testOptions(mode)
			o.BufferWait, o.SyncInterval = 20*time.Millisecond, 20*time.Millisecond
			p := openTest(t, t.TempDir(), o)
			defer p.Close()
			for i := range 10 {
				if err := p.Append(testRef, "k", onePoint(i)); err != nil {
					t.Fatal(err)
				}
			}
			if !testutil.Poll(10*time.Second, func() bool { return p.buf.unsettled.Load() == 0 }) {
				t.Fatalf("%d appends still wait in the buffer after 10 s", p.buf.unsettled.Load())
			}
			if got := countKeys(t, p, pairID(testRef, "k"), kindBlock); got != 2 {
				t.Fatalf("pebble holds %d blocks, want 2 (the first append, then one drain)", got)
			}
			if mode == SyncBatch {
				// The drain and the sync run in one pass of the loop: wait for that pass.
				testutil.WaitFor(t, 10*time.Second, func() bool { return !p.dirty.Load() }, "the drained appends to be synced")
			}
		})
	}
}

// TestBufferKeepsRefusals: what a commit would refuse is refused at once, buffered
// series or not, and nothing of it waits in the buffer.
func TestBufferKeepsRefusals(t *testing.T) {
	o := bufferedOptions(SyncNone)
	o.Retention = time.Hour
	p := openTest(t, t.TempDir(), o)
	defer p.Close()
	start := time.Now().Unix() / int64(o.Quantum) * int64(o.Quantum)
	now := ShardRef{ID: quanta.ShardID(quanta.QFI, "k", start), Start: start}
	at := func(i int64) series.Points {
		return series.Points{Type: series.Float, T: []int64{start*1e9 + i}, F: []float64{1}}
	}
	for i := range int64(3) {
		if err := p.Append(now, "k", at(i)); err != nil {
			t.Fatal(err)
		}
	}
	waiting := p.buf.unsettled.Load()
	if waiting != 2 {
		t.Fatalf("%d appends wait, want 2", waiting)
	}
	err := p.Append(now, "k", series.Points{Type: series.Int, T: []int64{start * 1e9}, I: []int64{1}})
	if !errors.Is(err, series.ErrTypeMismatch) {
		t.Fatalf("an int point into a float series: %v, want a type mismatch", err)
	}
	old := ShardRef{ID: quanta.ShardID(quanta.QFI, "k", testStart), Start: testStart}
	err = p.Append(old, "k", onePoint(0))
	if !errors.Is(err, ErrExpired) {
		t.Fatalf("a point past retention: %v, want ErrExpired", err)
	}
	err = p.AppendBatch([]PairAppend{{Ref: now, Key: "k", Points: at(9)}, {Ref: old, Key: "k", Points: onePoint(1)}})
	if !errors.Is(err, ErrExpired) {
		t.Fatalf("a batch with a point past retention: %v, want ErrExpired", err)
	}
	pts, _, err := p.Read(now, "k", math.MinInt64, math.MaxInt64)
	if err != nil || pts.Len() != 3 {
		t.Fatalf("read %d points (%v), want the 3 accepted", pts.Len(), err)
	}
}

// TestBufferDirectAppendDrainsFirst: an append that does not wait (here a new series')
// commits after everything the buffer holds, so the WAL keeps acknowledgement order and
// a crash leaves a prefix of the acknowledged writes.
func TestBufferDirectAppendDrainsFirst(t *testing.T) {
	p := openTest(t, t.TempDir(), bufferedOptions(SyncNone))
	defer p.Close()
	for i := range 5 {
		if err := p.Append(testRef, "a", onePoint(i)); err != nil {
			t.Fatal(err)
		}
	}
	if p.buf.unsettled.Load() == 0 {
		t.Fatal("nothing waits in the buffer: the test tests nothing")
	}
	if err := p.Append(testRef, "b", onePoint(0)); err != nil {
		t.Fatal(err)
	}
	if got := p.buf.unsettled.Load(); got != 0 {
		t.Fatalf("%d appends of a still wait after b's direct commit", got)
	}
	if got := countKeys(t, p, pairID(testRef, "a"), kindBlock); got != 2 {
		t.Fatalf("pebble holds %d blocks of a, want 2", got)
	}
}

// TestBufferFullDrainsInline: a writer that fills the buffer drains it itself, so the
// buffer never holds more than WriteBuffer bytes, and every point arrives.
func TestBufferFullDrainsInline(t *testing.T) {
	o := bufferedOptions(SyncNone)
	o.WriteBuffer = 2 << 10
	p := openTest(t, t.TempDir(), o)
	defer p.Close()
	const n = 1000
	for i := range n {
		if err := p.Append(testRef, "k", onePoint(i)); err != nil {
			t.Fatal(err)
		}
		p.buf.mu.Lock()
		held := p.buf.bytes
		p.buf.mu.Unlock()
		if held > o.WriteBuffer {
			t.Fatalf("the buffer holds %d bytes, more than its %d", held, o.WriteBuffer)
		}
	}
	if p.buf.drains.Load() < 10 {
		t.Fatalf("%d drains for %d appends into a 2 KiB buffer", p.buf.drains.Load(), n)
	}
	if pts, _, err := p.Read(testRef, "k", math.MinInt64, math.MaxInt64); err != nil || pts.Len() != n {
		t.Fatalf("read %d points (%v), want %d", pts.Len(), err, n)
	}
}

// TestBufferCloseDrains: a clean Close loses nothing, and appends after it are refused.
func TestBufferCloseDrains(t *testing.T) {
	for _, mode := range []SyncMode{SyncBatch, SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			p := openTest(t, dir, bufferedOptions(mode))
			const n = 50
			for i := range n {
				if err := p.Append(testRef, "k", onePoint(i)); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			if err := p.Append(testRef, "k", onePoint(n)); !errors.Is(err, ErrClosed) {
				t.Fatalf("append after Close: %v, want ErrClosed", err)
			}
			p = openTest(t, dir, bufferedOptions(mode))
			defer p.Close()
			if pts, _, err := p.Read(testRef, "k", math.MinInt64, math.MaxInt64); err != nil || pts.Len() != n {
				t.Fatalf("after reopening: %d points (%v), want %d", pts.Len(), err, n)
			}
		})
	}
}

// TestBufferReadsSeeAcknowledgedWrites runs writers and readers at once (go test -race):
// a read that starts after an append was acknowledged sees its point, through drains
// triggered by reads, by full buffers and by the timer.
func TestBufferReadsSeeAcknowledgedWrites(t *testing.T) {
	o := testOptions(SyncNone)
	o.WriteBuffer = 8 << 10
	o.BufferWait = 2 * time.Millisecond
	p := openTest(t, t.TempDir(), o)
	defer p.Close()
	const writers, n = 4, 300
	var acked [writers]atomic.Int64
	for w := range writers {
		acked[w].Store(-1)
	}
	errs := make(chan error, 2*writers)
	var wg sync.WaitGroup
	for w := range writers {
		key := fmt.Sprintf("w%d", w)
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range n {
				if err := p.Append(testRef, key, onePoint(i)); err != nil {
					errs <- err
					return
				}
				acked[w].Store(int64(i))
			}
		}()
		go func() {
			defer wg.Done()
			for last := int64(-1); last < n-1; {
				last = acked[w].Load()
				pts, _, err := p.Read(testRef, key, math.MinInt64, math.MaxInt64)
				if err != nil {
					errs <- err
					return
				}
				if int64(pts.Len()) < last+1 {
					errs <- fmt.Errorf("%s: read %d points after point %d was acknowledged", key, pts.Len(), last)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Points != writers*n {
		t.Fatalf("Stats.Points = %d, want %d", st.Points, writers*n)
	}
}

// TestBufferDropsWhatChangedType: a pair whose series changed type between its appends'
// acceptance and their drain (ForgetType and a new declaration racing them) is left out
// of the drain, and the other pairs, and later drains, still reach the engine.
func TestBufferDropsWhatChangedType(t *testing.T) {
	p := openTest(t, t.TempDir(), bufferedOptions(SyncNone))
	defer p.Close()
	for i := range 3 {
		for _, key := range []string{"a", "b"} {
			if err := p.Append(testRef, key, onePoint(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// What the race leaves: an int point of float series b waiting in the buffer.
	stale := PairAppend{Ref: testRef, Key: "b", Points: series.Points{Type: series.Int, T: []int64{testStart*1e9 + 99}, I: []int64{7}}}
	p.buf.mu.Lock()
	p.buf.pending = append(p.buf.pending, stale)
	p.buf.bytes += bufferedSize(&stale)
	p.buf.unsettled.Add(1)
	p.buf.mu.Unlock()
	if pts, _, err := p.Read(testRef, "a", math.MinInt64, math.MaxInt64); err != nil || pts.Len() != 3 {
		t.Fatalf("read a: %d points (%v), want 3", pts.Len(), err)
	}
	if pts, _, err := p.Read(testRef, "b", math.MinInt64, math.MaxInt64); err != nil || pts.Len() != 3 || pts.Type != series.Float {
		t.Fatalf("read b: %d %v points (%v), want its 3 floats", pts.Len(), pts.Type, err)
	}
	if err := p.Append(testRef, "a", onePoint(3)); err != nil {
		t.Fatal(err)
	}
	if pts, _, err := p.Read(testRef, "a", math.MinInt64, math.MaxInt64); err != nil || pts.Len() != 4 {
		t.Fatalf("read a after: %d points (%v), want 4", pts.Len(), err)
	}
}
