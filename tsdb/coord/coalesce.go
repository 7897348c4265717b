package coord

import (
	"context"
	"fmt"
	"sync"
)

// Coalesced catalog calls.
//
// A write that creates series readies each on its own goroutine (prepareMany), and each
// new series merges its members into the same few posting lists (its prefix's and one
// of the all-series buckets) and its entry at the same registry replicas. Sent one by
// one, that is a request, a store commit and, with --sync always, a disk sync per tag
// per series, each waiting for the catalog's lock behind the others: a third of a
// node's CPU during a bulk load of new series, and most of a batch's latency.
//
// A coalescer sends a lone call at once; calls for the same target that arrive while
// one is under way wait, and go together as the next call when it returns (at most max
// items and maxBytes of them, as size counts, each: a request and its answer must fit an
// RPC frame; an item alone always goes). Each caller gets its own item's answer, or the
// call's error: a call fails whole, as the replica method it makes does (the store
// merges a request's items in one commit), so callers send alone what a replica would
// refuse for one item's sake (catalog.ValidateMember, Entry.Validate).
type coalescer[K comparable, In, Out any] struct {
	max, maxBytes int
	size          func(In) int
	call          func(ctx context.Context, key K, ins []In) ([]Out, error)

	mu   sync.Mutex
	busy map[K]*coalesceQueue[In, Out] // targets with a call under way
}

type coalesceQueue[In, Out any] struct {
	waiting []*coalesceBatch[In, Out] // to go in order, each within max and maxBytes
}

// coalesceBatch is one call's items and, once done is closed, its answers.
type coalesceBatch[In, Out any] struct {
	ins   []In
	bytes int // of ins, as size counts
	outs  []Out
	err   error
	done  chan struct{}
}

func newCoalescer[K comparable, In, Out any](max, maxBytes int, size func(In) int, call func(ctx context.Context, key K, ins []In) ([]Out, error)) *coalescer[K, In, Out] {
	return &coalescer[K, In, Out]{max: max, maxBytes: maxBytes, size: size, call: call, busy: map[K]*coalesceQueue[In, Out]{}}
}

// do sends in to key, alone or with the calls that queued behind the one under way,
// and returns its answer. A caller whose ctx ends stops waiting; its item still goes
// (the calls coalesced are merges, which repeat harmlessly).
func (c *coalescer[K, In, Out]) do(ctx context.Context, key K, in In) (Out, error) {
	outs, errs := c.doMany(ctx, key, []In{in})
	return outs[0], errs[0]
}

// doMany sends all of ins to key as do sends one: in as few calls as max and maxBytes
// allow (the first at once when key is idle, on this goroutine; the rest queued, with
// other callers' items), and returns each item's answer or its call's error. A write
// that readies a thousand series sends their entries in one or two calls, not in
// rounds of however many goroutines ready them at once.
func (c *coalescer[K, In, Out]) doMany(ctx context.Context, key K, ins []In) ([]Out, []error) {
	type slot struct {
		b *coalesceBatch[In, Out]
		i int
	}
	if len(ins) == 0 {
		return nil, nil
	}
	slots := make([]slot, len(ins))
	fits := func(b *coalesceBatch[In, Out], size int) bool {
		return len(b.ins) < c.max && (len(b.ins) == 0 || b.bytes+size <= c.maxBytes)
	}
	c.mu.Lock()
	q, busy := c.busy[key]
	var first *coalesceBatch[In, Out] // sent now by this caller: key was idle
	if !busy {
		q = &coalesceQueue[In, Out]{}
		c.busy[key] = q
		first = &coalesceBatch[In, Out]{done: make(chan struct{})}
	}
	for j, in := range ins {
		size := c.size(in)
		var b *coalesceBatch[In, Out]
		switch n := len(q.waiting); {
		case first != nil && n == 0 && fits(first, size):
			b = first
		case n > 0 && fits(q.waiting[n-1], size):
			b = q.waiting[n-1]
		default:
			b = &coalesceBatch[In, Out]{done: make(chan struct{})}
			q.waiting = append(q.waiting, b)
		}
		slots[j] = slot{b, len(b.ins)}
		b.ins = append(b.ins, in)
		b.bytes += size
	}
	c.mu.Unlock()
	if first != nil {
		c.run(ctx, key, q, first)
	}
	outs := make([]Out, len(ins))
	errs := make([]error, len(ins))
	for j, s := range slots {
		select {
		case <-s.b.done:
			outs[j], errs[j] = s.b.answer(s.i)
		case <-ctx.Done():
			errs[j] = ctx.Err()
		}
	}
	return outs, errs
}

// run makes b's call, answers its callers and starts the next batch of key, if any,
// on a goroutine of its own; the last one frees the target. Later batches run under
// ctx without its cancellation: their callers did not start them (each call is bounded
// by the replica call timeout).
func (c *coalescer[K, In, Out]) run(ctx context.Context, key K, q *coalesceQueue[In, Out], b *coalesceBatch[In, Out]) {
	b.outs, b.err = c.call(ctx, key, b.ins)
	if b.err == nil && len(b.outs) != len(b.ins) {
		b.err = fmt.Errorf("coalesced call: %d answers to %d items", len(b.outs), len(b.ins))
	}
	close(b.done)
	c.mu.Lock()
	if len(q.waiting) == 0 {
		delete(c.busy, key)
		c.mu.Unlock()
		return
	}
	next := q.waiting[0]
	q.waiting = q.waiting[1:]
	c.mu.Unlock()
	go c.run(context.WithoutCancel(ctx), key, q, next)
}

func (b *coalesceBatch[In, Out]) answer(i int) (Out, error) {
	if b.err != nil {
		var zero Out
		return zero, b.err
	}
	return b.outs[i], nil
}
