package dht

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
)

// maxLookupRounds bounds the rounds of one lookup. A lookup over n nodes
// takes about log2(n)/log2(alpha) rounds to converge and a few more to query
// the k closest; a lookup still going after this many is chasing peers that
// keep appearing (a network in churn) and returns what it has.
const maxLookupRounds = 32

// LookupStats tells how a lookup went.
type LookupStats struct {
	Hops     int // rounds of parallel FIND_NODE requests
	Messages int // FIND_NODE requests sent
	Failures int // requests that failed: the peer was dropped from the result
}

// candidate is a peer a lookup has heard of.
type candidate struct {
	Peer
	state candidateState
}

type candidateState uint8

const (
	unqueried candidateState = iota
	replied
	failed
)

// Lookup is Kademlia's iterative FIND_NODE: it returns the k live nodes
// closest to target that it found, closest first, the local node included.
// See LookupWithStats.
func (r *Router) Lookup(ctx context.Context, target quanta.ID, k int) ([]Peer, error) {
	ps, _, err := r.LookupWithStats(ctx, target, k)
	return ps, err
}

// LookupWithStats is Lookup, and tells how many rounds and messages it took.
//
// It starts from the k peers of the local table closest to target. Each
// round asks the alpha closest peers not yet asked, among the k closest
// known, in parallel, each call bounded by the query timeout, and merges what
// they answer. As in the Kademlia paper, a round that brings no peer closer
// than the closest already known is followed by one that asks all k closest
// not yet asked. The lookup ends when the k closest known peers have all
// answered. A peer that fails is dropped from the result and, when it could
// not be reached, from the routing table; every peer that answers is offered
// to it. If ctx ends first, the peers that answered so far are returned with
// ctx's error.
func (r *Router) LookupWithStats(ctx context.Context, target quanta.ID, k int) ([]Peer, LookupStats, error) {
	return r.lookup(ctx, target, k, nil)
}

// Hop is one FIND_NODE request of a lookup, for LookupTrace.
type Hop struct {
	Round    int       // the round it was sent in, from 1
	Peer     Peer      // the peer asked
	Distance quanta.ID // its XOR distance to the target
	Returned int       // how many peers it answered with
	Err      string    // why it failed, or ""
}

// LookupTrace is LookupWithStats, and lists every request the lookup sent,
// in the order of their rounds.
func (r *Router) LookupTrace(ctx context.Context, target quanta.ID, k int) ([]Peer, LookupStats, []Hop, error) {
	var trace []Hop
	ps, st, err := r.lookup(ctx, target, k, &trace)
	return ps, st, trace, err
}

// lookup is LookupWithStats, appending every request to *trace if trace is
// not nil.
func (r *Router) lookup(ctx context.Context, target quanta.ID, k int, trace *[]Hop) ([]Peer, LookupStats, error) {
	var stats LookupStats
	if k < 1 || k > maxFindK {
		return nil, stats, fmt.Errorf("dht: lookup of %d peers, want 1..%d", k, maxFindK)
	}
	l := lookup{target: target, k: k, seen: make(map[string]bool)}
	l.add(r.self, replied) // the local node answers itself, from its table
	for _, p := range r.NearestPeers(target, k) {
		l.add(p, unqueried)
	}

	width := r.alpha
	for stats.Hops < maxLookupRounds {
		batch := l.next(width)
		if len(batch) == 0 {
			break
		}
		if err := ctx.Err(); err != nil {
			return l.result(), stats, err
		}
		stats.Hops++
		stats.Messages += len(batch)
		closest := l.best()

		answers := r.queryAll(ctx, batch, target, k)
		for i, a := range answers {
			c := batch[i]
			if a.err != nil {
				stats.Failures++
				// A peer resting within its grace (it stopped on purpose and
				// will be back) stays among the closest: it still owns its
				// shards, and writes for it leave hints.
				if r.rests.resting(c.ID) {
					c.state = replied
				} else {
					c.state = failed
					if errors.Is(a.err, rpc.ErrUnreachable) {
						r.DropPeer(c.ID)
					}
				}
				if trace != nil {
					*trace = append(*trace, Hop{Round: stats.Hops, Peer: c.Peer, Distance: Distance(target, c.Key), Err: a.err.Error()})
				}
				continue
			}
			if r.gone.has(c.ID) {
				// It said it leaves (in this answer or since): it owns nothing,
				// but what it knows of the others still helps.
				c.state = failed
				for _, p := range a.peers {
					l.add(p, unqueried)
				}
				continue
			}
			c.state = replied
			r.markAlive(c.Peer)
			if trace != nil {
				*trace = append(*trace, Hop{Round: stats.Hops, Peer: c.Peer, Distance: Distance(target, c.Key), Returned: len(a.peers)})
			}
			for _, p := range a.peers {
				l.add(p, unqueried)
			}
		}
		l.sort()

		// Kademlia: no progress towards the target means the alpha closest
		// are not enough; ask every one of the k closest not yet asked.
		width = r.alpha
		if !Closer(target, l.best(), closest) {
			width = k
		}
	}
	return l.result(), stats, nil
}

// answer is one peer's reply to FIND_NODE.
type answer struct {
	peers []Peer
	err   error
}

// queryAll sends FIND_NODE to every peer of batch in parallel and returns
// their answers in the same order.
func (r *Router) queryAll(ctx context.Context, batch []*candidate, target quanta.ID, k int) []answer {
	answers := make([]answer, len(batch))
	req := &findNodeRequest{Target: target[:], K: k, From: r.selfWire()}
	var wg sync.WaitGroup
	for i, c := range batch {
		wg.Go(func() {
			answers[i].peers, answers[i].err = r.findNode(ctx, c.RPCAddr, req)
		})
	}
	wg.Wait()
	return answers
}

// findNode sends one FIND_NODE request, bounded by the query timeout.
func (r *Router) findNode(ctx context.Context, addr string, req *findNodeRequest) ([]Peer, error) {
	ctx, cancel := context.WithTimeout(ctx, r.queryTimeout)
	defer cancel()
	var resp findNodeResponse
	if err := rpc.Invoke(ctx, r.cli, addr, MethodFindNode, req, &resp); err != nil {
		return nil, err
	}
	if len(resp.Peers) > req.K {
		return nil, fmt.Errorf("find_node: %d peers in the answer, asked for %d", len(resp.Peers), req.K)
	}
	peers := make([]Peer, 0, len(resp.Peers))
	for _, w := range resp.Peers {
		p, err := fromWire(w)
		if err != nil {
			return nil, fmt.Errorf("find_node: %w", err)
		}
		if p.ID == r.self.ID {
			peers = append(peers, p)
			continue
		}
		// Only a node speaking of itself says it leaves (depart.go); the
		// responder's own entry saying nothing of the kind means it is back.
		if w.Leaving {
			r.markGone(p.ID)
			continue // it hands its data off: it owns nothing
		}
		if w.Addr == addr {
			r.gone.forget(p.ID)
		}
		if w.Rest > 0 {
			r.rests.rest(p.ID, min(time.Duration(w.Rest)*time.Millisecond, maxRestLeft), true)
		}
		peers = append(peers, p)
	}
	return peers, nil
}

// lookup is the state of one iterative lookup: every peer heard of that has
// not failed, closest to target first.
type lookup struct {
	target quanta.ID
	k      int
	cands  []*candidate
	seen   map[string]bool // IDs ever added, failed ones included
}

// add records a peer heard of, unless it was heard of before. Call sort
// after adding.
func (l *lookup) add(p Peer, s candidateState) {
	if l.seen[p.ID] {
		return
	}
	l.seen[p.ID] = true
	l.cands = append(l.cands, &candidate{Peer: p, state: s})
}

// sort orders the candidates by distance and forgets the failed ones.
func (l *lookup) sort() {
	l.cands = slices.DeleteFunc(l.cands, func(c *candidate) bool { return c.state == failed })
	slices.SortFunc(l.cands, func(a, b *candidate) int { return compareDistance(l.target, a.Key, b.Key) })
}

// next returns up to width candidates not yet asked among the k closest,
// closest first. None means the k closest have all answered.
func (l *lookup) next(width int) []*candidate {
	l.sort()
	var batch []*candidate
	for _, c := range l.cands[:min(l.k, len(l.cands))] {
		if c.state == unqueried && len(batch) < width {
			batch = append(batch, c)
		}
	}
	return batch
}

// best returns the Key of the closest candidate.
func (l *lookup) best() quanta.ID { return l.cands[0].Key }

// result returns the k closest candidates that answered, closest first.
func (l *lookup) result() []Peer {
	out := make([]Peer, 0, l.k)
	for _, c := range l.cands {
		if c.state == replied && len(out) < l.k {
			out = append(out, c.Peer)
		}
	}
	return out
}

// randomIDWithCPL returns a random ID that shares exactly cpl leading bits
// with key: an ID in the range of key's bucket number cpl.
func randomIDWithCPL(key quanta.ID, cpl int) quanta.ID {
	var id quanta.ID
	for i := range id {
		id[i] = byte(rand.Uint32())
	}
	for bit := 0; bit <= cpl; bit++ {
		byteIdx, mask := bit/8, byte(0x80)>>(bit%8)
		want := key[byteIdx] & mask
		if bit == cpl {
			want ^= mask // the first bit that differs
		}
		id[byteIdx] = id[byteIdx]&^mask | want
	}
	return id
}
