package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/cluster/clustertest"
	"github.com/tsdht/tsdht/tsdb/replica"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// SeriesDecls over TCP answers as SeriesDecl of each key does: from a node that
// serves tsdb.types in one request, and from an older node that serves only
// tsdb.type, key by key; more keys than a request holds are refused before sending.
func TestRemoteSeriesDecls(t *testing.T) {
	st := store.NewMem()
	for k, d := range map[string]store.Decl{"f": {Type: series.Float}, "q": {Type: series.Int, Quantum: 3600},
		"a": {Type: series.String, NoQuantum: true}} {
		if _, err := st.DeclareSeries(k, d); err != nil {
			t.Fatal(err)
		}
	}
	local := replica.New(replica.Config{Store: st, Quantum: 10})
	serve := func(register func(*rpc.Server)) dht.Peer {
		srv := rpc.NewServer(rpc.NewTCPTransport(), rpc.DefaultConfig())
		register(srv)
		addr, err := srv.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		return dht.Peer{ID: addr.String(), RPCAddr: addr.String()}
	}
	current := serve(func(srv *rpc.Server) { replica.Register(srv, local) })
	older := serve(func(srv *rpc.Server) {
		cluster.Handle(srv, wire.MethodType, func(ctx context.Context, req *wire.TypeReq) (*wire.TypeResp, error) {
			d, ok, err := local.SeriesDecl(ctx, req.Key)
			return cluster.TypeResp(d, ok), err
		})
	})
	cli := rpc.NewClient(rpc.NewTCPTransport(), rpc.DefaultConfig())
	defer cli.Close()
	reps := cluster.NewReplicas("self", nil, cli, 5*time.Second, nil)
	ctx := context.Background()
	keys := []string{"f", "never", "q", "a", "f"}
	for _, p := range []dht.Peer{current, older} {
		got, err := reps.For(p).SeriesDecls(ctx, keys)
		if err != nil {
			t.Fatalf("%s: %v", p.RPCAddr, err)
		}
		for i, k := range keys {
			d, ok, _ := local.SeriesDecl(ctx, k)
			if want := (cluster.KnownDecl{Decl: d, Known: ok}); got[i] != want {
				t.Errorf("%s: %q: %+v, want %+v", p.RPCAddr, k, got[i], want)
			}
		}
	}
	many := make([]string, wire.MaxTypesPerRequest+1)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	if _, err := reps.For(current).SeriesDecls(ctx, many); clustertest.Code(err) != wire.CodeBadInput {
		t.Errorf("%d keys: %v; want %s", len(many), err, wire.CodeBadInput)
	}
}
