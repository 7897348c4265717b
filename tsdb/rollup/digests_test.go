package rollup

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// A coordinator takes the windows of one home — this node's when it is one — and only
// the digests of the others, over real TCP; when the home asked for windows does not
// answer, another that answered sends them, and the answer is the same.
func TestChunkWindowsFromOneHome(t *testing.T) {
	q := quanta.Quantum(10)
	day, hour, min := int64(24*time.Hour), int64(time.Hour), int64(time.Minute)
	t0 := agg.WindowStart(time.Now().UnixNano(), day) - 3*day
	ids := []string{"me", "h1", "h2"}
	homes := make([]dht.Peer, len(ids))
	rs := make([]*Homes, len(ids))
	var mu sync.Mutex
	asked := map[string][]bool{} // home ID → the Digests flag of each read it got
	srvs := make([]*rpc.Server, len(ids))
	for i, id := range ids {
		src := &fakeSource{q: q, first: t0, last: t0 + hour - 1}
		rs[i] = NewHomes(Config{}.WithDefaults(q), src, Options{Quantum: q, ReadQuorum: 2, Self: id})
		homes[i] = dht.Peer{ID: id}
		if i == 0 {
			continue
		}
		r := rs[i]
		srvs[i] = rpc.NewServer(rpc.NewTCPTransport(), rpc.DefaultConfig())
		cluster.Handle(srvs[i], wire.MethodRollupRead, func(_ context.Context, req *wire.RollupReadReq) (*wire.RollupReadResp, error) {
			mu.Lock()
			asked[id] = append(asked[id], req.Digests)
			mu.Unlock()
			return r.Read(req)
		})
		addr, err := srvs[i].Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srvs[i].Close() })
		homes[i].RPCAddr = addr.String()
	}
	ctx := context.Background()
	for i, r := range rs {
		r.src.(*fakeSource).homes = homes
		readOf(t, r, "k", min, t0, t0+hour) // adopts the series
		if err := r.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		if known, _ := readOf(t, r, "k", min, t0, t0+hour); len(known) != 2 {
			t.Fatalf("home %d vouches for %v after a pass, want the whole hour", i, known)
		}
	}
	cli := rpc.NewClient(rpc.NewTCPTransport(), rpc.DefaultConfig())
	defer cli.Close()
	check := func(name string, c *Client, homes []dht.Peer, rq int, wantFull map[string]int) {
		t.Helper()
		mu.Lock()
		clear(asked)
		mu.Unlock()
		ws, bad, reached := c.chunk(ctx, "k", homes, min, t0, t0+hour, rq)
		if !reached || len(bad) != 0 || len(ws) != 60 {
			t.Fatalf("%s: reached %v, %d windows, bad %v; want 60 windows vouched for", name, reached, len(ws), bad)
		}
		for _, w := range ws {
			if w.Count != 6 || w.Sum != 6 || w.Max != 1 {
				t.Fatalf("%s: window %+v, want the statistics of 6 points of value 1", name, w)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for id, reads := range asked {
			full := 0
			for _, d := range reads {
				if !d {
					full++
				}
			}
			if full != wantFull[id] {
				t.Errorf("%s: home %s was asked for its windows %d times (reads %v), want %d", name, id, full, reads, wantFull[id])
			}
		}
	}
	local := NewClient(rs[0].cfg, cli, 5*time.Second, nil)
	local.ServeLocally("me", rs[0])
	check("this node a home", local, homes, 2, map[string]int{})
	remote := NewClient(rs[0].cfg, cli, 5*time.Second, nil)
	check("remote homes", remote, homes[1:], 2, map[string]int{"h1": 1})
	srvs[1].Close()
	check("the first home down, a quorum of one", remote, homes[1:], 1, map[string]int{"h2": 1})
}
