package coord

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsdht/tsdht/internal/netyield"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Long reads: gets and aggregates over more than readPageQuanta quanta, which this
// node coordinates page by page. Each costs the node CPU for every quantum of its
// range, held or not (2²⁰ quanta, the documented maximum, take seconds of a core),
// and any client may ask for one. So that a flood of them — careless or hostile —
// costs the node a bounded share of its time, and the small reads and writes beside
// them keep their latency (TestSoakHostile):
//
//   - they run one at a time (maxLongReads); the others wait for their turn within
//     their deadline, and are refused wire.CodeUnavailable when it does not come;
//   - their pages are paced while something else wants the node (pacer.contended:
//     another long read waits for its turn, or this node coordinated a write within
//     contentionWindow): the node's long reads together then take at most
//     longReadShare of its time on average, beyond a burst of longReadBurst at full
//     speed (so an occasional hour or day of history is read at once); a page that
//     would go over waits until the time is earned. A long read alone on an
//     otherwise idle node is not paced at all, and its pages are not charged: it
//     takes time nobody else asked for (TestLongReadAloneUnpaced);
//   - a long read's page asks its replicas one request at a time, so that it keeps at
//     most one core busy and the other cores serve everything else, and it yields
//     the core before it starts (netyield.Yield, which also lets the runtime poll the
//     network), so that the requests that arrived while the last page ran go first: a
//     small request waits for at most about one page, not for the burst;
//   - within a page, this node's store yields the core every pageYieldEvery quanta
//     (yieldInPage), so that a small request waits for at most that much of a page;
//   - so the node runs at most one long-read page at a time, whichever connection
//     or client the reads came from: one turn for the whole node, and a turn's pages
//     one after another (pacer.most counts it; TestLongReadsOnePageAtATime);
//   - a long read holds the starts of one page of quanta at a time (coverQuanta),
//     not of its whole range: 2²⁰ quanta would be 8 MiB per read, garbage that the
//     collector then charges to every request beside it;
//   - for the same reason its pages reuse one set of working slices (pageBufs:
//     spans, answers, requests, this node's answers) and place their shards by a
//     scan of the owners into it (replicaScanner), not through the placement cache
//     that writes use: tens of bytes allocated per quantum, not a kilobyte
//     (TestLongReadAllocs).

// maxLongReads is how many long reads a node coordinates at once.
const MaxLongReads = 1

// longReadShare is the default share of wall time that a node's long reads take on
// average while the node is contended, once their burst is spent
// (Config.LongReadShare): 1/4 of one core.
const DefaultLongReadShare = 0.25

// longReadBurst is how much page time contended long reads may take at full speed
// before pacing starts, refilled at longReadShare: an hour of 10 s quanta is two
// pages, a day 34.
const longReadBurst = 250 * time.Millisecond

// contentionWindow is how long after a write this node coordinated its long reads
// count as contended (pacer.contended). A writer that stores a point a second or
// more often (the substation's PMUs, a flood's writer) keeps the node contended
// throughout; one that writes every minute leaves a dashboard's reads between its
// writes unpaced, which is what that node's time is free for.
const contentionWindow = time.Second

// pacer is a token bucket of time: pages that run while the node is contended are
// charged the wall time they took, and time is earned back at share of the wall time
// that passes, up to burst; pages that run while nothing else wants the node are
// neither held back nor charged. It is the node's, shared by its long reads.
type pacer struct {
	share float64       // of wall time, in (0, 1]
	burst time.Duration // the most time held
	now   func() time.Time

	// running counts the pages running now, and most the most that ever ran at once:
	// one, as long reads take turns (maxLongReads) and a read's pages run one after
	// another (TestLongReadsOnePageAtATime).
	running, most atomic.Int32

	// waiting counts the long reads waiting for their turn (longRead), and lastWrite
	// is when this node last coordinated a write (noteWrite; UnixNano, 0 for never):
	// what makes the node contended (contended).
	waiting   atomic.Int32
	lastWrite atomic.Int64

	mu     sync.Mutex
	credit time.Duration // may be negative: the debt of the last page
	last   time.Time     // when credit was last brought up to date
	spent  time.Duration // all the time charged: pages that ran contended
	held   time.Duration // all the time pages were told to wait before they ran
	free   time.Duration // all the time of pages that ran uncontended, never charged
}

func newPacer(share float64, burst time.Duration) *pacer {
	return &pacer{share: share, burst: burst, credit: burst, now: time.Now}
}

// refillLocked brings p.credit up to now. Called with p.mu held.
func (p *pacer) refillLocked() time.Time {
	now := p.now()
	if !p.last.IsZero() {
		p.credit = min(p.burst, p.credit+time.Duration(float64(now.Sub(p.last))*p.share))
	}
	p.last = now
	return now
}

// wait returns how long the next page must wait before it starts: until the debt
// of the pages before it is earned back (0 when there is none).
func (p *pacer) wait() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refillLocked()
	if p.credit >= 0 {
		return 0
	}
	return time.Duration(float64(-p.credit) / p.share)
}

// charge debits d, the time a page took.
func (p *pacer) charge(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refillLocked()
	p.credit -= d
	p.spent += d
}

// noteWrite records that this node coordinates a write now: its long reads are
// contended for contentionWindow.
func (p *pacer) noteWrite() { p.lastWrite.Store(p.now().UnixNano()) }

// contended reports whether something else wants the node: a long read waits for its
// turn (a flood of them, hostile or not, or many dashboards at once), or this node
// coordinated a write within contentionWindow. Writes and the waiting long reads are
// what long reads must leave time to; a short read is not counted: it costs a page
// at most, and waits for no more of a long read's page than runs between two of its
// yields (pageYieldEvery), paced or not.
func (p *pacer) contended() bool {
	if p.waiting.Load() > 0 {
		return true
	}
	w := p.lastWrite.Load()
	return w != 0 && p.now().UnixNano()-w < int64(contentionWindow)
}

// admit says whether the next page starts contended and, if it does, how long it
// must wait first (wait), which it counts in held. An uncontended page waits for
// nothing, whatever debt contended pages left.
func (p *pacer) admit() (wait time.Duration, contended bool) {
	if !p.contended() {
		return 0, false
	}
	wait = p.wait()
	p.mu.Lock()
	p.held += wait
	p.mu.Unlock()
	return wait, true
}

// settle accounts for a page that took d: charged if the node was contended when it
// started (contended) or is when it ends (a write or a waiting long read came
// meanwhile), else counted in free.
func (p *pacer) settle(d time.Duration, contended bool) {
	if contended || p.contended() {
		p.charge(d)
		return
	}
	p.mu.Lock()
	p.free += d
	p.mu.Unlock()
}

// paced returns the time charged to long reads, the time their pages waited and the
// time of their uncontended pages, so far.
func (p *pacer) paced() (spent, held, free time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.spent, p.held, p.free
}

// longTurn is one long read's turn (longRead); a nil *longTurn is a short read's,
// which runs its one page unpaced.
type longTurn struct {
	c    *Coordinator
	key  string
	bufs *pageBufs // its pages' working slices, reused page after page
}

// longRead waits for a long read's turn, or returns an error with wire.CodeUnavailable if
// it did not come within nine tenths of the time left to ctx (so that the caller
// still gets the answer before it stops waiting). The turn's release must be called.
func (c *Coordinator) longRead(ctx context.Context, key string) (*longTurn, error) {
	// Counted while it waits: the read that has the turn is contended meanwhile.
	c.longPace.waiting.Add(1)
	defer c.longPace.waiting.Add(-1)
	wait := ctx
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		wait, cancel = context.WithDeadline(ctx, d.Add(-time.Until(d)/10))
		defer cancel()
	}
	select {
	case c.longReads <- struct{}{}:
		return &longTurn{c: c, key: key, bufs: pageBufPool.Get().(*pageBufs)}, nil
	case <-wait.Done():
		return nil, rpc.Errorf(wire.CodeUnavailable, "read of %q: other reads of more than %d quanta kept it waiting (they run %d at a time); retry, or ask for a shorter range",
			key, ReadPageQuanta, MaxLongReads)
	}
}

// release ends the turn; a nil turn's does nothing.
func (t *longTurn) release() {
	if t != nil {
		pageBufPool.Put(t.bufs)
		t.bufs = nil
		<-t.c.longReads
	}
}

// fetchLimit is how many requests a read page whose buffers are b may have in flight
// at once: one at a time for a paced page of a long read.
func (c *Coordinator) fetchLimit(b *pageBufs) int {
	if b.paced() {
		return 1
	}
	return c.cfg.ReadConcurrency
}

// longYield gives up the core before a long read's page (netyield.Yield; a test
// counts the calls).
var longYield = netyield.Yield

// pageYieldEvery is how many quanta of a long read's page this node's store reads
// between two yields of the core (yieldInPage). A page of an aggregate is 2,048
// quanta and one of a get 256, milliseconds of a core: a small request that arrives
// while one runs, with the node's other cores busy too (hostile connections, the
// collector, other processes), would otherwise wait for the rest of the page.
const pageYieldEvery = 16

// pageNap is how long a paced page sleeps at each of its yields (yieldInPage), so
// that long reads past their burst also leave the node's other requests more of the
// core: the naps count as page time (under the hostile soak the node's CPU fell from
// 0.53–0.55 cores to 0.38–0.40 with them; docs/security.md). When nothing else runs,
// the runtime's poller sleeps in whole milliseconds: a nap can last up to 1 ms, so
// only pages the pacer already holds back nap (see page).
const pageNap = 50 * time.Microsecond

// pageYield is what yieldInPage calls: with nap, for a page the pacer held back, a
// sleep of pageNap, else netyield.Yield (a test counts the calls). Either lets the
// runtime poll the network before the page goes on. runtime.Gosched would not: the
// runtime looks for network events only when a P has nothing queued, or every 10 ms
// from its monitor, and a page that merely yields is still queued, so a writer's
// request that has just arrived would wait for the rest of the page, or 10 ms (the
// soak's writer, at 0.4 ms p99 quiet, saw 8.5 ms under the huge reads alone).
var pageYield = func(nap bool) {
	if nap {
		time.Sleep(pageNap)
		return
	}
	netyield.Yield()
}

// yield is called with the index of each quantum a read asks this node's store for:
// within a long read's page it yields the core every pageYieldEvery quanta, so that
// the goroutines that became runnable meanwhile — a writer's request among them — run
// before the page goes on. A short read, or a page served for another node, never
// yields.
func (b *pageBufs) yield(i int) {
	if i%pageYieldEvery == pageYieldEvery-1 && b.paced() {
		pageYield(b.nap)
	}
}

// page runs one page of the read, paced while the node is contended: it first waits
// until the node's long reads have earned the time back (an error with
// wire.CodeUnavailable if ctx ends first; no wait when nothing else wants the node,
// pacer.admit) and yields the core (longYield), then runs fn with its fetches one at
// a time and the turn's buffers (pageBufs), and charges the time fn took if the node
// was contended (pacer.settle). A page that had to wait naps at its yields
// (pageYield): contended long reads past their burst are a flood or a long analysis
// beside writes, and its naps, charged as its time, leave the node's other requests
// both the network poller and more of the core. A nil turn runs fn at once.
func (t *longTurn) page(ctx context.Context, fn func(context.Context, *pageBufs) error) error {
	if t == nil {
		return fn(ctx, new(pageBufs))
	}
	p := t.c.longPace
	d, contended := p.admit()
	t.bufs.nap = d > 0
	if d > 0 {
		timer := time.NewTimer(d)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return rpc.Errorf(wire.CodeUnavailable, "read of %q: %v: reads of more than %d quanta are paced to %.0f%% of this node's time; retry later, or ask for a shorter range",
				t.key, ctx.Err(), ReadPageQuanta, 100*p.share)
		}
	}
	longYield()
	for n, m := p.running.Add(1), p.most.Load(); n > m && !p.most.CompareAndSwap(m, n); m = p.most.Load() {
	}
	start := p.now()
	err := fn(ctx, t.bufs)
	p.settle(p.now().Sub(start), contended)
	p.running.Add(-1)
	return err
}

// writeContends is a write hook (writeHooks.beside, registered by New): a write this
// node coordinates makes its long reads contended for contentionWindow.
func (c *Coordinator) writeContends(context.Context, time.Time, []SeriesPut, []SeriesResult, int) func([]SeriesResult) {
	c.longPace.noteWrite()
	return nothingToWait
}

// quantaCover is the quanta covering a range, n of them from first, whose starts are
// made a page at a time (page), so that a read holds what one page needs whatever its
// range.
type quantaCover struct {
	q     quanta.Quantum
	first int64 // the first quantum's start, in UNIX seconds
	n     int
}

// coverQuanta is quanta.Quantum.Covering without the slice: it checks the range the
// same way, and with the same errors.
func coverQuanta(q quanta.Quantum, from, to int64) (quantaCover, error) {
	if from > to {
		return quantaCover{}, fmt.Errorf("%w (from %d > to %d)", quanta.ErrBadRange, from, to)
	}
	if from == to {
		return quantaCover{q: q}, nil
	}
	first, last := q.Start(from), q.Start(to-1)
	n := (last-first)/int64(q) + 1
	if n > quanta.MaxQuantaPerRange || n <= 0 {
		return quantaCover{}, fmt.Errorf("range [%d, %d) covers %d quanta of %v; at most %d per request", from, to, uint64(n), q.Duration(), quanta.MaxQuantaPerRange)
	}
	return quantaCover{q: q, first: first, n: int(n)}, nil
}

// page returns the starts of the quanta lo to lo+size (or the last), ascending.
func (c quantaCover) page(lo, size int) []int64 {
	return c.pageInto(nil, lo, size)
}

// pageInto is page, made in buf when it is large enough.
func (c quantaCover) pageInto(buf []int64, lo, size int) []int64 {
	hi := min(lo+size, c.n)
	starts := buf[:0]
	if cap(starts) < hi-lo {
		starts = make([]int64, 0, max(hi-lo, 0))
	}
	for i := lo; i < hi; i++ {
		starts = append(starts, c.first+int64(i)*int64(c.q))
	}
	return starts
}
