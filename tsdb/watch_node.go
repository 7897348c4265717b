package tsdb

import (
	"context"
	"errors"
	"sync"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/client"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/coord"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/watch"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Live subscriptions (package watch): the node builds the hub over its coordinator,
// registers its write hook and serves its methods.

// assembleWatch builds the node's subscription hub and has the coordinator tell it
// every write it stored.
func (n *Node) assembleWatch() {
	n.watch = watch.New(watch.Config{
		Self: n.dht.Self().RPCAddr,
		Peers: func() []string {
			live := n.dht.Live()
			addrs := make([]string, len(live))
			for i, p := range live {
				addrs[i] = p.RPCAddr
			}
			return addrs
		},
		Source: watchSource{n.coord},
		Call: func(ctx context.Context, addr, method string, req, resp any) error {
			return rpc.Invoke(ctx, n.cli, addr, method, req, resp)
		},
		MaxFuture: n.cfg.MaxFuture,
		Log:       n.log,
	})
	n.coord.OnStored(func(_ context.Context, puts []coord.SeriesPut, res []coord.SeriesResult) {
		for i := range puts {
			if res[i].Err == nil && res[i].Stored > 0 {
				n.watch.Stored(puts[i].Key, puts[i].Points)
			}
		}
	})
}

// registerWatch registers the subscription methods.
func (n *Node) registerWatch() {
	cluster.Handle(n.srv, wire.MethodWatchOpen, func(ctx context.Context, req *wire.WatchOpenReq) (*wire.WatchOpenResp, error) {
		id, err := n.watch.Open(ctx, req)
		if err != nil {
			return nil, err
		}
		return &wire.WatchOpenResp{ID: id}, nil
	})
	// A poll and its answer are encoded by hand (wire.EncodeWatchNextResp,
	// wire.DecodeWatchNextReq): a session polls after each notification, naming every
	// subscription it holds.
	// The request is decoded into one of the last polls' (nextReqs), into its
	// cursors' array: Hub.Next keeps nothing of it.
	n.srv.HandleDecoded(wire.MethodWatchNext, (*wire.WatchNextReq)(nil), func(ctx context.Context, b []byte) ([]byte, error) {
		req := nextReqs.Get().(*wire.WatchNextReq)
		defer func() {
			if cap(req.Cursors) <= watch.DefaultMaxSubscriptions { // not a hostile poll's array
				nextReqs.Put(req)
			}
		}()
		if err := wire.DecodeWatchNextReq(b, req); err != nil {
			return nil, rpc.Errorf(wire.CodeBadInput, "%s: %v", wire.MethodWatchNext, err)
		}
		resp, err := n.watch.Next(ctx, req)
		if err != nil {
			return nil, err
		}
		return wire.EncodeWatchNextResp(resp)
	})
	cluster.Handle(n.srv, wire.MethodWatchInterest, func(_ context.Context, req *wire.WatchInterestReq) (*struct{}, error) {
		return &struct{}{}, n.watch.Interest(req)
	})
	// A notification, one a written point of a watched series, is decoded by hand
	// (wire.DecodeWatchNotifyReq). It is not taken on the connection's reader
	// (rpc.Server.HandleInline): the coordinator's writes to this replica come on the
	// same connection, and would wait behind it.
	n.srv.HandleDecoded(wire.MethodWatchNotify, (*wire.WatchNotifyReq)(nil), func(_ context.Context, b []byte) ([]byte, error) {
		var req wire.WatchNotifyReq
		if err := wire.DecodeWatchNotifyReq(b, &req); err != nil {
			return nil, rpc.Errorf(wire.CodeBadInput, "%s: %v", wire.MethodWatchNotify, err)
		}
		n.watch.Notify(&req)
		return emptyMap, nil
	})
}

// nextReqs holds the polls decoded before, for their cursors' arrays.
var nextReqs = sync.Pool{New: func() any { return new(wire.WatchNextReq) }}

// emptyMap is the msgpack encoding of an empty map: what rpc.Encode makes of
// &struct{}{}, the answer of a method that answers nothing.
var emptyMap = []byte{0x80}

// Subscribe is the thin client's Subscribe (client.Client.Subscribe) through this
// node, as an application's would be: what the node's HTTP stream serves. Should this
// node fail, the subscription moves to another node.
func (n *Node) Subscribe(ctx context.Context, sel client.Selector, from int64) (<-chan client.Run, *client.Subscription) {
	n.watchCli.once.Do(func() {
		var err error
		n.watchCli.c, err = client.New([]string{n.dht.Self().RPCAddr}, client.Config{RPC: n.cfg.RPC, Transport: n.cfg.Transport})
		if err != nil { // only for a configuration Start refused already
			panic(err)
		}
	})
	return n.watchCli.c.Subscribe(ctx, sel, from)
}

// watchClient is the node's own thin client of its subscriptions, made at the first
// Subscribe.
type watchClient struct {
	once sync.Once
	c    *client.Client
}

// closeWatch stops the hub and the node's own client of it.
func (n *Node) closeWatch() {
	n.watch.Close()
	n.watchCli.once.Do(func() {}) // none made from now on
	if n.watchCli.c != nil {
		n.watchCli.c.Close()
	}
}

// Watch returns the node's subscription hub.
func (n *Node) Watch() *watch.Hub { return n.watch }

// watchSource is what subscriptions read of the cluster, through the coordinator.
type watchSource struct{ c *coord.Coordinator }

func (s watchSource) History(ctx context.Context, key string, from, to int64) (series.Points, error) {
	res, err := s.c.Get(ctx, key, from, to, GetOptions{})
	var re *rpc.RemoteError
	if errors.As(err, &re) && re.Code == CodeUnknownSeries {
		return series.Points{}, nil
	}
	return res.Points, err
}

func (s watchSource) Bounds(ctx context.Context, key string, from, to int64) (int64, int64, bool, error) {
	b, err := s.c.Bounds(ctx, key, from, to)
	var re *rpc.RemoteError
	if errors.As(err, &re) && re.Code == CodeUnknownSeries {
		return 0, 0, false, nil
	}
	return b.First, b.Last, b.Found, err
}

// HistoryMany reads through coord.HistoryMany: the catalog entries of all the series
// in one request per registry replica, then the points of those whose entries say
// they may have some in their ranges, together. maxPoints becomes a bound of each
// series' answer in bytes, generous for floats: the hub checks the points.
func (s watchSource) HistoryMany(ctx context.Context, rs []watch.Range, maxPoints int) ([]watch.RangeResult, error) {
	items := make([]coord.SeriesRange, len(rs))
	for i, r := range rs {
		items[i] = coord.SeriesRange{Key: r.Key, From: r.From, To: r.To}
	}
	res, err := s.c.HistoryMany(ctx, items, GetOptions{MaxBytes: 64 + 32*maxPoints})
	if err != nil {
		return nil, err
	}
	out := make([]watch.RangeResult, len(res))
	for i, r := range res {
		out[i] = watch.RangeResult{Points: r.Points, Err: r.Err}
	}
	return out, nil
}

func (s watchSource) Select(ctx context.Context, q catalog.Query, known func(string) bool) ([]string, error) {
	if known != nil {
		return s.c.SeriesNew(ctx, q, known)
	}
	entries, err := s.c.Series(ctx, q)
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(entries))
	for i, e := range entries {
		keys[i] = e.Key
	}
	return keys, nil
}
