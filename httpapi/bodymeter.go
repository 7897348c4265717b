package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// A write request's body is read before the request takes a write slot, under its own
// deadline (Config.BodyTimeout, extended by one second for every Config.BodyMinRate
// bytes that arrived), so a client that sends slowly holds its own connection and
// nothing of the node's: not a slot, and no more body memory than its bytes.

// errBodySlow is wrapped by the error of a body that did not arrive within its deadline.
var errBodySlow = errors.New("request body too slow")

// errBodyMemory is wrapped by the error of a body the node has no room for.
var errBodyMemory = errors.New("no room for the request body")

// meter is one request's side of the node's HTTP budgets: the work account its bytes
// are charged to and the body memory it holds (released by done).
type meter struct {
	h       *Handler
	acct    account
	mem     hold
	charged int64 // bytes of work charged to acct so far
}

// meter returns the meter of the request r, or answers it (429 with Retry-After) and
// returns nil when the node's work budget, or its client's share, is spent.
func (h *Handler) meter(w http.ResponseWriter, r *http.Request, what string) *meter {
	m := &meter{h: h, acct: h.work.account(r), mem: hold{p: h.bodyMem}}
	if spent := m.acct.check(0, what); spent != nil {
		closeUnread(w, r)
		h.answerSpent(w, spent, http.StatusTooManyRequests)
		return nil
	}
	return m
}

// closeUnread marks the answer to r, whose body was not read, as the connection's last
// when that body is over closeUnreadOver bytes or of unknown length: net/http would
// otherwise read and discard up to 256 KiB of it to reuse the connection, work that a
// refused request should not cost. A smaller body is cheaper to discard than the new
// connection its client would open.
func closeUnread(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > closeUnreadOver || r.ContentLength < 0 {
		w.Header().Set("Connection", "close")
	}
}

// closeUnreadOver is the size of an unread body past which closeUnread closes.
const closeUnreadOver = 64 << 10

// answerSpent answers a request the budget refused (spent, not nil) with code and
// Retry-After, and reports whether it was admitted (spent nil).
func (h *Handler) answerSpent(w http.ResponseWriter, spent *budgetSpent, code int) bool {
	if spent == nil {
		return true
	}
	h.m.refused.WithLabelValues("budget").Inc()
	w.Header().Set("Retry-After", retryAfterSeconds(spent.wait))
	httpError(w, code, spent.msg)
	return false
}

// done gives back the body memory m holds.
func (m *meter) done() { m.mem.release() }

// add charges n bytes that arrived or were decompressed to the work budget, and holds
// them (hold).
func (m *meter) add(n int) error {
	m.charge(int64(n))
	return m.hold(int64(n))
}

// take charges n bytes of work (what) to m's account, or, when its budget is spent,
// answers the request (429 with Retry-After) and reports false.
func (m *meter) take(w http.ResponseWriter, n int64, what string) bool {
	if !m.h.answerSpent(w, m.acct.check(0, what), http.StatusTooManyRequests) {
		return false
	}
	m.charge(n)
	return true
}

// charge charges n bytes of work to m's account.
func (m *meter) charge(n int64) {
	m.acct.charge(n)
	m.charged += n
}

// hold takes n bytes of the node's body memory, failing with errBodyMemory when it has
// no room left.
func (m *meter) hold(n int64) error {
	if !m.mem.grow(n) {
		m.h.m.refused.WithLabelValues("body_memory").Inc()
		return fmt.Errorf("%w: the request bodies this node is reading hold %s (MaxInflightBodyBytes): retry after 1 s, or send smaller batches",
			errBodyMemory, mib(m.h.cfg.MaxInflightBodyBytes))
	}
	return nil
}

// body returns r's body read under the body deadline, every byte charged to m as it
// arrives.
func (m *meter) body(w http.ResponseWriter, r *http.Request) io.Reader {
	return &slowBodyReader{m: m, r: r.Body, rc: http.NewResponseController(w), start: time.Now()}
}

// decoded returns src with every byte read from it charged to m (decompressed bytes).
func (m *meter) decoded(src io.Reader) io.Reader { return &chargedReader{m: m, r: src} }

type chargedReader struct {
	m *meter
	r io.Reader
}

func (c *chargedReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		if merr := c.m.add(n); merr != nil {
			return n, merr
		}
	}
	return n, err
}

// slowBodyReader reads a body under the deadline BodyTimeout + arrived/BodyMinRate from
// its start, charging what arrives.
type slowBodyReader struct {
	m       *meter
	r       io.Reader
	rc      *http.ResponseController
	start   time.Time
	arrived int64
}

func (s *slowBodyReader) Read(p []byte) (int, error) {
	cfg := &s.m.h.cfg
	deadline := s.start.Add(cfg.BodyTimeout + time.Duration(float64(s.arrived)/float64(cfg.BodyMinRate)*float64(time.Second)))
	_ = s.rc.SetReadDeadline(deadline) // not every ResponseWriter can (a test's recorder): the server's ReadTimeout then bounds it
	n, err := s.r.Read(p)
	s.arrived += int64(n)
	if n > 0 {
		if merr := s.m.add(n); merr != nil {
			return n, merr
		}
	}
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		s.m.h.m.refused.WithLabelValues("body_slow").Inc()
		err = fmt.Errorf("%w: %d bytes arrived in %v; a body must arrive within %v plus 1 s for every %d bytes (BodyTimeout, tsdht node --http-body-timeout; BodyMinRate): send it faster, or in smaller batches",
			errBodySlow, s.arrived, time.Since(s.start).Round(time.Millisecond), cfg.BodyTimeout, cfg.BodyMinRate)
	}
	return n, err
}
