package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Selector selects the series of a subscription: exactly one of a series key, a key
// prefix or tags ("k=v", every one required).
type Selector struct {
	Series string
	Prefix string
	Match  []string
}

// Run is points of one series delivered together, in time order; Late says they are
// older than a point of the series delivered before them. Subscriptions of one
// client to the same series may be handed the same points (decoded once): read them,
// do not change them.
type Run = wire.WatchRun

// Subscription is a live subscription's state beside its channel.
type Subscription struct {
	done chan struct{}
	err  error
	node chan string // the node serving it, each time it changes (tests, logs)
}

// Err returns, once the channel is closed, why: the context's error, or what made
// every node refuse the subscription.
func (s *Subscription) Err() error {
	<-s.done
	return s.err
}

// Moved returns a channel that receives the address of the node that serves the
// subscription each time it opens there (the first node, then every move); sends
// never block: a change nobody reads is skipped.
func (s *Subscription) Moved() <-chan string { return s.node }

// watchPoll is how long one poll waits at the node for points.
const watchPoll = time.Second

// Subscribe delivers every point of the series sel selects with t ≥ from: first what
// the store holds, then each new point as writes store it, each once and in time
// order per series; a point older than one already delivered of its series comes
// flagged Late. The channel is closed when ctx ends or no node will serve the
// subscription (Subscription.Err says why).
//
// The subscription survives its node: when the node fails, or drops the subscription
// (a subscriber too slow for the node's buffer), Subscribe opens it again at another
// node of the cluster (learnt from the first node's status) from the last point
// received of each series, so that history fills the gap; the application sees
// nothing of it.
func (c *Client) Subscribe(ctx context.Context, sel Selector, from int64) (<-chan Run, *Subscription) {
	out := make(chan Run, 64)
	s := &Subscription{done: make(chan struct{}), node: make(chan string, 1)}
	go func() {
		defer close(s.done)
		defer close(out)
		s.err = c.subscribe(ctx, sel, from, out, s)
	}()
	return out, s
}

func (c *Client) subscribe(ctx context.Context, sel Selector, from int64, out chan<- Run, s *Subscription) error {
	req := &wire.WatchOpenReq{Series: sel.Series, Prefix: sel.Prefix, Match: sel.Match, From: from, After: map[string]int64{}}
	addrs := slices.Clone(c.addrs)
	var failing time.Time // when the nodes started failing; zero while one serves
	var errs []error      // why, since then
	pause := 50 * time.Millisecond
	for tried := 0; ; {
		addr := addrs[0]
		err := c.serveFrom(ctx, addr, req, out, s, func() {
			failing, errs, tried, pause = time.Time{}, nil, 0, 50*time.Millisecond
			addrs = c.learnAddrs(ctx, addr, addrs)
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var re *rpc.RemoteError
		if errors.As(err, &re) && re.Code == wire.CodeBadInput {
			return err
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
		if failing.IsZero() {
			failing = time.Now()
		} else if time.Since(failing) > c.timeout {
			return fmt.Errorf("no node of the cluster serves the subscription: %w", errors.Join(errs...))
		}
		// The next attempt goes to the next node: the one that failed goes last.
		addrs = append(slices.Clone(addrs[1:]), addr)
		if tried++; tried < len(addrs) {
			continue
		}
		tried = 0
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, time.Second)
	}
}

// serveFrom opens the subscription at addr and delivers its runs until it fails;
// opened is called once it is open. req.After keeps the last point delivered of each
// series, for the next node.
func (c *Client) serveFrom(ctx context.Context, addr string, req *wire.WatchOpenReq, out chan<- Run, s *Subscription, opened func()) error {
	p := c.pollerOf(addr)
	req.Session = p.session
	var open wire.WatchOpenResp
	octx, cancel := context.WithTimeout(ctx, c.timeout)
	err := rpc.Invoke(octx, c.rpc, addr, wire.MethodWatchOpen, req, &open)
	cancel()
	if err != nil {
		return err
	}
	opened()
	select {
	case s.node <- addr:
	default:
	}
	// The poller hands the runs to out itself, noting req.After; once removed it
	// hands none, and req.After is the next node's.
	ws := p.add(ctx, open.ID, out, req.After)
	defer p.remove(open.ID)
	select {
	case <-ctx.Done():
		go p.close(open.ID)
		return ctx.Err()
	case err := <-ws.fail:
		return err
	}
}

// poller polls, with one request in flight, every subscription this client holds at
// one node (a session: wire.WatchNextReq), and hands each its batches. It runs while
// it has subscriptions; the session stays the client's at that node.
type poller struct {
	c       *Client
	addr    string
	session uint64

	mu   sync.Mutex
	subs map[uint64]*watchSub
	// order is subs' ids in the order they were added: a poll names them in it, the
	// same poll after poll, so that the node finds each at its place in the last
	// poll (watch.Hub.polled) rather than looking every one up.
	order   []uint64
	running bool
	// gen counts the subscriptions added and removed: a poll token stands for the
	// cursors of a poll only while the subscriptions are those it named.
	gen uint64
}

// watchSub is one subscription's share of a poller: the poller hands its runs to out
// (no goroutine between: a thousand subscriptions of a client are a thousand channel
// sends a point, not two thousand) and notes in after the last point of each series
// handed.
type watchSub struct {
	seen uint64 // under poller.mu
	ctx  context.Context
	fail chan error    // why it ended at the node, or the node could not be polled
	gone chan struct{} // closed when the subscription leaves the poller
	// mu is held while runs are handed: leaving waits for it, so that after is
	// settled and out no longer written once remove returns.
	mu    sync.Mutex
	out   chan<- Run
	after map[string]int64
}

// pollerOf returns the client's poller of node addr.
func (c *Client) pollerOf(addr string) *poller {
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	if c.pollers == nil {
		c.pollers = map[string]*poller{}
	}
	p := c.pollers[addr]
	if p == nil {
		p = &poller{c: c, addr: addr, session: rand.Uint64() | 1, subs: map[uint64]*watchSub{}}
		c.pollers[addr] = p
	}
	return p
}

// add has the poller poll subscription id and hand its runs to out while ctx lasts,
// noting the last point of each series in after.
func (p *poller) add(ctx context.Context, id uint64, out chan<- Run, after map[string]int64) *watchSub {
	ws := &watchSub{ctx: ctx, fail: make(chan error, 1), gone: make(chan struct{}), out: out, after: after}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.subs[id] = ws
	p.order = append(p.order, id)
	p.gen++
	if !p.running {
		p.running = true
		go p.run()
	}
	return ws
}

// remove stops polling subscription id and returns once no run is being handed to
// it.
func (p *poller) remove(id uint64) {
	p.mu.Lock()
	ws := p.subs[id]
	if ws != nil {
		close(ws.gone)
		delete(p.subs, id)
		if i := slices.Index(p.order, id); i >= 0 {
			p.order = slices.Delete(p.order, i, i+1)
		}
		p.gen++
	}
	p.mu.Unlock()
	if ws != nil {
		ws.mu.Lock() // a hand in progress sees gone and stops
		ws.mu.Unlock()
	}
}

// poll sends one poll; it and its answer are encoded by hand (wire.EncodeWatchNextReq,
// wire.DecodeWatchNextResp).
func (p *poller) poll(req *wire.WatchNextReq) (*wire.WatchNextResp, error) {
	ctx, cancel := context.WithTimeout(context.Background(), watchPoll+min(p.c.timeout, 10*time.Second))
	defer cancel()
	body, err := wire.EncodeWatchNextReq(req)
	if err != nil {
		return nil, err
	}
	out, err := p.c.rpc.Call(ctx, p.addr, wire.MethodWatchNext, body)
	if err != nil {
		return nil, err
	}
	var resp wire.WatchNextResp
	if err := wire.DecodeWatchNextResp(out, &resp); err != nil {
		return nil, fmt.Errorf("answer of %s from %s: %v", wire.MethodWatchNext, p.addr, err)
	}
	return &resp, nil
}

// close tells the node that subscription id is done with, so that it need not wait
// for its lease to run out.
func (p *poller) close(id uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = rpc.Invoke(ctx, p.c.rpc, p.addr, wire.MethodWatchNext, &wire.WatchNextReq{Session: p.session, Cursors: []wire.WatchCursor{{ID: id}}, Close: true}, nil)
}

// run polls until no subscription is left, or the node fails (every subscription is
// told). A poll names the token of the answer before (wire.WatchNextReq.Token)
// instead of its cursors when the node gave one, every run of that answer was handed
// and the subscriptions are the same.
func (p *poller) run() {
	var token, tokenGen uint64
	for {
		p.mu.Lock()
		if len(p.subs) == 0 {
			p.running = false
			p.mu.Unlock()
			return
		}
		req := &wire.WatchNextReq{Session: p.session, WaitMillis: watchPoll.Milliseconds(), Groups: true, LingerMillis: p.c.linger.Milliseconds()}
		if token != 0 && tokenGen == p.gen {
			req.Token = token
		} else {
			req.Cursors = make([]wire.WatchCursor, len(p.order))
			for i, id := range p.order {
				req.Cursors[i] = wire.WatchCursor{ID: id, Seen: p.subs[id].seen}
			}
		}
		gen := p.gen
		p.mu.Unlock()
		resp, err := p.poll(req)
		if err != nil {
			p.mu.Lock()
			for id, ws := range p.subs {
				ws.ended(fmt.Errorf("polling node %s: %w", p.addr, err))
				close(ws.gone)
				delete(p.subs, id)
			}
			p.order = nil
			p.running = false
			p.mu.Unlock()
			return
		}
		for _, b := range resp.Subs {
			p.hand(b, false)
		}
		whole := len(resp.Subs) == 0
		for _, g := range resp.Groups {
			for _, id := range g.IDs {
				whole = p.hand(wire.WatchBatch{ID: id, Runs: g.Runs}, true) && whole
			}
		}
		token, tokenGen = 0, 0
		if whole && resp.Token != 0 {
			token, tokenGen = resp.Token, gen
		}
	}
}

// hand hands a subscription its batch b; of a group's runs (grouped), b.Seen is the
// subscription's seen plus their count. It reports whether the subscription took
// every run.
func (p *poller) hand(b wire.WatchBatch, grouped bool) bool {
	p.mu.Lock()
	ws := p.subs[b.ID] // one added since the poll went is in the session too
	if ws != nil && grouped {
		b.Seen = ws.seen + uint64(len(b.Runs))
	}
	p.mu.Unlock()
	if ws == nil {
		return false
	}
	if b.Ended != "" {
		ws.ended(errors.New(b.Ended))
		return false
	}
	if !ws.hand(b.Runs) {
		return false
	}
	p.mu.Lock()
	ws.seen = b.Seen
	p.mu.Unlock()
	return true
}

// ended tells the subscription's serveFrom why it ended, unless it was told already.
func (ws *watchSub) ended(err error) {
	select {
	case ws.fail <- err:
	default:
	}
}

// hand hands runs to the subscriber, in order, and reports whether it took them all:
// not when the subscription left the poller or its context ended.
func (ws *watchSub) hand(runs []Run) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	select {
	case <-ws.gone:
		return false
	default:
	}
	for _, r := range runs {
		select {
		case ws.out <- r:
		default: // the subscriber is behind: wait for it
			select {
			case ws.out <- r:
			case <-ws.gone:
				return false
			case <-ws.ctx.Done():
				return false
			}
		}
		if n := r.Points.Len(); n > 0 && !r.Late {
			if last, ok := ws.after[r.Key]; !ok || r.Points.T[n-1] > last {
				ws.after[r.Key] = r.Points.T[n-1]
			}
		}
	}
	return true
}

// learnAddrs returns addrs with the live members addr knows of added, so that the
// subscription can move to any of them.
func (c *Client) learnAddrs(ctx context.Context, addr string, addrs []string) []string {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var st wire.StatusResp
	if err := rpc.Invoke(ctx, c.rpc, addr, wire.MethodStatus, &struct{}{}, &st); err != nil {
		return addrs
	}
	out := []string{addr}
	for _, n := range st.Nodes {
		if n.RPCAddr != "" && n.Error == "" && !slices.Contains(out, n.RPCAddr) {
			out = append(out, n.RPCAddr)
		}
	}
	for _, a := range addrs {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}
