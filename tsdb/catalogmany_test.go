package tsdb

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// TestManyCatalogRequestsOverTCP declares series, merges posting lists, and merges a new
// series' postings with its entry in one request each (wire.MethodDeclareMany,
// wire.MethodPostingsMergeMany, wire.MethodCatalogMerge) to a replica over TCP, and
// to an older node that knows only the one-at-a-time methods (the caller falls back to
// them): both store the same, and a series declared with another type than it holds is
// refused alone, with its code.
func TestManyCatalogRequestsOverTCP(t *testing.T) {
	ctx := context.Background()
	lc, err := StartLocal(ctx, 1, "", func(_ int, cfg *Config) { cfg.RF, cfg.WriteQuorum, cfg.ReadQuorum = 1, 1, 1 })
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	n := lc.Nodes[0]
	cli := rpc.NewClient(rpc.NewTCPTransport(), rpc.Config{})
	defer cli.Close()

	// An older node: the one-at-a-time methods only, over the same store.
	old := rpc.NewServer(rpc.NewTCPTransport(), rpc.Config{})
	defer old.Close()
	cluster.Handle(old, wire.MethodDeclare, func(ctx context.Context, req *wire.TypeReq) (*wire.TypeResp, error) {
		d, err := n.local.DeclareSeries(ctx, req.Key, store.Decl{Type: req.Type, Quantum: quanta.Quantum(req.Quantum), NoQuantum: req.NoQuantum})
		if err != nil {
			return nil, err
		}
		return cluster.TypeResp(d, true), nil
	})
	cluster.Handle(old, wire.MethodPostingsMerge, func(ctx context.Context, req *wire.PostingsMergeReq) (*struct{}, error) {
		return &struct{}{}, n.local.MergePostings(ctx, catalog.Tag{K: req.K, V: req.V}, wire.ToMembers(req.Members))
	})
	cluster.Handle(old, wire.MethodEntryMerge, func(ctx context.Context, req *wire.EntriesMsg) (*wire.EntriesMsg, error) {
		es, err := req.Decode()
		if err != nil {
			return nil, err
		}
		out, err := n.local.MergeEntries(ctx, es)
		if err != nil {
			return nil, err
		}
		return wire.EncodeEntries(out), nil
	})
	oldAddr, err := old.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.local.DeclareSeries(ctx, "tcp/int", store.Decl{Type: series.Int}); err != nil {
		t.Fatal(err)
	}
	for _, peer := range []dht.Peer{{ID: "new", RPCAddr: n.RPCAddr()}, {ID: "old", RPCAddr: oldAddr.String()}} {
		remote := cluster.NewReplicas("self", nil, cli, 10*time.Second, nil).For(peer)
		keys := []string{"tcp/" + peer.ID + "/a", "tcp/int", "tcp/" + peer.ID + "/b"}
		ds := []store.Decl{{Type: series.Float, Quantum: 60}, {Type: series.Float}, {Type: series.Int}}
		out, errs, err := remote.DeclareMany(ctx, keys, ds)
		if err != nil {
			t.Fatalf("%s node: %v", peer.ID, err)
		}
		var re *rpc.RemoteError
		if errs[0] != nil || errs[2] != nil || out[0].Type != series.Float || out[0].Quantum != 60 || out[2].Type != series.Int {
			t.Fatalf("%s node: %+v, %v", peer.ID, out, errs)
		}
		if !errors.As(errs[1], &re) || re.Code != wire.CodeTypeMismatch {
			t.Fatalf("%s node: floats declared for an int series: %v, want %s", peer.ID, errs[1], wire.CodeTypeMismatch)
		}
		if typ, ok := n.Store().SeriesType(keys[2]); !ok || typ != series.Int {
			t.Fatalf("%s node: %s not declared in the store (%v %v)", peer.ID, keys[2], typ, ok)
		}
		tag := catalog.Tag{K: "via", V: peer.ID}
		lists := []catalog.TagMembers{
			{Tag: tag, Members: []catalog.Member{{Key: keys[0], Version: 2}}},
			{Tag: catalog.Tag{K: "all", V: "x"}, Members: []catalog.Member{{Key: keys[0], Version: 2}, {Key: keys[2], Version: 3}}},
			{Tag: tag, Members: []catalog.Member{{Key: keys[2], Version: 3}}},
		}
		if err := remote.MergePostingsMany(ctx, lists); err != nil {
			t.Fatalf("%s node: %v", peer.ID, err)
		}
		got, err := n.local.Postings(ctx, tag, "", 10)
		if err != nil || len(got) != 2 || got[0].Key != keys[0] || got[1].Key != keys[2] {
			t.Fatalf("%s node: postings of %s: %v, %v", peer.ID, tag, got, err)
		}
		// A new series' postings and entry in one request (wire.MethodCatalogMerge); the
		// older node gets the postings, then the entry.
		key := "tcp/" + peer.ID + "/c"
		e := catalog.Entry{Key: key, Type: series.Float, Created: 4, HasBounds: true, First: 0, Last: 3600e9}
		merged, err := remote.MergeCatalog(ctx, []catalog.TagMembers{{Tag: tag, Members: []catalog.Member{{Key: key, Version: 4}}}}, []catalog.Entry{e})
		if err != nil || len(merged) != 1 || !catalog.Equal(merged[0], e) {
			t.Fatalf("%s node: catalog merge: %+v, %v", peer.ID, merged, err)
		}
		if got, err := n.local.Postings(ctx, tag, keys[2], 10); err != nil || len(got) != 1 || got[0].Key != key {
			t.Fatalf("%s node: postings of %s after %s: %v, %v; want %s", peer.ID, tag, keys[2], got, err, key)
		}
		if got, err := n.local.Entries(ctx, []string{key}); err != nil || len(got) != 1 || !catalog.Equal(got[0], e) {
			t.Fatalf("%s node: entry of %s: %+v, %v", peer.ID, key, got, err)
		}
	}
}
