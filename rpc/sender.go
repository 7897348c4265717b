package rpc

import (
	"context"
	"net"
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
// calls than one write per frame, which matters on a 1 GHz ARM core.
type sender struct {
	conn    net.Conn
	timeout time.Duration // for one write; a peer slower than this stopped reading
	queue   chan []byte
	stop    <-chan struct{} // closed when the connection is being torn down
	fail    func(error)     // called once if a write fails; must close conn
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
		err := s.conn.SetWriteDeadline(time.Now().Add(s.timeout))
		if err == nil {
			bufs := net.Buffers(batch)
			_, err = bufs.WriteTo(s.conn)
		}
		if err != nil {
			s.fail(err)
			return
		}
		clear(batch) // let the sent frames be collected
		batch = batch[:0]
	}
}
