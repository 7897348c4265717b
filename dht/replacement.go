package dht

import (
	"context"
	"slices"
	"sync"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/peer"
)

// cplOf returns the bucket index of p in the local table: the length of the
// prefix its table key shares with the local node's.
func (r *Router) cplOf(p Peer) int {
	return kb.CommonPrefixLen(kb.ConvertPeerID(p.PeerID()), kb.ConvertPeerID(r.self.PeerID()))
}

// addReplacementLocked records p as the newest candidate of its bucket's
// replacement cache, keeping at most bucketSize. r.mu is held.
func (r *Router) addReplacementLocked(p Peer) {
	cpl := r.cplOf(p)
	rs := slices.DeleteFunc(r.replacements[cpl], func(q Peer) bool { return q.ID == p.ID })
	rs = append(rs, p)
	if len(rs) > r.bucketSize {
		rs = rs[len(rs)-r.bucketSize:]
	}
	r.replacements[cpl] = rs
}

// DropPeer removes a peer that failed a call from the routing table and, as
// Kademlia does, puts in its place the newest peer of its bucket's
// replacement cache (a peer heard from recently that the full bucket had
// turned away). The replacement is pinged at the next stale check if it is
// not heard from before.
func (r *Router) DropPeer(id string) {
	if r.rests.resting(id) {
		return // it stopped on purpose and keeps its place for its grace
	}
	r.mu.RLock()
	p, had := r.book[peer.ID(id)]
	r.mu.RUnlock()
	if !had {
		return
	}
	r.RemovePeer(id)
	for {
		r.mu.Lock()
		cpl := r.cplOf(p)
		rs := r.replacements[cpl]
		if len(rs) == 0 {
			r.mu.Unlock()
			return
		}
		next := rs[len(rs)-1]
		r.replacements[cpl] = rs[:len(rs)-1]
		r.mu.Unlock()
		if next.ID != id && r.AddPeer(next) {
			return
		}
	}
}

// markAlive offers p to the table and records that it just answered a
// request of this node: the table's entries not heard from for a while are
// the ones PingStale checks.
func (r *Router) markAlive(p Peer) {
	r.rests.wake(p.ID)
	if r.AddPeer(p) {
		r.table.UpdateLastSuccessfulOutboundQueryAt(p.PeerID(), time.Now())
	}
}

// PingStale pings, alpha at a time, every peer of the table that has not
// answered a request of this node for olderThan, and drops (DropPeer) those
// that fail. It returns how many it pinged and dropped.
func (r *Router) PingStale(ctx context.Context, olderThan time.Duration) (pinged, dropped int) {
	cutoff := time.Now().Add(-olderThan)
	var stale []Peer
	r.mu.RLock()
	for _, pi := range r.table.GetPeerInfos() {
		if pi.LastSuccessfulOutboundQueryAt.Before(cutoff) {
			if p, ok := r.book[pi.Id]; ok {
				stale = append(stale, p)
			}
		}
	}
	r.mu.RUnlock()
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		sem  = make(chan struct{}, r.alpha)
		gone []string
	)
	for _, p := range stale {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			// Another node answering at the address (p restarted under a new
			// identity) is as good as no answer from p.
			if q, err := r.Ping(ctx, p.RPCAddr); err != nil || q.ID != p.ID {
				mu.Lock()
				gone = append(gone, p.ID)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, id := range gone {
		r.DropPeer(id)
	}
	return len(stale), len(gone)
}

// tablePeers returns the peers of the routing table.
func (r *Router) tablePeers() []Peer {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Peer, 0, len(r.book))
	for _, p := range r.book {
		out = append(out, p)
	}
	return out
}
