package wire

import (
	"slices"
	"testing"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/catalog"
)

// A listing request and its answer travel whole, and each refuses, before converting
// anything, more than its limits: queries, match pairs, members, entries.
func TestListingMessages(t *testing.T) {
	qs := []catalog.Query{
		{Prefix: "iot/readings", Match: []catalog.Tag{{K: "fleet", V: "South"}, {K: "__field", V: "latitude"}}},
		{Prefix: "iot/"},
	}
	b, err := rpc.Encode(EncodeListingReq(qs))
	if err != nil {
		t.Fatal(err)
	}
	var req ListingReq
	if err := rpc.Decode(b, &req); err != nil {
		t.Fatal(err)
	}
	got, err := req.Decode()
	if err != nil || len(got) != 2 || got[1].Prefix != "iot/" || len(got[1].Match) != 0 || !slices.Equal(got[0].Match, qs[0].Match) {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, qs)
	}
	for _, bad := range []ListingReq{
		{Queries: make([]ListingQuery, MaxListingQueries+1)},
		{Queries: []ListingQuery{{Match: []string{"fleet"}}}},
		{Queries: []ListingQuery{{Match: make([]string, 2*catalog.MaxTags+2)}}},
	} {
		if _, err := bad.Decode(); err == nil {
			t.Errorf("%d queries, first of %d match strings: decoded; want refused", len(bad.Queries), len(bad.Queries[0].Match))
		}
	}

	e := catalog.Entry{Key: "iot/readings,name=truck_1#latitude", Created: 1, Type: 1}
	l := Listing{
		Pages:   []catalog.Page{{PageKey: catalog.PageKey{Tag: catalog.Tag{K: "fleet", V: "South"}, Limit: 256}, Members: []catalog.Member{{Key: e.Key, Version: 3}}}},
		Covered: []string{e.Key, "iot/readings,name=truck_2#latitude"},
		Entries: []catalog.Entry{e},
	}
	if b, err = rpc.Encode(EncodeListing(l, true)); err != nil {
		t.Fatal(err)
	}
	var resp ListingResp
	if err := rpc.Decode(b, &resp); err != nil {
		t.Fatal(err)
	}
	back, err := resp.Decode()
	if err != nil || len(back.Pages) != 1 || back.Pages[0].PageKey != l.Pages[0].PageKey || !slices.Equal(back.Pages[0].Members, l.Pages[0].Members) ||
		!slices.Equal(back.Covered, l.Covered) || len(back.Entries) != 1 || !catalog.Equal(back.Entries[0], e) {
		t.Fatalf("decoded %+v, %v; want %+v", back, err, l)
	}
	// A full page goes without its members when the request asks (ElideFull), whole
	// otherwise: a coordinator that predates Full would read an empty page.
	l.Pages[0].Full = true
	for _, elide := range []bool{true, false} {
		var resp ListingResp
		if b, err = rpc.Encode(EncodeListing(l, elide)); err != nil {
			t.Fatal(err)
		}
		if err := rpc.Decode(b, &resp); err != nil {
			t.Fatal(err)
		}
		back, err := resp.Decode()
		if err != nil || len(back.Pages) != 1 || back.Pages[0].Full != elide || elide != (len(back.Pages[0].Members) == 0) {
			t.Fatalf("elide %v: decoded %+v, %v; want the page full and memberless exactly when elided", elide, back.Pages, err)
		}
	}
	if !EncodeListingReq(qs).ElideFull {
		t.Fatal("a listing request does not ask for full pages elided")
	}
	for _, bad := range []ListingResp{
		{Pages: []ListingPage{{Members: make([]Member, ListingPageBytes/16+1)}}},
		{Covered: make([]string, MaxEntriesPerRequest+1)},
		{Entries: make([][]byte, MaxEntriesPerRequest+1)},
		{Entries: [][]byte{[]byte("not an entry")}},
	} {
		if _, err := bad.Decode(); err == nil {
			t.Errorf("%d members, %d covered, %d entries: decoded; want refused", len(bad.Pages), len(bad.Covered), len(bad.Entries))
		}
	}
}
