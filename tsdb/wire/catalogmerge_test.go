package wire

import (
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
)

// A catalog merge goes over the wire as it was sent, and one past its limits is
// refused with words that say what to do.
func TestCatalogMergeReq(t *testing.T) {
	lists := []catalog.TagMembers{{Tag: catalog.Tag{K: "host", V: "a"}, Members: []catalog.Member{{Key: "db/m,host=a#f", Version: 7}}}}
	es := []catalog.Entry{{Key: "db/m,host=a#f", Type: series.Float, Created: 7, HasBounds: true, First: 0, Last: 3600e9}}
	b, err := msgpack.Marshal(EncodeCatalogMerge(lists, es))
	if err != nil {
		t.Fatal(err)
	}
	var req CatalogMergeReq
	if err := rpc.Decode(b, &req); err != nil {
		t.Fatal(err)
	}
	gotLists, gotEs, err := req.Decode()
	if err != nil {
		t.Fatal(err)
	}
	if len(gotLists) != 1 || gotLists[0].Tag != lists[0].Tag || len(gotLists[0].Members) != 1 || gotLists[0].Members[0] != lists[0].Members[0] {
		t.Errorf("lists = %+v, want %+v", gotLists, lists)
	}
	if len(gotEs) != 1 || !catalog.Equal(gotEs[0], es[0]) {
		t.Errorf("entries = %+v, want %+v", gotEs, es)
	}
	big := &CatalogMergeReq{Entries: EntriesMsg{Entries: make([][]byte, MaxEntriesPerRequest+1)}}
	if _, _, err := big.Decode(); err == nil || !strings.Contains(err.Error(), "send fewer") {
		t.Errorf("%d entries in one merge: %v; want a refusal that says to send fewer", MaxEntriesPerRequest+1, err)
	}
}
