package store

import "sync"

// pairTable serialises the writers of each (shard, series) pair and caches the pairs'
// summaries. Holding a pair's lock across its commit is what makes the point counts
// exact (a writer knows which of its timestamps are new) and keeps a seal from
// deleting a raw point written after it read them. Different pairs never wait for each
// other, so their commits still share fsyncs.
type pairTable struct {
	mu        sync.Mutex
	locks     map[string]*pairLock
	summaries map[string]summary
	max       int
}

type pairLock struct {
	sync.Mutex
	refs int // holders and waiters; the entry goes when it drops to 0
}

func newPairTable(max int) *pairTable {
	return &pairTable{locks: make(map[string]*pairLock), summaries: make(map[string]summary), max: max}
}

// lock locks pair id and returns the function that unlocks it.
func (t *pairTable) lock(id string) (unlock func()) {
	l := t.acquire(id)
	return func() { t.release(id, l) }
}

// acquire locks pair id; release(id, l) unlocks it. No closure: the append path
// takes and drops a lock per pair of every write.
func (t *pairTable) acquire(id string) *pairLock {
	t.mu.Lock()
	l := t.locks[id]
	if l == nil {
		l = pairLocks.Get().(*pairLock)
		t.locks[id] = l
	}
	l.refs++
	t.mu.Unlock()
	l.Lock()
	return l
}

// release unlocks pair id, which acquire returned as l.
func (t *pairTable) release(id string, l *pairLock) {
	l.Unlock()
	t.mu.Lock()
	if l.refs--; l.refs == 0 {
		delete(t.locks, id)
		pairLocks.Put(l) // nobody holds or waits for it: refs counted them all
	}
	t.mu.Unlock()
}

// pairLocks recycles the locks of pairs nobody writes at the moment.
var pairLocks = sync.Pool{New: func() any { return new(pairLock) }}

// summary returns the cached summary of pair id; the caller holds its lock.
func (t *pairTable) summary(id string) (summary, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.summaries[id]
	return s, ok
}

// summaryOf is summary for an id in bytes, without converting it to a string.
func (t *pairTable) summaryOf(id []byte) (summary, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.summaries[string(id)]
	return s, ok
}

// remember caches the summary of pair id; the caller holds its lock, so no other
// writer can cache an older one.
func (t *pairTable) remember(id string, s summary) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.summaries[id]; !ok && len(t.summaries) >= t.max {
		for k := range t.summaries { // a random victim
			delete(t.summaries, k)
			break
		}
	}
	t.summaries[id] = s
}

// forgetBefore drops the cached summaries of pairs whose ids sort before prefix: pairs
// of dropped quanta.
func (t *pairTable) forgetBefore(prefix string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id := range t.summaries {
		if id < prefix {
			delete(t.summaries, id)
		}
	}
}
