package tsdb

import (
	"context"
	"encoding/hex"
	"errors"
	"sort"
	"sync"

	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// registerCoordinator registers the methods through which a thin client has any node
// coordinate for it.
func (n *Node) registerCoordinator() {
	cluster.Handle(n.srv, wire.MethodPut, func(ctx context.Context, req *wire.PutReq) (*wire.PutResp, error) {
		r, err := n.coord.PutReport(ctx, req.Key, req.Points, PutOptions{WriteQuorum: req.WriteQuorum, Quantum: quanta.Quantum(req.Quantum), FitQuanta: req.FitQuanta})
		if err != nil {
			return nil, err
		}
		return &wire.PutResp{Stored: r.Stored, WaitedMillis: r.Waited.Milliseconds()}, nil
	})
	cluster.Handle(n.srv, wire.MethodGet, func(ctx context.Context, req *wire.GetReq) (*wire.GetResp, error) {
		// The entry, when asked, is read alongside the points: one round trip.
		var entry []byte
		var entryErr error
		var wg sync.WaitGroup
		if req.Entry {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e, err := n.coord.Entry(ctx, req.Key)
				var re *rpc.RemoteError
				switch {
				case err == nil:
					entry = e.Encode(nil)
				case errors.As(err, &re) && re.Code == CodeUnknownSeries:
					// Points written before the catalog existed: the points alone.
				default:
					entryErr = err
				}
			}()
		}
		// Asked for parts, the answer forwards the replicas' packed answers
		// (readparts.go); Packed then carries only the series' type.
		parts := 0
		if req.Packed && req.Parts {
			parts = max(req.PackedVersion, 1)
		}
		res, packed, err := n.coord.GetParts(ctx, req.Key, req.From, req.To, GetOptions{ReadQuorum: req.ReadQuorum, AllowPartial: req.AllowPartial, MaxBytes: wire.MaxReadAnswerBytes}, parts)
		wg.Wait()
		if err != nil {
			return nil, err
		}
		if entryErr != nil {
			return nil, entryErr
		}
		resp := &wire.GetResp{Partial: res.Partial, Missing: res.Missing, Entry: entry, Parts: packed}
		if req.Packed {
			resp.Packed = series.AppendPackedFor(nil, &res.Points, req.PackedVersion)
		} else {
			resp.Points = res.Points
		}
		return resp, nil
	})
	cluster.Handle(n.srv, wire.MethodLocate, func(ctx context.Context, req *wire.LocateReq) (*wire.LocateResp, error) {
		if len(req.ID) != quanta.IDLen {
			return nil, rpc.Errorf(CodeBadInput, "shard ID of %d bytes; want %d", len(req.ID), quanta.IDLen)
		}
		resp := wire.LocateResp{Routing: n.dht.Routing().String()}
		var peers []dht.Peer
		if req.Trace {
			ps, hops, err := n.dht.LocateTrace(ctx, quanta.ID(req.ID), n.cfg.RF)
			if err != nil {
				return nil, rpc.Errorf(CodeUnavailable, "shard %x: no replica found: %v", req.ID, err)
			}
			peers = ps
			for _, h := range hops {
				resp.Hops = append(resp.Hops, wire.Hop{Round: h.Round, Peer: peerInfo(h.Peer, dht.StateAlive),
					Distance: hex.EncodeToString(h.Distance[:]), Returned: h.Returned, Err: h.Err})
			}
		} else {
			var err error
			if peers, err = n.coord.Locate(ctx, quanta.ID(req.ID)); err != nil {
				return nil, err
			}
		}
		for _, p := range peers {
			resp.Replicas = append(resp.Replicas, peerInfo(p, dht.StateAlive))
		}
		return &resp, nil
	})
	n.registerCatalogCoordinator()
	n.registerDescribe()
	cluster.Handle(n.srv, wire.MethodStatus, func(ctx context.Context, _ *struct{}) (*wire.StatusResp, error) {
		return &wire.StatusResp{Nodes: n.Status(ctx), Routing: n.dht.Routing().String()}, nil
	})
	cluster.Handle(n.srv, wire.MethodDecommission, n.serveDecommission)
	cluster.Handle(n.srv, wire.MethodRefill, n.serveRefill)
}

// serveDecommission hands this node's shards off when it is the node named, and
// forwards the request to the node named otherwise. Once this node has handed off,
// Decommissioned tells the process to leave; the reply goes out before that.
func (n *Node) serveDecommission(ctx context.Context, req *wire.DecommissionReq) (*wire.DecommissionResp, error) {
	self := cluster.NodeID(n.dht.Self())
	if req.NodeID != self {
		for _, m := range n.dht.Members() {
			if cluster.NodeID(m.Peer) != req.NodeID {
				continue
			}
			if m.State != dht.StateAlive && m.State != dht.StateLeaving {
				return nil, rpc.Errorf(CodeUnavailable, "node %s is %s: only a running node can hand its shards off (start it again first)", req.NodeID, m.State)
			}
			var resp wire.DecommissionResp
			if err := rpc.Invoke(ctx, n.cli, m.RPCAddr, wire.MethodDecommission, req, &resp); err != nil {
				return nil, err
			}
			return &resp, nil
		}
		return nil, rpc.Errorf(CodeBadInput, "no member with node ID %q (tsdht status lists them)", req.NodeID)
	}
	resp, err := n.HandOff(ctx)
	if err != nil {
		return nil, rpc.Errorf(CodeUnavailable, "decommission of %s: %v; the node stays a member: repeat the request once its peers are reachable", self, err)
	}
	n.decomOnce.Do(func() { close(n.decommissioned) })
	return &resp, nil
}

func peerInfo(p dht.Peer, state dht.MemberState) PeerInfo {
	return PeerInfo{PeerID: peer.ID(p.ID).String(), NodeID: cluster.NodeID(p), RPCAddr: p.RPCAddr, State: string(state)}
}

// Status asks every member this node knows of for its counters, in parallel, and
// returns them sorted by node ID: what tsdht status shows. A member that could not
// answer has Error set.
func (n *Node) Status(ctx context.Context) []NodeStats {
	members := n.dht.Members()
	out := make([]NodeStats, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		out[i] = NodeStats{PeerInfo: peerInfo(m.Peer, m.State)}
		if m.State == dht.StateDead || m.State == dht.StateLeft || m.State == dht.StateStopped {
			continue
		}
		wg.Add(1)
		go func(i int, p dht.Peer) {
			defer wg.Done()
			s, err := n.replicas.For(p).Stats(ctx)
			if err != nil {
				out[i].Error = err.Error()
				return
			}
			s.State = out[i].State
			out[i] = s
		}(i, m.Peer)
	}
	wg.Wait()
	sort.Slice(out, func(a, b int) bool { return out[a].NodeID < out[b].NodeID })
	return out
}

// registerAnalytics registers the analytics methods a coordinator serves:
// MethodAggregate, MethodLatest and MethodBounds.
func (n *Node) registerAnalytics() {
	cluster.Handle(n.srv, wire.MethodAggregate, func(ctx context.Context, req *wire.AggregateReq) (*wire.AggregateResp, error) {
		res, err := n.coord.Aggregate(ctx, req.Key, req.From, req.To, req.Every, GetOptions{ReadQuorum: req.ReadQuorum, AllowPartial: req.AllowPartial})
		if err != nil {
			return nil, err
		}
		return &wire.AggregateResp{Type: res.Type, Packed: agg.AppendWindowsWire(nil, res.Type, res.Windows),
			Partial: res.Partial, Missing: res.Missing}, nil
	})
	cluster.Handle(n.srv, wire.MethodLatest, func(ctx context.Context, req *wire.LatestReq) (*wire.LatestResp, error) {
		pts, err := n.coord.Latest(ctx, req.Key, req.Since, req.Before)
		if err != nil {
			return nil, err
		}
		return &wire.LatestResp{Point: pts}, nil
	})
	cluster.Handle(n.srv, wire.MethodBounds, func(ctx context.Context, req *wire.BoundsReq) (*wire.BoundsResp, error) {
		resp, err := n.coord.Bounds(ctx, req.Key, req.From, req.To)
		if err != nil {
			return nil, err
		}
		return &resp, nil
	})
}

// registerCatalogCoordinator registers the catalog's coordinator methods.
func (n *Node) registerCatalogCoordinator() {
	cluster.Handle(n.srv, wire.MethodSeries, func(ctx context.Context, req *wire.SeriesReq) (*wire.EntriesMsg, error) {
		match, err := catalog.ParseTags(req.Match...)
		if err != nil {
			return nil, rpc.Errorf(CodeBadInput, "--match: %v", err)
		}
		es, err := n.coord.Series(ctx, catalog.Query{Match: match, Prefix: req.Prefix})
		if err != nil {
			return nil, err
		}
		if len(es) > wire.MaxEntriesPerRequest {
			return nil, rpc.Errorf(CodeBadInput, "%d series selected; one answer carries at most %d: narrow it with --match or --prefix",
				len(es), wire.MaxEntriesPerRequest)
		}
		return wire.EncodeEntries(es), nil
	})
	cluster.Handle(n.srv, wire.MethodMeta, func(ctx context.Context, req *wire.MetaReq) (*wire.EntriesMsg, error) {
		e, err := n.coord.Meta(ctx, req)
		if err != nil {
			return nil, err
		}
		return wire.EncodeEntries([]catalog.Entry{e}), nil
	})
	cluster.Handle(n.srv, wire.MethodDelete, func(ctx context.Context, req *wire.DelReq) (*wire.DelResp, error) {
		shards, err := n.coord.Delete(ctx, req)
		if err != nil {
			return nil, err
		}
		return &wire.DelResp{Shards: shards}, nil
	})
}
