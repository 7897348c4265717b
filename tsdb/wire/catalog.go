package wire

import (
	"fmt"

	"github.com/tsdht/tsdht/tsdb/catalog"
)

// Catalog and delete methods (docs/catalog.md).
const (
	// MethodEntryMerge merges catalog entries into a registry replica: EntriesMsg →
	// EntriesMsg (the merged entries, in order). A replica whose merged entry lost its
	// type (a whole-series delete) forgets the series' type.
	MethodEntryMerge = "tsdb.entry.merge"
	// MethodEntryGet reads catalog entries from a registry replica: KeysReq →
	// EntriesMsg (only the entries it holds).
	MethodEntryGet = "tsdb.entry.get"
	// MethodPostingsMerge merges members into a tag's posting list on one of its
	// replicas: PostingsMergeReq → an empty map.
	MethodPostingsMerge = "tsdb.postings.merge"
	// MethodPostingsMergeMany merges members into many posting lists on one replica,
	// all in one store commit: PostingsMergeManyReq → an empty map. A write's new
	// series post to a list per tag value they carry; one request per replica carries
	// them all. A replica that does not know it answers rpc.CodeUnknownMethod, and the
	// caller sends each list alone (MethodPostingsMerge).
	MethodPostingsMergeMany = "tsdb.postings.mergemany"
	// MethodPostings reads a page of a tag's posting list: PostingsReq → PostingsResp.
	MethodPostings = "tsdb.postings"
	// MethodDeleteRange deletes points of shards on a replica and records tombstones:
	// DeleteReq → DeleteResp.
	MethodDeleteRange = "tsdb.deleterange"

	// MethodSeries lists series (coordinator): SeriesReq → EntriesMsg.
	MethodSeries = "tsdb.series"
	// MethodMeta sets a series' unit, description, rate and tags (coordinator):
	// MetaReq → EntriesMsg (the entry after the change).
	MethodMeta = "tsdb.meta"
	// MethodDelete deletes a series or a range of it (coordinator): DelReq → DelResp.
	MethodDelete = "tsdb.delete"
)

// MaxEntriesPerRequest bounds the entries or keys of one catalog message, a listing's
// answer included.
const MaxEntriesPerRequest = 20_000

// MaxDeleteShards bounds the shards of one delete request to one replica (a replica
// refuses more).
const MaxDeleteShards = 1024

// EntriesMsg carries catalog entries, each catalog.Entry.Encode'd.
type EntriesMsg struct {
	Entries [][]byte `msgpack:"e"`
}

// Decode decodes and validates every entry.
func (m *EntriesMsg) Decode() ([]catalog.Entry, error) {
	if len(m.Entries) > MaxEntriesPerRequest {
		return nil, fmt.Errorf("%d entries in one message; at most %d", len(m.Entries), MaxEntriesPerRequest)
	}
	out := make([]catalog.Entry, len(m.Entries))
	for i, b := range m.Entries {
		e, err := catalog.DecodeEntry(b)
		if err != nil {
			return nil, err
		}
		out[i] = e
	}
	return out, nil
}

// EncodeEntries returns es as a message.
func EncodeEntries(es []catalog.Entry) *EntriesMsg {
	m := &EntriesMsg{Entries: make([][]byte, len(es))}
	for i := range es {
		m.Entries[i] = es[i].Encode(nil)
	}
	return m
}

// KeysReq names series.
type KeysReq struct {
	Keys []string `msgpack:"k"`
}

// Member is a catalog.Member on the wire.
type Member struct {
	Key     string `msgpack:"k"`
	Version int64  `msgpack:"v"`
	Removed bool   `msgpack:"r,omitempty"`
}

// PostingsMergeReq merges members into the posting list of tag K=V.
type PostingsMergeReq struct {
	K       string   `msgpack:"tk"`
	V       string   `msgpack:"tv"`
	Members []Member `msgpack:"m"`
}

// PostingsMergeManyReq carries members for many posting lists (MethodPostingsMergeMany):
// at most MaxEntriesPerRequest members in all.
type PostingsMergeManyReq struct {
	Lists []PostingsMergeReq `msgpack:"l"`
}

// EncodePostingsMergeMany returns lists as a request.
func EncodePostingsMergeMany(lists []catalog.TagMembers) *PostingsMergeManyReq {
	req := &PostingsMergeManyReq{Lists: make([]PostingsMergeReq, len(lists))}
	for i, l := range lists {
		req.Lists[i] = PostingsMergeReq{K: l.Tag.K, V: l.Tag.V, Members: FromMembers(l.Members)}
	}
	return req
}

// Decode returns the request's lists, refusing more than MaxEntriesPerRequest members
// in all (what the caller should do: send fewer lists per request).
func (r *PostingsMergeManyReq) Decode() ([]catalog.TagMembers, error) {
	n := 0
	for _, l := range r.Lists {
		n += len(l.Members)
	}
	if n > MaxEntriesPerRequest || len(r.Lists) > MaxEntriesPerRequest {
		return nil, fmt.Errorf("%d members in %d posting lists in one request; at most %d: send fewer at a time",
			n, len(r.Lists), MaxEntriesPerRequest)
	}
	out := make([]catalog.TagMembers, len(r.Lists))
	for i, l := range r.Lists {
		out[i] = catalog.TagMembers{Tag: catalog.Tag{K: l.K, V: l.V}, Members: ToMembers(l.Members)}
	}
	return out, nil
}

// PostingsReq asks for up to Limit members of tag K=V with keys after After.
type PostingsReq struct {
	K     string `msgpack:"tk"`
	V     string `msgpack:"tv"`
	After string `msgpack:"a"`
	Limit int    `msgpack:"n"`
}

// PostingsResp is a page of a posting list, in key order.
type PostingsResp struct {
	Members []Member `msgpack:"m"`
}

// ToMembers converts wire members.
func ToMembers(ms []Member) []catalog.Member {
	out := make([]catalog.Member, len(ms))
	for i, m := range ms {
		out[i] = catalog.Member{Key: m.Key, Version: m.Version, Removed: m.Removed}
	}
	return out
}

// FromMembers converts to wire members.
func FromMembers(ms []catalog.Member) []Member {
	out := make([]Member, len(ms))
	for i, m := range ms {
		out[i] = Member{Key: m.Key, Version: m.Version, Removed: m.Removed}
	}
	return out
}

// Range is a deleted time range [From, To) in ns.
type Range struct {
	From int64 `msgpack:"f"`
	To   int64 `msgpack:"t"`
}

// ShardDelete deletes the points of one series in one shard with From <= t < To.
type ShardDelete struct {
	ID    []byte `msgpack:"id"`
	Start int64  `msgpack:"q"`
	// Q is the quantum's length in seconds, the series' own; 0 is the cluster's.
	Q    int64  `msgpack:"ql,omitempty"`
	Key  string `msgpack:"k"`
	From int64  `msgpack:"f"`
	To   int64  `msgpack:"t"`
	// Whole marks a delete of the whole series: the replica also forgets the series'
	// type, which every store holding its points keeps, so that its key is free.
	Whole bool `msgpack:"w,omitempty"`
}

// DeleteReq asks a replica to delete ranges of shards (MethodDeleteRange).
type DeleteReq struct {
	Shards []ShardDelete `msgpack:"s"`
}

// DeleteResp says how many points the replica dropped.
type DeleteResp struct {
	Dropped int64 `msgpack:"n"`
}

// SeriesReq selects series (MethodSeries → EntriesMsg, sorted by key): those
// carrying every Match tag ("k=v") whose keys start with Prefix.
type SeriesReq struct {
	Match  []string `msgpack:"m"`
	Prefix string   `msgpack:"p"`
}

// MetaReq changes a series' metadata (MethodMeta). Empty fields keep their value
// unless the matching Set flag is given; Tags, when SetTags, replace the series' tags.
type MetaReq struct {
	Key            string   `msgpack:"k"`
	Unit           string   `msgpack:"u"`
	SetUnit        bool     `msgpack:"su"`
	Description    string   `msgpack:"d"`
	SetDescription bool     `msgpack:"sd"`
	NominalRate    float64  `msgpack:"r"`
	SetRate        bool     `msgpack:"sr"`
	Tags           []string `msgpack:"t"` // "k=v"
	// Pairs are more tags as keys and values alternating, taken as they are: values
	// may hold ',' and '=' (the line protocol's and Prometheus' tags), which Tags
	// cannot carry.
	Pairs   []string `msgpack:"tp,omitempty"`
	SetTags bool     `msgpack:"st"`
	AddTags bool     `msgpack:"at"` // Tags are added to (and replace values in) the existing tags
}

// DelReq deletes a whole series (Whole) or its points with From <= t < To.
type DelReq struct {
	Key   string `msgpack:"k"`
	Whole bool   `msgpack:"w"`
	From  int64  `msgpack:"f"`
	To    int64  `msgpack:"t"`
}

// DelResp says how many shards the delete reached at quorum.
type DelResp struct {
	Shards int `msgpack:"s"`
}
