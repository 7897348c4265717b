package ingest

import (
	"fmt"
	"sync"

	"github.com/tsdht/tsdht/pmu/spool"
)

// queue holds flushed batches between the PMU reader and the cluster writer: the
// on-disk spool, or memQueue when no spool directory is given.
type queue interface {
	Append(rec []byte) error
	Next(stop <-chan struct{}) ([]byte, spool.Pos, error)
	Ack(pos spool.Pos) error
	Stats() spool.Stats
	Close() error
}

// memQueue is a bounded in-memory queue with the spool's interface: a process exit
// loses what it holds.
type memQueue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	recs   [][]byte
	head   int64 // index of recs[0]
	next   int64 // next index to hand out
	limit  int64
	stats  spool.Stats
	closed bool
}

func newMemQueue(limit int64) *memQueue {
	q := &memQueue{limit: limit}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *memQueue) Append(rec []byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return spool.ErrClosed
	}
	if q.stats.Bytes+int64(len(rec)) > q.limit {
		q.stats.Refused++
		return fmt.Errorf("%w: in-memory queue holds %d of %d bytes (give --spool for more)", spool.ErrFull, q.stats.Bytes, q.limit)
	}
	q.recs = append(q.recs, rec)
	q.stats.Bytes += int64(len(rec))
	q.stats.Records++
	q.stats.Appended++
	q.cond.Broadcast()
	return nil
}

func (q *memQueue) Next(stop <-chan struct{}) ([]byte, spool.Pos, error) {
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-stop:
			q.mu.Lock()
			q.cond.Broadcast()
			q.mu.Unlock()
		case <-done:
		}
	}()
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		select {
		case <-stop:
			return nil, spool.Pos{}, spool.ErrClosed
		default:
		}
		if q.closed {
			return nil, spool.Pos{}, spool.ErrClosed
		}
		if i := q.next - q.head; i < int64(len(q.recs)) {
			q.next++
			return q.recs[i], spool.Pos{Off: q.next}, nil
		}
		q.cond.Wait()
	}
}

func (q *memQueue) Ack(pos spool.Pos) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.head < pos.Off && len(q.recs) > 0 {
		q.stats.Bytes -= int64(len(q.recs[0]))
		q.stats.Records--
		q.recs[0] = nil
		q.recs = q.recs[1:]
		q.head++
	}
	return nil
}

func (q *memQueue) Stats() spool.Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.stats
}

func (q *memQueue) Close() error {
	q.mu.Lock()
	q.closed = true
	q.cond.Broadcast()
	q.mu.Unlock()
	return nil
}
