package watch

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// interest is which nodes watch which series, as each node told (Hub.Interest), kept
// until its lease runs out. The write path reads a snapshot: no lock, and nothing but
// an atomic load while nothing is watched.
type interest struct {
	mu   sync.Mutex
	told map[string]told                     // by node address
	snap atomic.Pointer[map[string][]string] // key → node addresses; nil: nothing watched
}

// told is what one node watches, until when.
type told struct {
	keys    []string
	expires time.Time
}

func (in *interest) init() { in.told = map[string]told{} }

// watchers returns the nodes that watch key.
func (in *interest) watchers(key string) []string {
	m := in.snap.Load()
	if m == nil {
		return nil
	}
	return (*m)[key]
}

// set replaces what node from watches.
func (in *interest) set(from string, keys []string, expires time.Time) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(keys) == 0 {
		delete(in.told, from)
	} else {
		was, ok := in.told[from]
		in.told[from] = told{keys: keys, expires: expires}
		if ok && slices.Equal(was.keys, keys) {
			return // a renewal: the snapshot holds
		}
	}
	in.rebuild()
}

// expire forgets what was not renewed in time.
func (in *interest) expire(now time.Time) {
	in.mu.Lock()
	defer in.mu.Unlock()
	n := len(in.told)
	for a, t := range in.told {
		if now.After(t.expires) {
			delete(in.told, a)
		}
	}
	if len(in.told) != n {
		in.rebuild()
	}
}

// rebuild publishes a new snapshot; in.mu held.
func (in *interest) rebuild() {
	if len(in.told) == 0 {
		in.snap.Store(nil)
		return
	}
	m := map[string][]string{}
	for a, t := range in.told {
		for _, k := range t.keys {
			m[k] = append(m[k], a)
		}
	}
	in.snap.Store(&m)
}

// Interest takes what a node's subscribers watch (wire.MethodWatchInterest).
func (h *Hub) Interest(req *wire.WatchInterestReq) error {
	if len(req.Keys) > h.cfg.MaxSubscriptions*wire.MaxWatchSeries {
		return rpc.Errorf(wire.CodeBadInput, "interest in %d series: at most %d", len(req.Keys), h.cfg.MaxSubscriptions*wire.MaxWatchSeries)
	}
	ttl := time.Duration(min(max(req.TTLMillis, 0), int64(time.Hour/time.Millisecond))) * time.Millisecond
	h.interest.set(req.From, req.Keys, time.Now().Add(ttl))
	return nil
}

// pusher coalesces the telling of the others: a change bumps gen; a push sends what
// is watched at the time it starts and marks that generation sent.
type pusher struct {
	mu   sync.Mutex
	gen  atomic.Uint64
	sent uint64 // under mu
}

// changed notes that what this node watches changed.
func (p *pusher) changed() { p.gen.Add(1) }

// tellPeers tells every live node (this one included) every series this node's
// subscriptions watch, and returns once each answered or is unreachable: from then on
// a write of those series that any of them stores is forwarded here. A node that is
// down learns it at the next renewal after it is back.
func (h *Hub) tellPeers(ctx context.Context) error {
	want := h.push.gen.Add(1)
	h.push.mu.Lock()
	defer h.push.mu.Unlock()
	if h.push.sent >= want {
		return nil
	}
	gen := h.push.gen.Load()
	keys := h.watchedKeys()
	ttl := 5 * h.cfg.Renew
	h.interest.set(h.cfg.Self, keys, time.Now().Add(ttl))
	req := &wire.WatchInterestReq{From: h.cfg.Self, Keys: keys, TTLMillis: ttl.Milliseconds()}
	var wg sync.WaitGroup
	for _, a := range h.cfg.Peers() {
		if a == h.cfg.Self {
			continue
		}
		wg.Add(1)
		go func(a string) {
			defer wg.Done()
			if err := h.cfg.Call(ctx, a, wire.MethodWatchInterest, req, nil); err != nil && !errors.Is(err, rpc.ErrUnreachable) {
				h.cfg.Log.Warn("watch: could not tell a node what this node's subscribers watch", "node", a, "err", err)
			}
		}(a)
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return rpc.Errorf(wire.CodeUnavailable, "registering the subscription with the cluster: %v", err)
	}
	h.push.sent = gen
	return nil
}

// watchedKeys returns every key this node's subscriptions watch, sorted.
func (h *Hub) watchedKeys() []string {
	h.mu.Lock()
	keys := make([]string, 0, len(h.logs))
	for k := range h.logs {
		keys = append(keys, k)
	}
	h.mu.Unlock()
	sort.Strings(keys)
	return keys
}
