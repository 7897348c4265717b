package catalog

import (
	"context"
	"errors"
	"sync"
)

// PageKey names one page of a posting list as a PostingSource is asked for it.
type PageKey struct {
	Tag   Tag
	After string
	Limit int
}

// Page is a page of a posting list and the ask it answers.
type Page struct {
	PageKey
	Members []Member
	// Full says the list holds Limit members or more from After on. A listing answer
	// may carry a full page of CandidatePage members without its members
	// (wire.ListingReq.ElideFull): Candidates only counts such a page.
	Full bool
}

// ErrFullPage is what a source answers for a page it knows is full but whose members
// it was not sent: Candidates takes it as a full page; any other reader fails with it.
var ErrFullPage = errors.New("catalog: a full posting page's members were not sent")

// ErrPagesFull is what a PageLog's source answers once the pages it logged reach its
// bound: the listing reading through it stops there.
var ErrPagesFull = errors.New("catalog: the listing's pages reached their bound")

// PageLog answers each page a listing asks of it once, from its source, and keeps the
// pages it read: a listing whose queries ask for the same page of a shared tag's list
// (two fields of one fleet) reads it once, and a replica answering a listing in one
// request (wire.MethodListing) sends back the pages its own run of Candidates read.
type PageLog struct {
	src      PostingSource
	maxBytes int // 0: no bound

	mu    sync.Mutex
	pages map[PageKey]*loggedPage
	order []*loggedPage
	bytes int
}

type loggedPage struct {
	once sync.Once
	Page
	err error
}

// NewPageLog returns a log reading through src; past maxBytes (0: no bound) of logged
// members (MemberBytes each), its source answers ErrPagesFull.
func NewPageLog(src PostingSource, maxBytes int) *PageLog {
	return &PageLog{src: src, maxBytes: maxBytes, pages: map[PageKey]*loggedPage{}}
}

// MemberBytes is about what a member costs a page on the wire.
func MemberBytes(m Member) int { return len(m.Key) + 16 }

// Source is the log as a PostingSource. Concurrent asks of one page wait for the first.
func (l *PageLog) Source(ctx context.Context, tag Tag, after string, limit int) ([]Member, error) {
	k := PageKey{tag, after, limit}
	l.mu.Lock()
	p := l.pages[k]
	if p == nil {
		p = &loggedPage{Page: Page{PageKey: k}}
		l.pages[k] = p
	}
	l.mu.Unlock()
	p.once.Do(func() {
		ms, err := l.src(ctx, tag, after, limit)
		if err != nil {
			p.err = err
			return
		}
		n := 0
		for _, m := range ms {
			n += MemberBytes(m)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.maxBytes > 0 && l.bytes+n > l.maxBytes {
			p.err = ErrPagesFull
			return
		}
		l.bytes += n
		p.Members = ms
		l.order = append(l.order, p)
	})
	return p.Members, p.err
}

// Pages returns the pages the log read without error, in the order it read them.
func (l *PageLog) Pages() []Page {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Page, len(l.order))
	for i, p := range l.order {
		out[i] = p.Page
	}
	return out
}

// Bytes is the MemberBytes of the pages logged.
func (l *PageLog) Bytes() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bytes
}

// CandidatesAny returns, sorted and each once, the candidates (Candidates) of every
// query of qs, the queries read at once through src.
func CandidatesAny(ctx context.Context, src PostingSource, qs []Query) ([]string, error) {
	sets := make([][]string, len(qs))
	errs := make([]error, len(qs))
	var wg sync.WaitGroup
	for i, q := range qs {
		wg.Go(func() { sets[i], errs[i] = Candidates(ctx, src, q) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	if len(sets) == 1 {
		return sets[0], nil
	}
	return unionSorted(sets), nil
}

// EntryBytes is about what an entry costs a message.
func EntryBytes(e Entry) int {
	n := len(e.Key) + len(e.Unit) + len(e.Description) + 96
	for _, t := range e.Tags {
		n += len(t.K) + len(t.V) + 8
	}
	return n
}
