package wire

import (
	"strings"
	"testing"

	"github.com/tsdht/tsdht/tsdb/catalog"
)

// A PostingsMergeManyReq decodes to the lists encoded, and one carrying more members
// than a request may is refused before its lists are built.
func TestPostingsMergeManyReq(t *testing.T) {
	lists := []catalog.TagMembers{
		{Tag: catalog.Tag{K: "bus", V: "1"}, Members: []catalog.Member{{Key: "a", Version: 2}, {Key: "b", Version: 3, Removed: true}}},
		{Tag: catalog.Tag{K: "bus", V: "2"}, Members: []catalog.Member{{Key: "a", Version: 4}}},
	}
	got, err := EncodePostingsMergeMany(lists).Decode()
	if err != nil || len(got) != 2 || got[0].Tag != lists[0].Tag || len(got[0].Members) != 2 || got[0].Members[1] != lists[0].Members[1] ||
		got[1].Tag != lists[1].Tag || got[1].Members[0] != lists[1].Members[0] {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, lists)
	}
	big := &PostingsMergeManyReq{Lists: []PostingsMergeReq{{K: "k", V: "v", Members: make([]Member, MaxEntriesPerRequest/2+1)},
		{K: "k", V: "w", Members: make([]Member, MaxEntriesPerRequest/2)}}}
	if _, err := big.Decode(); err == nil || !strings.Contains(err.Error(), "send fewer") {
		t.Fatalf("a request of %d members: %v, want refused", MaxEntriesPerRequest+1, err)
	}
}
