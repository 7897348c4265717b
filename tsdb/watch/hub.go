package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Source is what a subscription reads of the cluster: a series' history and the
// series a prefix or tag match selects.
type Source interface {
	// History returns the points of key with from ≤ t < to; a series never written
	// has none.
	History(ctx context.Context, key string, from, to int64) (series.Points, error)
	// Bounds bounds the points of key with from ≤ t < to: every one has first ≤ t ≤
	// last (last exact, first possibly earlier); found is false when there is none.
	Bounds(ctx context.Context, key string, from, to int64) (first, last int64, found bool, err error)
	// HistoryMany returns, for each of rs, in order, the points History would of its
	// series and range, reading many series together (one request per node, not a
	// Bounds and a History per series). A series it could not read has its Err set,
	// and so may one with more than maxPoints points: the caller reads those alone.
	HistoryMany(ctx context.Context, rs []Range, maxPoints int) ([]RangeResult, error)
	// Select returns the keys of the series q selects but those known says are known
	// (known nil: all of them). A known key costs it no entry read: a selection looked
	// at again costs what it gained.
	Select(ctx context.Context, q catalog.Query, known func(key string) bool) ([]string, error)
}

// Range is a series and a range [From, To) of its points, in ns.
type Range struct {
	Key      string
	From, To int64
}

// RangeResult is what Source.HistoryMany read of one Range: its points in time
// order, or why it could not read them.
type RangeResult struct {
	Points series.Points
	Err    error
}

// Caller sends one request to a node (rpc.Invoke with the node's client).
type Caller func(ctx context.Context, addr, method string, req, resp any) error

// Defaults of Config.
const (
	// DefaultBuffer is the points one subscription buffers for its subscriber.
	DefaultBuffer = 8192
	// DefaultMaxSubscriptions bounds the subscriptions one node holds.
	DefaultMaxSubscriptions = 2000
	// DefaultRenew is how often a node tells the others what its subscribers watch.
	DefaultRenew = 2 * time.Second
	// reselectEvery is how many renewals pass between two re-selections of the
	// series of prefix and tag subscriptions (a catalog listing each).
	reselectEvery = 5
	// DefaultLease is how long a subscription lives without a poll.
	DefaultLease = 30 * time.Second
	// senderQueue bounds the runs queued for one interested node.
	senderQueue = 4096
)

// Config configures a Hub.
type Config struct {
	Self      string          // this node's RPC address, as its peers know it
	Peers     func() []string // RPC addresses of the live nodes, this one included
	Source    Source
	Call      Caller
	MaxFuture time.Duration // how far ahead of now a write may be stamped
	// Buffer is the points a subscription holds for its subscriber before it is
	// ended with wire.CodeWatchResume; 0 means DefaultBuffer.
	Buffer int
	// MaxSubscriptions bounds the subscriptions of this node; 0 means
	// DefaultMaxSubscriptions.
	MaxSubscriptions int
	// Renew and Lease: 0 means DefaultRenew and DefaultLease.
	Renew, Lease time.Duration
	Log          *slog.Logger
}

// Hub is one node's part in subscriptions: its subscribers', and its coordinator's
// forwarding of stored points to the nodes that watch them.
type Hub struct {
	cfg   Config
	epoch uint64

	interest interest // who watches what, as the nodes told (interest.go)
	senders  senders  // forwarding to them (notify.go)

	mu       sync.Mutex
	subs     map[uint64]*sub
	sessions map[uint64]*session // the subscriptions polled together
	logs     map[string]*liveLog // each watched key's live log, with its subscriptions
	nextID   uint64
	polls    uint64              // polls answered (Hub.polled)
	seqs     map[string]seqState // the last notification from each coordinator

	push pusher // telling the others (interest.go)

	started atomic.Bool
	stop    chan struct{}
	done    chan struct{}
}

// seqState is the last notification a coordinator sent here.
type seqState struct{ epoch, seq uint64 }

// New returns a hub; Start runs its upkeep.
func New(cfg Config) *Hub {
	if cfg.Buffer <= 0 {
		cfg.Buffer = DefaultBuffer
	}
	if cfg.MaxSubscriptions <= 0 {
		cfg.MaxSubscriptions = DefaultMaxSubscriptions
	}
	if cfg.Renew <= 0 {
		cfg.Renew = DefaultRenew
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	h := &Hub{cfg: cfg, epoch: rand.Uint64(), subs: map[uint64]*sub{}, sessions: map[uint64]*session{}, logs: map[string]*liveLog{},
		seqs: map[string]seqState{}, stop: make(chan struct{}), done: make(chan struct{})}
	h.interest.init()
	h.senders.init(h)
	return h
}

// Start runs the hub's upkeep: renewing what this node watches at the others,
// re-selecting the series of prefix and tag subscriptions, ending subscriptions whose
// lease ran out, forgetting interest not renewed.
func (h *Hub) Start() {
	if h.started.Swap(true) {
		return
	}
	go func() {
		defer close(h.done)
		t := time.NewTicker(h.cfg.Renew)
		defer t.Stop()
		for tick := 1; ; tick++ {
			select {
			case <-h.stop:
				return
			case <-t.C:
			}
			h.expire()
			if tick%reselectEvery == 0 {
				h.reselect()
			}
			ctx, cancel := context.WithTimeout(context.Background(), h.cfg.Renew)
			h.tellPeers(ctx)
			cancel()
			h.interest.expire(time.Now())
		}
	}()
}

// Close stops the upkeep and the senders and ends every subscription.
func (h *Hub) Close() {
	select {
	case <-h.stop:
		return
	default:
	}
	close(h.stop)
	if h.started.Load() {
		<-h.done
	}
	h.senders.close()
	h.mu.Lock()
	for _, s := range h.subs {
		s.end(errors.New("the node is stopping"))
	}
	h.mu.Unlock()
}

// Stored is told a write the coordinator stored (every point of key reached its write
// quorum): it queues the points for the nodes watching key, this one included, and
// returns: no subscriber's work runs on the write's path (senders deliver them). A
// write of a series nobody watches costs one atomic load, or one map lookup when
// anything is watched.
func (h *Hub) Stored(key string, pts series.Points) {
	addrs := h.interest.watchers(key)
	if len(addrs) == 0 {
		return
	}
	pts = series.Concat(pts) // the writer may reuse its buffers once acknowledged
	for _, a := range addrs {
		h.senders.enqueue(a, wire.WatchRun{Key: key, Points: pts})
	}
}

// Notify takes a notification from a coordinator (wire.MethodWatchNotify). A gap in
// its numbering means points meant for this node's subscribers were lost: every
// subscription is ended with wire.CodeWatchResume, so that its subscriber catches up
// from the store.
func (h *Hub) Notify(req *wire.WatchNotifyReq) {
	h.mu.Lock()
	last, ok := h.seqs[req.From]
	h.seqs[req.From] = seqState{req.Epoch, req.Seq}
	var lost []*sub
	if ok && last.epoch == req.Epoch && req.Seq != last.seq+1 {
		for _, s := range h.subs {
			lost = append(lost, s)
		}
	}
	h.mu.Unlock()
	for _, s := range lost {
		s.end(fmt.Errorf("node %s lost %d notifications from coordinator %s", h.cfg.Self, req.Seq-last.seq-1, req.From))
	}
	// Every run first, then one wake-up per session: its poll answers them together.
	woken := map[*session]bool{}
	var subs, cut []*sub
	for _, r := range req.Runs {
		subs, cut = h.deliver(r.Key, r.Points, subs[:0], cut[:0], woken)
	}
	for ses := range woken {
		ses.signal()
	}
}

// deliver appends live points of key to its log, hands them to the subscriptions
// that take them themselves and notes the sessions watching key in woken, for the
// caller to wake; subs and cut are scratch space, returned for reuse.
func (h *Hub) deliver(key string, pts series.Points, subs, cut []*sub, woken map[*session]bool) ([]*sub, []*sub) {
	if pts.Len() == 0 {
		return subs, cut
	}
	h.mu.Lock()
	lg := h.logs[key]
	h.mu.Unlock()
	if lg == nil {
		return subs, cut
	}
	lg.mu.Lock()
	subs, cut = lg.append(key, pts, h.cfg.Buffer, subs, cut)
	for ses := range lg.sessions {
		woken[ses] = true
	}
	lg.mu.Unlock()
	for _, s := range cut {
		s.mu.Lock()
		s.endLocked(fellBehind(s.one.behind, h.cfg.Buffer))
		s.mu.Unlock()
	}
	for _, s := range subs {
		s.live(key, pts)
	}
	return subs, cut
}

// Open opens a subscription (wire.MethodWatchOpen): it selects its series, registers
// them with every live node and only then starts reading their history, so that no
// point falls between history and live.
func (h *Hub) Open(ctx context.Context, req *wire.WatchOpenReq) (uint64, error) {
	q, single, err := checkOpen(req)
	if err != nil {
		return 0, rpc.Errorf(wire.CodeBadInput, "%v", err)
	}
	keys := []string{single}
	if single == "" {
		if keys, err = h.cfg.Source.Select(ctx, q, nil); err != nil {
			return 0, err
		}
	}
	if len(keys) > wire.MaxWatchSeries {
		return 0, rpc.Errorf(wire.CodeBadInput, "the selection names %d series; a subscription watches at most %d: narrow --prefix or --match",
			len(keys), wire.MaxWatchSeries)
	}
	h.mu.Lock()
	if len(h.subs) >= h.cfg.MaxSubscriptions {
		h.mu.Unlock()
		return 0, rpc.Errorf(wire.CodeUnavailable, "node %s holds %d subscriptions, its limit: subscribe at another node", h.cfg.Self, len(h.subs))
	}
	ses := h.sessions[req.Session]
	if ses == nil {
		ses = &session{wake: make(chan struct{}, 1), subs: map[uint64]*sub{}}
		h.sessions[req.Session] = ses
	}
	h.nextID++
	s := newSub(h, h.nextID, req, q, single == "", ses)
	h.subs[s.id] = s
	ses.subs[s.id] = s
	ses.gen.Add(1)
	added := s.addKeys(keys)
	h.mu.Unlock()
	if err := h.tellPeers(ctx); err != nil {
		h.drop(s)
		return 0, err
	}
	s.readHistory(added)
	return s.id, nil
}

// checkOpen validates a WatchOpenReq and returns its selection: a catalog query, or
// the one series named.
func checkOpen(req *wire.WatchOpenReq) (catalog.Query, string, error) {
	n := 0
	if req.Series != "" {
		n++
	}
	if req.Prefix != "" {
		n++
	}
	if len(req.Match) > 0 {
		n++
	}
	if n != 1 {
		return catalog.Query{}, "", errors.New("a subscription selects by exactly one of a series key, a prefix or tags (k=v)")
	}
	if len(req.After) > wire.MaxWatchSeries {
		return catalog.Query{}, "", fmt.Errorf("resume positions of %d series; at most %d", len(req.After), wire.MaxWatchSeries)
	}
	if req.Series != "" {
		if err := series.ValidateKey(req.Series); err != nil {
			return catalog.Query{}, "", err
		}
		return catalog.Query{}, req.Series, nil
	}
	tags, err := catalog.ParseTags(req.Match...)
	if err != nil {
		return catalog.Query{}, "", err
	}
	return catalog.Query{Prefix: req.Prefix, Match: tags}, "", nil
}

// session is the subscriptions one client polls together: one poll in flight serves
// them all, woken by any of them.
type session struct {
	wake chan struct{} // a subscription of the session has runs, or ended
	subs map[uint64]*sub
	// last is the subscriptions of the session's last poll, in its cursors' order
	// (guarded by h.mu): a client names the same subscriptions in the same order
	// poll after poll, so Hub.polled finds each by its place, not in h.subs.
	last []*sub
	// gen counts the changes of its subscriptions (one opened, forgotten or ended),
	// plan what its last poll found (plan.go): a poll plan holds while gen is the
	// same.
	gen  atomic.Uint64
	plan atomic.Pointer[pollPlan]
	// timer is the timer its polls wait with, while none holds it.
	timer atomic.Pointer[time.Timer]
	// tok is the token of its last answer stepped from its plan, which its next poll
	// may name instead of its cursors; tokens numbers them (plan.go).
	tok    atomic.Pointer[pollToken]
	tokens atomic.Uint64
	// answered is when its last answer that carried anything went (monotonic ns,
	// sinceStart; 0: none yet): a poll that lingers (wire.WatchNextReq.LingerMillis)
	// is answered no sooner than its linger after it.
	answered atomic.Int64
}

// start is what sinceStart counts from.
var start = time.Now()

// sinceStart is the monotonic time since start, never 0.
func sinceStart() int64 { return int64(time.Since(start)) | 1 }

// lingerLeft is how long a poll of the session that lingers for linger waits before
// it looks for runs: the rest of linger since the session's last answer, none after
// a quiet spell of linger or more, at most wait.
func (ses *session) lingerLeft(linger, wait time.Duration) time.Duration {
	if ses == nil || linger <= 0 {
		return 0
	}
	a := ses.answered.Load()
	if a == 0 {
		return 0
	}
	return min(max(time.Duration(a+int64(linger)-sinceStart()), 0), wait)
}

func (ses *session) signal() {
	select {
	case ses.wake <- struct{}{}:
	default:
	}
}

// Next answers a poll of a session (wire.MethodWatchNext): the next runs of its
// subscriptions that have some, waiting up to req.WaitMillis (and within ctx's
// deadline) for any; a subscription that ended says why, once, and is forgotten.
func (h *Hub) Next(ctx context.Context, req *wire.WatchNextReq) (*wire.WatchNextResp, error) {
	if len(req.Cursors) > h.cfg.MaxSubscriptions {
		return nil, rpc.Errorf(wire.CodeBadInput, "a poll of %d subscriptions: a node holds at most %d", len(req.Cursors), h.cfg.MaxSubscriptions)
	}
	h.mu.Lock()
	ses := h.sessions[req.Session]
	h.mu.Unlock()
	if req.Close {
		h.mu.Lock()
		for _, c := range req.Cursors {
			if s := h.subs[c.ID]; s != nil && s.ses == ses {
				h.forget(s)
			}
		}
		h.mu.Unlock()
		return &wire.WatchNextResp{}, nil
	}
	var tok *pollToken // the cursors the poll's token stands for
	if req.Token != 0 {
		if ses != nil && req.Groups {
			tok = ses.token(req.Token)
		}
		if tok == nil {
			return nil, rpc.Errorf(wire.CodeBadInput, "poll token %d of session %d is not node %s's last answer's: poll with the cursors",
				req.Token, req.Session, h.cfg.Self)
		}
	}
	var wake chan struct{} // nil: nothing can wake this poll
	if ses != nil {
		wake = ses.wake
	}
	wait := time.Duration(min(max(req.WaitMillis, 0), wire.MaxWatchWaitMillis)) * time.Millisecond
	// The poll waits within ctx's deadline, for the hub's stop, not on ctx.Done: a
	// channel of an rpc request's context costs a timer and a child context, made
	// for each poll.
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d))
	}
	var deadline *time.Timer      // made when the poll first waits: the session's, reused
	resp := &wire.WatchNextResp{} // a pass that answers nothing leaves it empty
	defer func() {
		if deadline != nil {
			deadline.Stop()
			if ses != nil {
				ses.timer.Store(deadline)
			}
		}
		if len(resp.Subs)+len(resp.Groups) > 0 {
			if ses != nil {
				ses.answered.Store(sinceStart())
			}
		} else if tok != nil && resp.Token == 0 && ses.tok.Load() == tok {
			resp.Token = tok.n // nothing answered: the cursors are still the token's
		}
	}()
	// A poll that lingers waits out the rest of its linger since the session's last
	// answer before it looks: the runs written meanwhile go together in its answer.
	// Runs that come after a quiet spell are answered at once.
	linger := time.Duration(min(max(req.LingerMillis, 0), wire.MaxWatchLingerMillis)) * time.Millisecond
	if d := ses.lingerLeft(linger, wait); d > 0 {
		deadline = ses.waitTimer(d)
		select {
		case <-h.stop:
			return resp, nil
		case <-deadline.C:
		}
		wait -= d
		deadline.Reset(wait)
	}
	for {
		budget := wire.MaxWatchAnswerPoints
		if ses != nil && req.Groups && ses.stepPlanned(req.Cursors, tok, resp, &budget) {
			if len(resp.Groups) > 0 {
				return resp, nil
			}
		} else if tok != nil {
			// The plan no longer holds: the poll is stepped from the cursors the token
			// stands for, as if it had named them.
			req.Cursors, req.Token, tok = tok.cursors(req.Cursors), 0, nil
			continue
		} else if h.step(req, ses, resp, &budget) {
			return resp, nil
		}
		if deadline == nil {
			deadline = ses.waitTimer(wait)
		}
		select {
		case <-h.stop:
			return resp, nil
		case <-deadline.C:
			return resp, nil
		case <-wake:
		}
	}
}

// waitTimer returns a timer of d: the session's (ses may be nil), which its polls
// reuse one after another, or a new one while another poll of it holds it. Reset
// after Stop delivers nothing of the timer's past (Go 1.23 timers).
func (ses *session) waitTimer(d time.Duration) *time.Timer {
	if ses != nil {
		if t := ses.timer.Swap(nil); t != nil {
			t.Reset(d)
			return t
		}
	}
	return time.NewTimer(d)
}

// step answers a poll of session ses (nil: none) in resp, each subscription looked up
// and stepped, and reports whether it has something to answer; within budget (points).
// A poll that finds every subscription of the session following one series' live log
// in a group leaves the session its plan, for its next polls (plan.go).
func (h *Hub) step(req *wire.WatchNextReq, ses *session, resp *wire.WatchNextResp, budget *int) bool {
	var sesGen uint64
	if ses != nil {
		sesGen = ses.gen.Load() // before the subscriptions are read: a change after fails the plan
	}
	h.mu.Lock()
	polled := h.polled(req.Cursors, ses, resp)
	poll := h.polls
	h.mu.Unlock()
	named := len(polled) == len(req.Cursors) && len(resp.Subs) == 0
	// The followers in groups first, once per group (group.go); then each other one.
	polled, pl := h.stepGroups(poll, polled, resp, budget, req.Groups, sesGen)
	if ses != nil {
		if !named {
			pl = nil
		}
		ses.plan.Store(pl)
	}
	now := time.Now()
	for _, p := range polled {
		b, ok, ended := p.s.take(now, p.seen, budget)
		if ended {
			h.drop(p.s)
		}
		if ok && !(req.Groups && group(resp, b, p.seen)) {
			if resp.Subs == nil {
				resp.Subs = make([]wire.WatchBatch, 0, len(polled))
			}
			resp.Subs = append(resp.Subs, b)
		}
	}
	return len(resp.Subs)+len(resp.Groups) > 0
}

// group adds batch b, of a subscription polled with seen runs, to the group of
// resp that holds the same runs (the same slice: the subscriptions that follow one
// series' live log at one position get one), or to a new group, and reports whether
// it did: not for a batch that ends its subscription, nor for one that does not
// follow its cursor.
func group(resp *wire.WatchNextResp, b wire.WatchBatch, seen uint64) bool {
	if b.Ended != "" || len(b.Runs) == 0 || b.Seen != seen+uint64(len(b.Runs)) {
		return false
	}
	for i := len(resp.Groups) - 1; i >= max(0, len(resp.Groups)-groupsLooked); i-- {
		if g := &resp.Groups[i]; &g.Runs[0] == &b.Runs[0] && len(g.Runs) == len(b.Runs) {
			g.IDs = append(g.IDs, b.ID)
			return true
		}
	}
	resp.Groups = append(resp.Groups, wire.WatchGroup{IDs: append(make([]uint64, 0, 16), b.ID), Runs: b.Runs})
	return true
}

// groupsLooked is how many of the latest groups of an answer a batch is compared
// with: a session's followers of one series come one after another.
const groupsLooked = 8

// cursor is a subscription of a poll and the runs its subscriber has seen.
type cursor struct {
	s    *sub
	seen uint64
}

// polled returns the subscriptions of session ses a poll asks for with cursors, and
// those of the session it does not name, from their first run; a cursor of a
// subscription that is not open (at least not in ses) gets a batch in resp saying so.
// h.mu held.
func (h *Hub) polled(cursors []wire.WatchCursor, ses *session, resp *wire.WatchNextResp) []cursor {
	n := len(cursors)
	if ses != nil {
		n = max(n, len(ses.subs))
	}
	polled := make([]cursor, 0, n)
	h.polls++ // marks the subscriptions taken, once each
	var last []*sub
	if ses != nil {
		last = ses.last
		if len(last) != len(cursors) {
			last = make([]*sub, len(cursors))
		}
	}
	for i, c := range cursors {
		var s *sub
		if last != nil {
			if s = last[i]; s == nil || s.id != c.ID || s.forgotten {
				s = h.subs[c.ID]
				last[i] = s
			}
		} else {
			s = h.subs[c.ID]
		}
		switch {
		case s == nil || s.ses != ses:
			resp.Subs = append(resp.Subs, wire.WatchBatch{ID: c.ID, Ended: fmt.Sprintf(
				"subscription %d is not open at node %s (its lease ran out, or the node restarted)", c.ID, h.cfg.Self)})
		case s.poll != h.polls:
			s.poll = h.polls
			polled = append(polled, cursor{s, c.Seen})
		}
	}
	if ses != nil && len(polled) < len(ses.subs) {
		for _, s := range ses.subs {
			if s.poll != h.polls {
				s.poll = h.polls
				polled = append(polled, cursor{s, 0})
			}
		}
	}
	if ses != nil {
		ses.last = last
	}
	return polled
}

// drop forgets a subscription.
func (h *Hub) drop(s *sub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.forget(s)
}

// forget forgets a subscription; h.mu held.
func (h *Hub) forget(s *sub) {
	if h.subs[s.id] != s {
		return
	}
	delete(h.subs, s.id)
	delete(s.ses.subs, s.id)
	s.ses.gen.Add(1)
	s.forgotten = true
	if len(s.ses.subs) == 0 {
		for id, ses := range h.sessions {
			if ses == s.ses {
				delete(h.sessions, id)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.keys {
		if lg := h.logs[k]; lg != nil {
			lg.mu.Lock()
			empty := lg.remove(s)
			lg.mu.Unlock()
			if empty {
				delete(h.logs, k)
			}
		}
	}
	s.cancel()
	h.push.changed()
}

// expire ends the subscriptions not polled within the lease.
func (h *Hub) expire() {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.subs {
		if s.idle(now) > h.cfg.Lease {
			h.forget(s)
		}
	}
}

// reselect re-runs the selection of prefix and tag subscriptions: a series that came
// to match is watched from then on, its history read from the subscription's start.
func (h *Hub) reselect() {
	h.mu.Lock()
	var sel []*sub
	for _, s := range h.subs {
		if s.selects {
			sel = append(sel, s)
		}
	}
	h.mu.Unlock()
	for _, s := range sel {
		ctx, cancel := context.WithTimeout(s.ctx, h.cfg.Renew)
		keys, err := h.cfg.Source.Select(ctx, s.query, s.watches)
		if err != nil {
			cancel()
			continue
		}
		h.mu.Lock()
		if h.subs[s.id] != s {
			h.mu.Unlock()
			cancel()
			continue
		}
		added := s.addKeys(keys)
		h.mu.Unlock()
		if len(added) > 0 {
			if err := h.tellPeers(ctx); err != nil {
				s.end(err)
			} else {
				s.readHistory(added)
			}
		}
		cancel()
	}
}

// Subscriptions returns how many subscriptions this node holds.
func (h *Hub) Subscriptions() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}
