package wire

import (
	"fmt"

	"github.com/tsdht/tsdht/tsdb/catalog"
)

// MethodListing answers the catalog part of a listing in one request to a catalog
// replica: ListingReq → ListingResp. The replica runs catalog.Candidates of every query
// over its own posting lists and answers the pages it read and the entries it holds of
// the candidates it found, so that a coordinator whose replicas all answer merges the
// pages as MethodPostings' answers and needs no further round (coord.SeriesAny). A
// replica that does not know it answers rpc.CodeUnknownMethod, and the caller reads
// the pages and entries one method at a time (MethodPostings, MethodEntryGet).
const MethodListing = "tsdb.listing"

// MaxListingQueries bounds the queries of one listing request (a SELECT lists one per
// field it reads).
const MaxListingQueries = 1024

// ListingPageBytes and ListingEntryBytes bound a listing answer's pages and entries,
// about (catalog.MemberBytes, encoded entries): a replica stops reading pages, or
// adding entries, at its bound and says which candidates its entries cover.
const (
	ListingPageBytes  = 512 << 10
	ListingEntryBytes = 512 << 10
)

// ListingQuery is a catalog.Query on the wire: Match as alternating keys and values.
type ListingQuery struct {
	Match  []string `msgpack:"m,omitempty"`
	Prefix string   `msgpack:"p,omitempty"`
}

// ListingReq asks for the listing of the series any of Queries selects.
type ListingReq struct {
	Queries []ListingQuery `msgpack:"q"`
	// ElideFull asks the replica to send full pages (catalog.Page.Full) without their
	// members: the caller's catalog.Candidates only counts them. A replica that
	// predates it sends them whole, which is as correct.
	ElideFull bool `msgpack:"ef,omitempty"`
}

// EncodeListingReq returns qs as a request, asking for full pages without their members
// (the coordinator reads such a page as catalog.ErrFullPage).
func EncodeListingReq(qs []catalog.Query) *ListingReq {
	req := &ListingReq{Queries: make([]ListingQuery, len(qs)), ElideFull: true}
	for i, q := range qs {
		lq := ListingQuery{Prefix: q.Prefix, Match: make([]string, 0, 2*len(q.Match))}
		for _, t := range q.Match {
			lq.Match = append(lq.Match, t.K, t.V)
		}
		req.Queries[i] = lq
	}
	return req
}

// Decode returns the request's queries, refusing more than MaxListingQueries, or more
// than catalog.MaxTags tags in one, before converting any (what the caller should do:
// list fewer fields at a time).
func (r *ListingReq) Decode() ([]catalog.Query, error) {
	if len(r.Queries) > MaxListingQueries {
		return nil, fmt.Errorf("%d queries in one listing; at most %d: list fewer fields at a time", len(r.Queries), MaxListingQueries)
	}
	out := make([]catalog.Query, len(r.Queries))
	for i, lq := range r.Queries {
		if len(lq.Match)%2 != 0 || len(lq.Match) > 2*catalog.MaxTags {
			return nil, fmt.Errorf("listing query %d: %d match strings; want pairs of key and value, at most %d pairs", i, len(lq.Match), catalog.MaxTags)
		}
		q := catalog.Query{Prefix: lq.Prefix, Match: make([]catalog.Tag, len(lq.Match)/2)}
		for j := range q.Match {
			q.Match[j] = catalog.Tag{K: lq.Match[2*j], V: lq.Match[2*j+1]}
		}
		out[i] = q
	}
	return out, nil
}

// ListingPage is a page of a posting list a listing read: the ask and its members.
type ListingPage struct {
	K       string   `msgpack:"tk"`
	V       string   `msgpack:"tv"`
	After   string   `msgpack:"a"`
	Limit   int      `msgpack:"n"`
	Members []Member `msgpack:"m"`
	// Full: the list holds Limit members or more from After on; its members are left
	// out when the request asked (ListingReq.ElideFull).
	Full bool `msgpack:"f,omitempty"`
}

// ListingResp is a replica's answer to a listing: the pages it read, the candidates
// whose entries it looked up (Covered: the entries it holds of them are all in Entries)
// and those entries, each catalog.Entry.Encode'd.
type ListingResp struct {
	Pages   []ListingPage `msgpack:"p"`
	Covered []string      `msgpack:"c,omitempty"`
	Entries [][]byte      `msgpack:"e,omitempty"`
}

// Listing is a ListingResp decoded.
type Listing struct {
	Pages   []catalog.Page
	Covered []string
	Entries []catalog.Entry
}

// EncodeListing returns l as a message; with elideFull, its full pages without their
// members (ListingReq.ElideFull).
func EncodeListing(l Listing, elideFull bool) *ListingResp {
	resp := &ListingResp{Pages: make([]ListingPage, len(l.Pages)), Covered: l.Covered, Entries: make([][]byte, len(l.Entries))}
	for i, p := range l.Pages {
		resp.Pages[i] = ListingPage{K: p.Tag.K, V: p.Tag.V, After: p.After, Limit: p.Limit}
		if p.Full && elideFull {
			resp.Pages[i].Full = true
		} else {
			resp.Pages[i].Members = FromMembers(p.Members)
		}
	}
	for i := range l.Entries {
		resp.Entries[i] = l.Entries[i].Encode(nil)
	}
	return resp
}

// Decode decodes and validates the answer, refusing more than MaxEntriesPerRequest
// entries or covered keys, or pages past ListingPageBytes' members at the smallest,
// before converting any.
func (r *ListingResp) Decode() (Listing, error) {
	members := 0
	for _, p := range r.Pages {
		members += len(p.Members)
	}
	if maxMembers := ListingPageBytes / 16; members > maxMembers || len(r.Pages) > maxMembers {
		return Listing{}, fmt.Errorf("listing answer of %d members in %d pages; at most %d", members, len(r.Pages), maxMembers)
	}
	if len(r.Covered) > MaxEntriesPerRequest || len(r.Entries) > MaxEntriesPerRequest {
		return Listing{}, fmt.Errorf("listing answer of %d entries covering %d keys; at most %d", len(r.Entries), len(r.Covered), MaxEntriesPerRequest)
	}
	l := Listing{Pages: make([]catalog.Page, len(r.Pages)), Covered: r.Covered}
	for i, p := range r.Pages {
		l.Pages[i] = catalog.Page{PageKey: catalog.PageKey{Tag: catalog.Tag{K: p.K, V: p.V}, After: p.After, Limit: p.Limit}, Members: ToMembers(p.Members), Full: p.Full}
	}
	es, err := (&EntriesMsg{Entries: r.Entries}).Decode()
	if err != nil {
		return Listing{}, err
	}
	l.Entries = es
	return l, nil
}
