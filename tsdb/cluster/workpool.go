package cluster

import (
	"sync"
	"sync/atomic"
	"time"
)

// WorkPool runs short jobs on goroutines that outlive them. A write's appends to this
// node's store go deep (coordinator, replica, store, pebble); a fresh goroutine for each
// grows its stack to that depth every time (10 % of a node's CPU under HTTP writes). A
// pooled goroutine keeps its grown stack for the next job. Up to max goroutines wait for
// jobs, each leaving after idle without one; when all are busy, a job gets a goroutine
// of its own, so run never blocks.
type WorkPool struct {
	max  int
	idle time.Duration
	jobs chan func()

	mu sync.Mutex
	n  int // goroutines of the pool

	waiting atomic.Int32 // goroutines of the pool between jobs
}

func NewWorkPool(max int, idle time.Duration) *WorkPool {
	return &WorkPool{max: max, idle: idle, jobs: make(chan func())}
}

// Run runs f on a goroutine of the pool, or on a new one.
func (p *WorkPool) Run(f func()) {
	select {
	case p.jobs <- f: // a waiting goroutine took it
		return
	default:
	}
	p.mu.Lock()
	pooled := p.n < p.max
	if pooled {
		p.n++
	}
	p.mu.Unlock()
	if !pooled {
		go f()
		return
	}
	go p.work(f)
}

func (p *WorkPool) work(f func()) {
	f()
	t := time.NewTimer(p.idle)
	defer t.Stop()
	for {
		p.waiting.Add(1)
		select {
		case f = <-p.jobs:
			p.waiting.Add(-1)
			f()
			t.Reset(p.idle)
		case <-t.C:
			p.waiting.Add(-1)
			p.mu.Lock()
			p.n--
			p.mu.Unlock()
			return
		}
	}
}

// Waiting is how many of the pool's goroutines are between jobs, ready for the next.
func (p *WorkPool) Waiting() int { return int(p.waiting.Load()) }

// StoreWorkers writes PutMany's shards to this node's store and runs FanOut's calls
// (one pool per process: the nodes of a LocalCluster share it).
var StoreWorkers = NewWorkPool(256, 10*time.Second)
