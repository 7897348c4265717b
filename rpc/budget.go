package rpc

import (
	"context"
	"time"

	"golang.org/x/sync/semaphore"
)

// byteBudget bounds the request bytes a Server holds at once: frames being
// read and requests whose handlers run (Config.MaxInflightBytes), and those
// of one connection (Config.MaxInflightBytesPerConn).
//
// A frame is charged as its bytes arrive (frameReader.reserve), never for the
// length it declares, so a peer that declares 4 MiB and sends nothing holds
// one 64 KiB chunk. Charging piecemeal could deadlock if frames that are all
// part-read held the whole budget, each waiting for more: so MaxFrameSize of
// the budget is kept apart, the reserve, and only one frame at a time may
// draw on it. A frame that finds the shared part exhausted waits for the
// reserve (in arrival order), then takes all its remaining bytes from it: it
// can always complete, and its bytes come back when its response is sent.
type byteBudget struct {
	shared  *semaphore.Weighted // MaxInflightBytes − MaxFrameSize
	reserve *semaphore.Weighted // weight 1: the right to MaxFrameSize more
}

func newByteBudget(total, frame int) *byteBudget {
	return &byteBudget{
		shared:  semaphore.NewWeighted(int64(total - frame)),
		reserve: semaphore.NewWeighted(1),
	}
}

// hold is what one frame, and then its request, holds of the budgets.
type hold struct {
	conn    int  // bytes of the connection's budget
	shared  int  // bytes of the server's shared budget
	reserve bool // the server's reserve
}

// take charges n more bytes to h, from the connection's budget conn and from
// b. It returns how long it had to wait (the wait does not count against the
// frame's read deadline: a sender held back is not a slow sender); the clock
// is read only when it waits.
func (b *byteBudget) take(ctx context.Context, conn *semaphore.Weighted, h *hold, n int) (waited time.Duration, err error) {
	var start time.Time
	if !conn.TryAcquire(int64(n)) {
		start = time.Now()
		if err := conn.Acquire(ctx, int64(n)); err != nil {
			return time.Since(start), err
		}
	}
	since := func() time.Duration {
		if start.IsZero() {
			return 0
		}
		return time.Since(start)
	}
	h.conn += n
	if h.reserve {
		return since(), nil // the reserve covers the whole frame
	}
	if b.shared.TryAcquire(int64(n)) {
		h.shared += n
		return since(), nil
	}
	if start.IsZero() {
		start = time.Now()
	}
	if err := b.reserve.Acquire(ctx, 1); err != nil {
		return time.Since(start), err
	}
	h.reserve = true
	return time.Since(start), nil
}

// give returns what h holds to conn and b, and clears h.
func (b *byteBudget) give(conn *semaphore.Weighted, h *hold) {
	if h.conn > 0 {
		conn.Release(int64(h.conn))
	}
	if h.shared > 0 {
		b.shared.Release(int64(h.shared))
	}
	if h.reserve {
		b.reserve.Release(1)
	}
	*h = hold{}
}
