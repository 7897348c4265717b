package tsdb

import (
	"context"
	"encoding/hex"
	"sort"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
)

// registerCoordinator registers the methods through which a thin client has any node
// coordinate for it.
func (n *Node) registerCoordinator() {
	handle(n.srv, methodPut, func(ctx context.Context, req *putReq) (*putResp, error) {
		stored, err := n.coord.Put(ctx, req.Key, req.Points, PutOptions{WriteQuorum: req.WriteQuorum})
		if err != nil {
			return nil, err
		}
		return &putResp{Stored: stored}, nil
	})
	handle(n.srv, methodGet, func(ctx context.Context, req *getReq) (*getResp, error) {
		res, err := n.coord.Get(ctx, req.Key, req.From, req.To, GetOptions{ReadQuorum: req.ReadQuorum, AllowPartial: req.AllowPartial})
		if err != nil {
			return nil, err
		}
		resp := &getResp{Partial: res.Partial, Missing: res.Missing}
		if req.Packed {
			resp.Packed = series.AppendPacked(nil, &res.Points)
		} else {
			resp.Points = res.Points
		}
		return resp, nil
	})
	handle(n.srv, methodLocate, func(_ context.Context, req *locateReq) (*locateResp, error) {
		if len(req.ID) != quanta.IDLen {
			return nil, rpc.Errorf(CodeBadInput, "shard ID of %d bytes; want %d", len(req.ID), quanta.IDLen)
		}
		var resp locateResp
		for _, p := range n.dht.ReplicaSet(quanta.ID(req.ID), n.cfg.RF) {
			resp.Replicas = append(resp.Replicas, peerInfo(p, "alive"))
		}
		return &resp, nil
	})
	handle(n.srv, methodStatus, func(ctx context.Context, _ *struct{}) (*statusResp, error) {
		return n.clusterStatus(ctx), nil
	})
}

func peerInfo(p dht.Peer, state string) PeerInfo {
	return PeerInfo{PeerID: peer.ID(p.ID).String(), NodeID: hex.EncodeToString(p.Key[:]), RPCAddr: p.RPCAddr, State: state}
}

// clusterStatus asks every member memberlist knows for its counters, in parallel.
func (n *Node) clusterStatus(ctx context.Context) *statusResp {
	members := n.dht.Members()
	out := make([]NodeStats, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		out[i] = NodeStats{PeerInfo: peerInfo(m.Peer, m.State)}
		if m.Peer.ID == n.dht.Self().ID {
			out[i] = n.localStats()
			continue
		}
		if m.State == "dead" || m.State == "left" {
			continue
		}
		wg.Add(1)
		go func(i int, p dht.Peer) {
			defer wg.Done()
			cctx, cancel := n.callCtx(ctx)
			defer cancel()
			var s NodeStats
			if err := rpc.Invoke(cctx, n.cli, p.RPCAddr, methodStats, &struct{}{}, &s); err != nil {
				out[i].Error = err.Error()
				return
			}
			s.State = out[i].State
			out[i] = s
		}(i, m.Peer)
	}
	wg.Wait()
	sort.Slice(out, func(a, b int) bool { return out[a].NodeID < out[b].NodeID })
	return &statusResp{Nodes: out}
}
