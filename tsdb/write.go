package tsdb

import (
	"errors"
	"fmt"
	"sync"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/series"
)

// What Put and PutMany share once their shards are on the way: the tally of the
// replicas' answers, the hints for those that did not answer, and the words of a
// failure.

// shardTally counts, per shard of a write, the replicas that stored it, those that
// failed, and the first error of those.
type shardTally struct {
	spans     []shardSpan
	w         int
	acks      []int
	fails     []int
	errs      []error
	undecided int
}

// newShardTally returns the tally of spans at write quorum w: a shard with fewer live
// replicas than w is decided as failed from the start.
func newShardTally(spans []shardSpan, w int) *shardTally {
	t := &shardTally{spans: spans, w: w, acks: make([]int, len(spans)), fails: make([]int, len(spans)),
		errs: make([]error, len(spans)), undecided: len(spans)}
	for s := range spans {
		if len(spans[s].replicas) < w {
			t.fails[s] = w
			t.undecided--
			t.errs[s] = rpc.Errorf(CodeUnavailable, "only %d live nodes for write quorum %d", len(spans[s].replicas), w)
		}
	}
	return t
}

// decided reports whether shard s has reached its quorum or can no longer reach it.
func (t *shardTally) decided(s int) bool {
	return t.acks[s] >= t.w || t.fails[s] > len(t.spans[s].replicas)-t.w
}

// add counts one replica's answer (err) for the shards items.
func (t *shardTally) add(items []int, peer dht.Peer, err error) {
	for _, s := range items {
		if t.decided(s) {
			continue
		}
		if err == nil {
			t.acks[s]++
		} else {
			t.fails[s]++
			if t.errs[s] == nil {
				t.errs[s] = fmt.Errorf("replica %s: %w", peer.RPCAddr, err)
			}
		}
		if t.decided(s) {
			t.undecided--
		}
	}
}

// stored returns the points of the shards that reached quorum, of those in (nil:
// every shard).
func (t *shardTally) stored(in func(s int) bool) int {
	n := 0
	for s := range t.spans {
		if t.acks[s] >= t.w && (in == nil || in(s)) {
			n += t.spans[s].pts.Len()
		}
	}
	return n
}

// unstored returns the points of the shards that did not reach quorum, of those in
// (nil: every shard), in order.
func (t *shardTally) unstored(in func(s int) bool) series.Points {
	var parts []series.Points
	for s := range t.spans {
		if t.acks[s] < t.w && (in == nil || in(s)) {
			parts = append(parts, t.spans[s].pts)
		}
	}
	return series.Concat(parts...)
}

// firstErr returns the first error of the shards, of those in (nil: every shard), that
// did not reach quorum.
func (t *shardTally) firstErr(in func(s int) bool) error {
	for s := range t.spans {
		if t.acks[s] < t.w && (in == nil || in(s)) {
			if t.errs[s] != nil {
				return t.errs[s]
			}
			return rpc.Errorf(CodeUnavailable, "no answer in time")
		}
	}
	return nil
}

// hinter returns what records a hint for the given shards of spans (the series of
// shard s is key(s)), once per shard. A shard this node is a replica of needs none:
// its own copy is delivered by repair.
func (c *Coordinator) hinter(spans []shardSpan, key func(s int) string) func(shards []int) {
	var mu sync.Mutex
	hinted := make([]bool, len(spans))
	self := c.place.Self().ID
	return func(shards []int) {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range shards {
			if !hinted[s] && !cluster.IsReplica(spans[s].replicas, self) {
				hinted[s] = true
				c.hints.Record(spans[s].ref, key(s), spans[s].pts)
			}
		}
	}
}

// writeError words the failure of a write of one series that stored stored of total
// points at write quorum w, err the first replica's reason. A refusal of the points
// themselves keeps its code (sending them again will not help); anything else is
// CodeUnavailable (retrying is safe: writes are idempotent).
func writeError(key string, stored, total, w int, err error) error {
	code := CodeUnavailable
	var re *rpc.RemoteError
	if errors.As(err, &re) && (re.Code == CodeTypeMismatch || re.Code == CodeBadInput || re.Code == CodeExpired) {
		code = re.Code
	}
	return rpc.Errorf(code, "write of %q: stored %d of %d points; the rest did not reach write quorum %d: %v", key, stored, total, w, err)
}
