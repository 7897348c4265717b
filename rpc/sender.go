package rpc

import (
	"context"
	"net"
	"sync"
	"time"
)

// sendQueueLen bounds the frames waiting for a connection's sender. A
// goroutine that finds the queue full waits: backpressure, not memory.
const sendQueueLen = 64

// maxWriteBatch is the most frames a sender hands the kernel in one write.
const maxWriteBatch = 64

// sender owns the write side of a connection. Frames queued by any goroutine
// go out whole and in order, and those queued while a write was under way go
// out together in the next one (writev on TCP): under load, far fewer system
// calls than one write per frame, which matters on a 1 GHz ARM core. A frame
// offered with trySend while nothing is queued or being written goes out at
// once on the caller's goroutine instead, sparing the sender's wake-up: what a
// lone writer fanning out to seven replicas pays seven times per write.
type sender struct {
	conn    net.Conn
	timeout time.Duration // for one write; a peer slower than this stopped reading
	queue   chan []byte
	stop    <-chan struct{} // closed when the connection is being torn down
	fail    func(error)     // called if a write fails; must close conn, and be safe to call twice

	mu       sync.Mutex // held while writing to conn
	deadline time.Time  // the write deadline conn holds; under mu
}

func newSender(conn net.Conn, timeout time.Duration, stop <-chan struct{}, fail func(error)) *sender {
	return &sender{conn: conn, timeout: timeout, queue: make(chan []byte, sendQueueLen), stop: stop, fail: fail}
}

// send queues frame, waiting for room until ctx ends or the connection is
// torn down. It reports whether frame was queued.
func (s *sender) send(ctx context.Context, frame []byte) bool {
	select {
	case s.queue <- frame:
		return true
	case <-s.stop:
	case <-ctx.Done():
	}
	return false
}

// trySend writes frame at once, on the caller's goroutine, if no frame is
// queued and no write is under way, and reports whether it did; false: the
// caller queues it (send). A write that fails fails the connection (and so
// every call waiting on it), as the sender's own does.
func (s *sender) trySend(frame []byte) bool { return s.trySendAt(frame, time.Now()) }

// trySendAt is trySend with the clock read already (now).
func (s *sender) trySendAt(frame []byte, now time.Time) bool {
	if len(s.queue) > 0 || !s.mu.TryLock() {
		return false
	}
	err := s.extendDeadlineAt(now)
	if err == nil {
		_, err = s.conn.Write(frame)
	}
	s.mu.Unlock()
	if err != nil {
		s.fail(err)
	}
	return true
}

// extendDeadline keeps conn's write deadline at least timeout/2 ahead: a write
// that cannot finish within timeout/2..timeout means the peer stopped reading.
// Moving it only when half is used up spares a timer update per frame. The
// caller holds s.mu.
func (s *sender) extendDeadline() error { return s.extendDeadlineAt(time.Now()) }

func (s *sender) extendDeadlineAt(now time.Time) error {
	if s.deadline.Sub(now) >= s.timeout/2 {
		return nil
	}
	s.deadline = now.Add(s.timeout)
	return s.conn.SetWriteDeadline(s.deadline)
}

// run writes queued frames until stop is closed or a write fails.
func (s *sender) run() {
	batch := make([][]byte, 0, maxWriteBatch)
	for {
		select {
		case frame := <-s.queue:
			batch = append(batch, frame)
		case <-s.stop:
			return
		}
	more:
		for len(batch) < maxWriteBatch {
			select {
			case frame := <-s.queue:
				batch = append(batch, frame)
			default:
				break more
			}
		}
		s.mu.Lock()
		err := s.extendDeadline()
		if err == nil {
			bufs := net.Buffers(batch)
			_, err = bufs.WriteTo(s.conn)
		}
		s.mu.Unlock()
		if err != nil {
			s.fail(err)
			return
		}
		clear(batch) // let the sent frames be collected
		batch = batch[:0]
	}
}
