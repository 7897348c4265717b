package tsdb

import (
	"context"
	"encoding/binary"
	"errors"
	"math"

	"github.com/cespare/xxhash/v2"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
)

// handle registers a typed handler: it decodes the request (rpc.Decode validates every
// declared length first) and encodes the response.
func handle[Req, Resp any](srv *rpc.Server, method string, h func(ctx context.Context, req *Req) (*Resp, error)) {
	srv.Handle(method, func(ctx context.Context, b []byte) ([]byte, error) {
		var req Req
		if err := rpc.Decode(b, &req); err != nil {
			return nil, rpc.Errorf(CodeBadInput, "%s: %v", method, err)
		}
		resp, err := h(ctx, &req)
		if err != nil {
			return nil, err
		}
		return rpc.Encode(resp)
	})
}

// registerReplica registers the methods a node serves as a replica of shards and of
// series metadata.
func (n *Node) registerReplica() {
	handle(n.srv, methodWrite, func(_ context.Context, req *writeReq) (*writeResp, error) {
		return n.serveWrite(req)
	})
	handle(n.srv, methodRead, func(_ context.Context, req *readReq) (*readResp, error) {
		return n.serveRead(req)
	})
	handle(n.srv, methodDeclare, func(_ context.Context, req *typeReq) (*typeResp, error) {
		t, err := n.store.DeclareType(req.Key, req.Type)
		if err != nil {
			return nil, storeError(err)
		}
		return &typeResp{Known: true, Type: t}, nil
	})
	handle(n.srv, methodType, func(_ context.Context, req *typeReq) (*typeResp, error) {
		t, ok := n.store.SeriesType(req.Key)
		return &typeResp{Known: ok, Type: t}, nil
	})
	handle(n.srv, methodStats, func(_ context.Context, _ *struct{}) (*NodeStats, error) {
		s := n.localStats()
		return &s, nil
	})
}

func (n *Node) serveWrite(req *writeReq) (*writeResp, error) {
	stored := 0
	for i := range req.Shards {
		w := &req.Shards[i]
		ref, err := n.checkShard(w.ID, w.Start, w.Key)
		if err != nil {
			return nil, err
		}
		if err := n.store.Append(ref, w.Key, w.Points); err != nil {
			return nil, storeError(err)
		}
		stored += w.Points.Len()
	}
	return &writeResp{Stored: stored}, nil
}

func (n *Node) serveRead(req *readReq) (*readResp, error) {
	resp := &readResp{Shards: make([]shardResult, len(req.Shards))}
	for i := range req.Shards {
		r := &req.Shards[i]
		ref, err := n.checkShard(r.ID, r.Start, r.Key)
		if err != nil {
			return nil, err
		}
		if r.From > r.To {
			return nil, rpc.Errorf(CodeBadInput, "read of %q: from %d is after to %d", r.Key, r.From, r.To)
		}
		res := &resp.Shards[i]
		whole := !r.Strong && r.From <= n.cfg.DHT.Quantum.BeginNanos(r.Start) && r.To >= n.cfg.DHT.Quantum.EndNanos(r.Start)
		if sum, ok := n.store.(summarizer); ok && whole && r.Digest {
			s, held, err := sum.Summary(ref, r.Key)
			if err != nil {
				return nil, storeError(err)
			}
			res.Held, res.Count, res.Hash = held, int(s.Count), summaryHash(s.Count, s.MinT, s.MaxT)
			continue
		}
		pts, held, err := n.store.Read(ref, r.Key, r.From, r.To)
		if err != nil {
			return nil, storeError(err)
		}
		res.Held, res.Count, res.Hash = held, pts.Len(), readDigest(&pts, whole)
		switch {
		case r.Digest:
		case r.Packed:
			res.Packed = series.AppendPacked(nil, &pts)
		default:
			res.Points = pts
		}
	}
	return resp, nil
}

// checkShard refuses a shard whose ID does not belong to its key and quantum under this
// cluster's layout: a confused or hostile peer must not file points under a wrong ID.
func (n *Node) checkShard(id []byte, start int64, key string) (store.ShardRef, error) {
	if err := series.ValidateKey(key); err != nil {
		return store.ShardRef{}, rpc.Errorf(CodeBadInput, "%v", err)
	}
	ref := n.ref(key, start)
	if len(id) != quanta.IDLen || quanta.ID(id) != ref.ID || start%int64(n.cfg.DHT.Quantum) != 0 {
		return store.ShardRef{}, rpc.Errorf(CodeBadInput, "shard %x is not series %q at quantum %d", id, key, start)
	}
	return ref, nil
}

// storeError maps a store failure to an error code a client can act on.
func storeError(err error) error {
	switch {
	case errors.Is(err, series.ErrTypeMismatch):
		return rpc.Errorf(CodeTypeMismatch, "%v", err)
	case errors.Is(err, store.ErrExpired):
		return rpc.Errorf(CodeExpired, "%v", err)
	}
	return rpc.Errorf(CodeUnavailable, "%v", err)
}

// summarizer is a store that can describe a pair without reading it.
type summarizer interface {
	Summary(ref store.ShardRef, key string) (store.Summary, bool, error)
}

// readDigest is the digest a read compares replicas by. For a whole quantum it is the
// pair's summary — count and first and last timestamp — which a replica answers without
// reading a point: missing points (a new owner, a lost write) show in it. A value
// overwritten on one replica only does not; the repairer's strong digests (digest) catch
// that. A partial quantum is read anyway, so it gets the strong digest.
func readDigest(p *series.Points, whole bool) uint64 {
	if !whole {
		return digest(p)
	}
	if p.Len() == 0 {
		return summaryHash(0, 0, 0)
	}
	return summaryHash(int64(p.Len()), p.T[0], p.T[p.Len()-1])
}

func summaryHash(count, minT, maxT int64) uint64 {
	if count == 0 {
		minT, maxT = 0, 0
	}
	var b [24]byte
	binary.LittleEndian.PutUint64(b[:], uint64(count))
	binary.LittleEndian.PutUint64(b[8:], uint64(minT))
	binary.LittleEndian.PutUint64(b[16:], uint64(maxT))
	return xxhash.Sum64(b[:])
}

// digest hashes a replica's answer for one shard so that replicas can be compared
// without shipping their points: equal digests mean equal data.
func digest(p *series.Points) uint64 {
	h := xxhash.New()
	var b [16]byte
	for i := range p.T {
		binary.LittleEndian.PutUint64(b[:8], uint64(p.T[i]))
		switch p.Type {
		case series.Float:
			binary.LittleEndian.PutUint64(b[8:], math.Float64bits(p.F[i]))
			h.Write(b[:])
		case series.Int:
			binary.LittleEndian.PutUint64(b[8:], uint64(p.I[i]))
			h.Write(b[:])
		case series.String:
			h.Write(b[:8])
			h.WriteString(p.S[i])
			h.Write([]byte{0})
		}
	}
	return h.Sum64()
}

func (n *Node) localStats() NodeStats {
	self := n.dht.Self()
	st := n.store.Stats()
	var rs RepairStats
	if n.repair != nil {
		rs = n.repair.stats()
	}
	rs.ReadRepairs = n.coord.readRepairs.Load()
	return NodeStats{
		Repair:    rs,
		PeerInfo:  peerInfo(self, "alive"),
		Shards:    st.Shards,
		Series:    st.Series,
		Points:    st.Points,
		DiskBytes: st.DiskBytes,
		Retention: st.Retention.String(),
		MaxDisk:   st.MaxDisk,
		Oldest:    st.OldestQuantum,
		Dropped:   st.DroppedQuanta,
		Format:    n.cfg.DHT.Format.String(),
		Quantum:   int64(n.cfg.DHT.Quantum),
		RF:        n.cfg.RF,
		Reachable: true,
	}
}
