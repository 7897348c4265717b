package coord

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// SeriesAny lists the entries of the series any of qs selects, sorted by key, each
// once: the union of Series of each query, read together. Every replica of the posting
// lists the queries read is asked once for the whole listing (wire.MethodListing): it
// answers the posting pages its own run of the queries read and its entries of the
// candidates it found. A page every replica of its list answered is merged as
// readPostings merges it, and an entry every registry replica of its key covered needs
// no entries read, so on a cluster whose catalog replicas answer all of it a listing
// costs one request per node. What the answers lack — a page one replica did not read,
// a key one registry replica did not cover, a replica that did not answer — is read one
// method at a time as before; each page once, however many queries ask for it.
func (c *Coordinator) SeriesAny(ctx context.Context, qs []catalog.Query) ([]catalog.Entry, error) {
	ls, err := c.SeriesListed(ctx, qs)
	out := make([]catalog.Entry, len(ls))
	for i, l := range ls {
		out[i] = l.Entry
	}
	return out, err
}

// Listed is a series' catalog entry as a listing read it, and how many of the series'
// registry replicas' answers it merges: EndsManyListed takes it in place of reading
// the entry again where that is at least its read quorum.
type Listed struct {
	Entry    catalog.Entry
	Replicas int
}

// SeriesListed is SeriesAny, saying of each entry how many registry replicas' answers
// it merges.
func (c *Coordinator) SeriesListed(ctx context.Context, qs []catalog.Query) ([]Listed, error) {
	if len(qs) == 0 {
		return nil, nil
	}
	l := c.listing(ctx, qs)
	pages := catalog.NewPageLog(l.page, 0)
	keys, err := candidates(ctx, pages.Source, qs) // each checked against its entry below
	if err != nil {
		return nil, err
	}
	entries, answered, err := c.entriesCounted(ctx, keys, l.known)
	if err != nil {
		return nil, err
	}
	var out []Listed
	for _, e := range entries {
		if selected(e, qs) {
			out = append(out, Listed{Entry: e, Replicas: answered[e.Key]})
		}
	}
	return out, nil
}

// SeriesNew returns, sorted, the keys of the series q selects that known does not
// say are known: what a standing selection (a prefix or tag subscription, looked at
// again now and then) has gained. It reads the posting lists q reads and the entries
// of the candidates known does not know, and no other entry: looking again at a
// prefix of thousands of series that gained none reads no entry at all (a tag
// query's candidates that it does not select are read each time, as by Series).
// known is called once per candidate, from this goroutine; nil knows none.
func (c *Coordinator) SeriesNew(ctx context.Context, q catalog.Query, known func(key string) bool) ([]string, error) {
	qs := []catalog.Query{q}
	keys, err := candidates(ctx, catalog.NewPageLog(c.readPostings, 0).Source, qs)
	if err != nil {
		return nil, err
	}
	if known != nil {
		keys = slices.DeleteFunc(keys, known)
	}
	if len(keys) == 0 {
		return nil, nil
	}
	entries, err := c.entries(ctx, keys)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if selected(e, qs) {
			out = append(out, e.Key)
		}
	}
	return out, nil
}

// candidates is catalog.CandidatesAny, a query the catalog refuses said as bad input.
func candidates(ctx context.Context, src catalog.PostingSource, qs []catalog.Query) ([]string, error) {
	keys, err := catalog.CandidatesAny(ctx, src, qs)
	if err != nil {
		var re *rpc.RemoteError
		if errors.As(err, &re) {
			return nil, err
		}
		return nil, rpc.Errorf(wire.CodeBadInput, "%v", err)
	}
	return keys, nil
}

// selected says whether e, a candidate's entry, is of a live series one of qs selects.
func selected(e catalog.Entry, qs []catalog.Query) bool {
	if !e.Live() {
		return false
	}
	for _, q := range qs {
		if strings.HasPrefix(e.Key, q.Prefix) && catalog.Matches(e.Tags, q.Match) {
			return true
		}
	}
	return false
}

// listed is what the catalog replicas answered to one listing, by peer ID.
type listed struct {
	c       *Coordinator
	answers map[string]*listAnswer
}

type listAnswer struct {
	pages   map[catalog.PageKey]catalog.Page
	covered map[string]bool
	entries map[string]catalog.Entry
}

// listing asks every replica of the posting lists qs read for the listing, in parallel,
// and keeps the answers; a replica that fails (or predates wire.MethodListing) is left
// out, and what it would have answered is read one method at a time.
func (c *Coordinator) listing(ctx context.Context, qs []catalog.Query) *listed {
	l := &listed{c: c, answers: map[string]*listAnswer{}}
	seen := map[string]bool{}
	var batches []*cluster.PeerBatch[struct{}]
	for _, q := range qs {
		for _, t := range q.ListTags() {
			peers, err := c.place.Locate(ctx, t.ID(), c.cfg.RF)
			if err != nil {
				continue // the page's own read reports it
			}
			for _, p := range peers {
				if !seen[p.ID] {
					seen[p.ID] = true
					batches = append(batches, &cluster.PeerBatch[struct{}]{Peer: p, Items: []struct{}{{}}})
				}
			}
		}
	}
	answers := cluster.FanOut(ctx, batches, c.cfg.ReadConcurrency, c.cfg.CallTimeout, func(ctx context.Context, b *cluster.PeerBatch[struct{}]) (wire.Listing, error) {
		return c.replicas.For(b.Peer).Listing(ctx, qs)
	})
	for range batches {
		a := <-answers
		if a.Err != nil {
			continue
		}
		la := &listAnswer{
			pages:   make(map[catalog.PageKey]catalog.Page, len(a.Resp.Pages)),
			covered: make(map[string]bool, len(a.Resp.Covered)),
			entries: make(map[string]catalog.Entry, len(a.Resp.Entries)),
		}
		for _, p := range a.Resp.Pages {
			la.pages[p.PageKey] = p
		}
		for _, k := range a.Resp.Covered {
			la.covered[k] = true
		}
		for _, e := range a.Resp.Entries {
			if la.covered[e.Key] {
				la.entries[e.Key] = e
			}
		}
		l.answers[a.Batch.Peer.ID] = la
	}
	return l
}

// page answers a page of tag's posting list from the listing when every replica of the
// list answered it, merged as readPostings merges; else by readPostings. A page some
// replica answered full is full merged too: a first page of catalog.CandidatePage
// members, whose members a replica need not send, is catalog.ErrFullPage then (what
// Candidates takes as full).
func (l *listed) page(ctx context.Context, tag catalog.Tag, after string, limit int) ([]catalog.Member, error) {
	c := l.c
	owners, err := c.place.Locate(ctx, tag.ID(), c.cfg.RF)
	if err != nil || len(owners) == 0 {
		return c.readPostings(ctx, tag, after, limit)
	}
	k := catalog.PageKey{Tag: tag, After: after, Limit: limit}
	lists := make([][]catalog.Member, 0, len(owners))
	full := false
	for _, p := range owners {
		a := l.answers[p.ID]
		if a == nil {
			return c.readPostings(ctx, tag, after, limit)
		}
		pg, ok := a.pages[k]
		if !ok {
			return c.readPostings(ctx, tag, after, limit)
		}
		full = full || pg.Full
		lists = append(lists, pg.Members)
	}
	if full {
		if limit == catalog.CandidatePage {
			return nil, catalog.ErrFullPage
		}
		return c.readPostings(ctx, tag, after, limit) // no replica of this build elides it
	}
	return mergePage(lists, limit), nil
}

// known says what p's listing answer holds of key's entry (entriesBeside).
func (l *listed) known(p dht.Peer, key string) (catalog.Entry, bool, bool) {
	a := l.answers[p.ID]
	if a == nil || !a.covered[key] {
		return catalog.Entry{}, false, false
	}
	e, found := a.entries[key]
	return e, found, true
}
