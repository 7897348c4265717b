package httpapi

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
	"golang.org/x/time/rate"

	"github.com/tsdht/tsdht/internal/netyield"
	"github.com/tsdht/tsdht/tsdb/agg"
)

// The node-wide HTTP budgets (docs/http.md, "The node's HTTP budget").
//
// Work: every HTTP request's work is charged, in bytes, to one budget over time shared
// by all requests (Config.WorkBytesPerSecond, a bucket one second deep), and to its
// client's share of it (Config.ClientShare of the rate, clients told apart by their
// address): a body's bytes as they arrive, the bytes it decompresses to (counted from
// the snappy header before a remote write is decoded, as they come out of gzip: parsing
// walks those bytes once more, so a write costs about twice its decoded bytes), the
// series a write builds (seriesCost each, once parsed) and the points a query reads or
// aggregates (queryPointCost a point). A request is
// admitted only while neither bucket is in debt; what it then costs may take them into
// debt, and the requests after it are refused with Retry-After until it is paid back.
// So whatever HTTP clients send, they take the node's CPU and allocations at most at the
// budget's rate on average, and one client at most at its share, leaving the rest to
// another client and to the RPC writers. A client that has used less than half its
// share lately is admitted even while the node's budget is in debt (spent).
//
// Memory: the bodies being read (Config.MaxInflightBodyBytes, charged as bytes arrive and
// as they decompress, held until the request ends) and the points and windows queries
// hold (Config.QueryMemoryBytes, held until the query's answer is written) are each one
// node-wide pool; a request that would take more than is left is refused (429) or, for a
// query's statement, fails with an error naming the limit.

// queryPointCost is the work, in bytes of the budget, charged for each point a query
// reads or aggregates: what reading it allocates (its chunk decoded, the point copied
// into the series' points and its window) and the CPU that takes, several times a
// line-protocol point's bytes.
const queryPointCost = 128

// seriesCost is the work, in bytes of the budget, charged for each series a write
// request names whose key and tags were built from its bytes (a remote write's every
// series; a line-protocol series not found in the series of earlier requests), once
// parsed: what building it allocates, then looking it up in the node's catalog, several
// times its line. A body of thousands of new series thus spends the budget many times
// faster than a collector's, which names the series of its earlier requests.
const seriesCost = 512

// pointBytes is the memory, for QueryMemoryBytes, that a point a query holds takes.
const pointBytes = 16

// windowBytes is the memory a window (agg.Window) a query holds takes.
const windowBytes = 96

// maxClients bounds the clients whose share the budget remembers; past it the shares
// start over (each client's debt is forgotten, the node's is not).
const maxClients = 4096

// workBudget is the node-wide budget of HTTP work over time, and each client's share.
type workBudget struct {
	rate, share float64 // bytes a second; a client's fraction of it
	node        *rate.Limiter

	mu      sync.Mutex
	clients map[string]*rate.Limiter
}

// newWorkBudget returns the budget of bytesPerSecond, or nil (no budget: every request
// admitted, nothing charged) for -1.
func newWorkBudget(bytesPerSecond int64, share float64) *workBudget {
	if bytesPerSecond < 0 {
		return nil
	}
	r := float64(bytesPerSecond)
	return &workBudget{rate: r, share: share, node: rate.NewLimiter(rate.Limit(r), burstOf(r)),
		clients: make(map[string]*rate.Limiter)}
}

// burstOf is the depth of a bucket filled at r a second: one second's worth.
func burstOf(r float64) int { return int(math.Max(1, math.Min(r, math.MaxInt32))) }

// account is one request's side of the budget: the node's bucket and its client's.
type account struct {
	b      *workBudget
	client *rate.Limiter
}

// account returns the account of the client that sent r (its address without the port).
func (b *workBudget) account(r *http.Request) account {
	if b == nil {
		return account{}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.clients[host]
	if c == nil {
		if len(b.clients) >= maxClients {
			clear(b.clients)
		}
		r := b.rate * b.share
		c = rate.NewLimiter(rate.Limit(r), burstOf(r))
		b.clients[host] = c
	}
	return account{b: b, client: c}
}

// spent reports how long until the budget admits a request of a: zero when the
// client's bucket is not in debt and either the node's is not either, or the client
// has used less than half its share lately (its bucket more than half full). So a
// client that spent the node's budget is refused, and so are the other heavy ones,
// until it is paid back, but a light client is not: one client cannot starve another.
// (Many light clients together can take more than the node's budget: at most half a
// share each.)
// own is what the request asking has charged itself so far: it is not counted, so that
// a request checked again (heavy.go) is refused for what others spent, not for its own
// bytes.
func (a account) spent(own int64) time.Duration {
	if a.b == nil {
		return 0
	}
	now := time.Now()
	cr := a.b.rate * a.b.share
	ct := a.client.TokensAt(now) + float64(own)
	if ct < 0 {
		return time.Duration(-ct / cr * float64(time.Second))
	}
	if t := a.b.node.TokensAt(now) + float64(own); t < 0 && ct < float64(a.client.Burst())/2 {
		// Until the node's debt is paid, or this client's bucket is half full again.
		wait := math.Min(-t/a.b.rate, (float64(a.client.Burst())/2-ct)/cr)
		return time.Duration(math.Max(wait, 1e-3) * float64(time.Second))
	}
	return 0
}

// charge takes n bytes of work from the node's bucket and the client's, into debt if
// need be.
func (a account) charge(n int64) {
	if a.b == nil {
		return
	}
	now := time.Now()
	for _, l := range []*rate.Limiter{a.b.node, a.client} {
		for left := n; left > 0; {
			c := min(left, int64(l.Burst()))
			l.ReserveN(now, int(c))
			left -= c
		}
	}
}

// budgetSpent is a request the work budget refused: what to tell the client, and when
// to retry.
type budgetSpent struct {
	wait time.Duration
	msg  string
}

// check returns what to answer when a's budget is spent, not counting own bytes the
// request asking charged itself (spent), else nil.
func (a account) check(own int64, what string) *budgetSpent {
	if wait := a.spent(own); wait > 0 {
		return &budgetSpent{wait: wait, msg: fmt.Sprintf(
			"this node's HTTP work budget is spent (%s a second, tsdht node --http-budget; one client gets at most %.0f%% of it), not %s: retry after %s s, or send to another node",
			mib(int64(a.b.rate)), a.b.share*100, what, retryAfterSeconds(wait))}
	}
	return nil
}

// memPool is a node-wide pool of bytes that requests hold while they run.
type memPool struct {
	size int64
	sem  *semaphore.Weighted
	used atomic.Int64 // what sem has given out, to report
}

func newMemPool(size int64) *memPool { return &memPool{size: size, sem: semaphore.NewWeighted(size)} }

// held returns the bytes of p held now.
func (p *memPool) held() int64 { return p.used.Load() }

// hold is what one request holds of a memPool; the zero value of a nil pool holds nothing.
type hold struct {
	p    *memPool
	held int64
}

// grow takes n more bytes, or reports false (taking nothing) when the pool has not that
// many left.
func (h *hold) grow(n int64) bool {
	if h.p == nil || n <= 0 {
		return true
	}
	if !h.p.sem.TryAcquire(n) {
		return false
	}
	h.held += n
	h.p.used.Add(n)
	return true
}

// release gives back all that h holds.
func (h *hold) release() {
	if h.p != nil && h.held > 0 {
		h.p.sem.Release(h.held)
		h.p.used.Add(-h.held)
		h.held = 0
	}
}

// mib formats n bytes in MiB.
func mib(n int64) string { return fmt.Sprintf("%.4g MiB", float64(n)/(1<<20)) }

// queryCost is one /query's charges to the node's budgets: the work of the points it
// reads and aggregates, and the memory of the points and windows it holds until its
// answer is written (released by done). A nil *queryCost charges nothing.
type queryCost struct {
	h    *Handler
	acct account
	mem  hold
	// pace is spent the work of the points read (queryPointCost each) and of the
	// windows this node combines (windowBytes each: their points were aggregated where
	// they are stored), yielding the core at its intervals (yield.go).
	pace *netyield.Pacer
}

func (h *Handler) newQueryCost(acct account) *queryCost {
	return &queryCost{h: h, acct: acct, mem: hold{p: h.queryMem}, pace: newHeavyPacer()}
}

// done gives back the memory the query holds.
func (q *queryCost) done() {
	if q != nil {
		q.mem.release()
	}
}

// points charges n points read to the query: their work, and their memory, failing
// with an error naming QueryMemoryBytes when the node's queries hold too much already.
func (q *queryCost) points(n int) error {
	if q == nil {
		return nil
	}
	q.acct.charge(int64(n) * queryPointCost)
	q.pace.Spend(n * queryPointCost)
	return q.hold(int64(n) * pointBytes)
}

// windows charges the windows of an aggregate to the query: the work of the points
// aggregated into them, and the windows' memory.
func (q *queryCost) windows(ws []agg.Window) error {
	if q == nil {
		return nil
	}
	var n int64
	for i := range ws {
		n += ws[i].Count
	}
	q.acct.charge(n * queryPointCost)
	q.pace.Spend(len(ws) * windowBytes)
	return q.hold(int64(len(ws)) * windowBytes)
}

func (q *queryCost) hold(n int64) error {
	if q.mem.grow(n) {
		return nil
	}
	q.h.m.refused.WithLabelValues("query_memory").Inc()
	return fmt.Errorf("the queries running on this node hold %s of points and windows (QueryMemoryBytes, tsdht node --http-query-memory): retry later, or narrow the time range or series", mib(q.h.cfg.QueryMemoryBytes))
}
