package replica

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// A replica's listing answers the pages its run of the query read and the entries of
// its candidates, and stops its entries at wire.ListingEntryBytes, naming as covered
// exactly the keys whose entries it sent (or holds none of); past
// wire.ListingPageBytes of pages it sends the pages read and no entries.
func TestListingBounded(t *testing.T) {
	st := store.NewMem()
	l := New(Config{Store: st})
	ctx := context.Background()
	desc := strings.Repeat("d", 1000)
	const n = 700 // entries of about 1.1 KB: more than ListingEntryBytes together
	tag := catalog.Tag{K: "fleet", V: "South"}
	var members []catalog.Member
	for i := range n {
		key := fmt.Sprintf("iot/readings,name=truck_%04d#latitude", i)
		members = append(members, catalog.Member{Key: key, Version: 1})
		if i%10 == 3 {
			continue // posted, no entry here: covered all the same
		}
		if _, err := st.MergeEntry(catalog.Entry{Key: key, Type: series.Float, Created: 1, MetaVersion: 1, Description: desc,
			Tags: []catalog.Tag{tag}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.MergePostings(ctx, tag, members); err != nil {
		t.Fatal(err)
	}
	got, err := l.Listing(ctx, []catalog.Query{{Match: []catalog.Tag{tag}, Prefix: "iot/"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Pages) != 1 || len(got.Pages[0].Members) != n || got.Pages[0].Tag != tag {
		t.Fatalf("%d pages; want fleet=South's one page of %d", len(got.Pages), n)
	}
	size := 0
	for _, k := range got.Covered {
		size += len(k) + 4
	}
	for _, e := range got.Entries {
		size += catalog.EntryBytes(e)
	}
	if len(got.Covered) == 0 || len(got.Covered) == n || size > wire.ListingEntryBytes {
		t.Fatalf("covered %d of %d keys in %d bytes; want some, not all, within %d", len(got.Covered), n, size, wire.ListingEntryBytes)
	}
	held := 0
	for i, k := range got.Covered {
		if k != members[i].Key {
			t.Fatalf("covered[%d] = %q, want %q: the first keys, in order", i, k, members[i].Key)
		}
		if i%10 != 3 {
			if got.Entries[held].Key != k {
				t.Fatalf("entry %d is %q, want %q", held, got.Entries[held].Key, k)
			}
			held++
		}
	}
	if held != len(got.Entries) {
		t.Fatalf("%d entries for %d covered keys holding one", len(got.Entries), held)
	}

	// A list longer than the pages' bound: the pages read, no entries.
	long := catalog.Tag{K: "fleet", V: "North"}
	var many []catalog.Member
	for i := range wire.ListingPageBytes/(16+40) + catalog.ListPage {
		many = append(many, catalog.Member{Key: fmt.Sprintf("iot/readings,name=truck_%06d#longitude", i), Version: 1})
	}
	for len(many) > 0 {
		if err := l.MergePostings(ctx, long, many[:min(len(many), 5000)]); err != nil {
			t.Fatal(err)
		}
		many = many[min(len(many), 5000):]
	}
	got, err = l.Listing(ctx, []catalog.Query{{Match: []catalog.Tag{long}}})
	if err != nil {
		t.Fatal(err)
	}
	bytes := 0
	for _, p := range got.Pages {
		for _, m := range p.Members {
			bytes += catalog.MemberBytes(m)
		}
	}
	if len(got.Pages) == 0 || bytes > wire.ListingPageBytes || len(got.Covered) != 0 || len(got.Entries) != 0 {
		t.Fatalf("%d pages of %d bytes, %d covered, %d entries; want pages within %d bytes and no entries",
			len(got.Pages), bytes, len(got.Covered), len(got.Entries), wire.ListingPageBytes)
	}
}

// A listing marks Full exactly the first pages of catalog.CandidatePage members it
// read full — those Candidates only counts, which the coordinator need not be sent —
// and answers the short list's keys as the candidates.
func TestListingMarksFullPages(t *testing.T) {
	l := New(Config{Store: store.NewMem()})
	ctx := context.Background()
	long := catalog.Tag{K: "__m", V: "readings"}
	short := catalog.Tag{K: "name", V: "truck_0003"}
	exact := catalog.Tag{K: "fleet", V: "East"} // exactly a page: full too
	var all, one, page []catalog.Member
	for i := range catalog.CandidatePage + 50 {
		m := catalog.Member{Key: fmt.Sprintf("iot/readings,name=truck_%04d#latitude", i), Version: 1}
		all = append(all, m)
		if i == 3 {
			one = append(one, m)
		}
		if i < catalog.CandidatePage {
			page = append(page, m)
		}
	}
	for tag, ms := range map[catalog.Tag][]catalog.Member{long: all, short: one, exact: page} {
		if err := l.MergePostings(ctx, tag, ms); err != nil {
			t.Fatal(err)
		}
	}
	got, err := l.Listing(ctx, []catalog.Query{{Match: []catalog.Tag{long, short, exact}}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[catalog.Tag]bool{long: true, short: false, exact: true}
	if len(got.Pages) != len(want) {
		t.Fatalf("%d pages, want %d", len(got.Pages), len(want))
	}
	for _, p := range got.Pages {
		if p.Full != want[p.Tag] || p.Limit != catalog.CandidatePage {
			t.Errorf("page of %s (%d members, limit %d): full %v, want %v", p.Tag, len(p.Members), p.Limit, p.Full, want[p.Tag])
		}
	}
	if len(got.Covered) != 1 || got.Covered[0] != one[0].Key {
		t.Fatalf("covered %q, want the short list's one key", got.Covered)
	}
}
