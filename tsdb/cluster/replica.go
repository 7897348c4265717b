package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Replica is what a coordinator or a repairer asks of one replica. A node reaches itself
// through a local implementation, which calls its store with no encoding, and every
// other node through a remote one over RPC; Replicas picks one per peer. Errors a
// replica answered carry an rpc.RemoteError code (wire.Code…); any other error means it
// did not answer (unreachable, or past its deadline).
type Replica interface {
	DataReplica
	MetaReplica
}

// DataReplica is what a replica serves of the points it holds.
type DataReplica interface {
	// Write stores shards (wire.MethodWrite).
	Write(ctx context.Context, req *wire.WriteReq) (*wire.WriteResp, error)
	// Read reads shards or their digests (wire.MethodRead). The answer holds one result
	// per shard asked, points unpacked into Points.
	Read(ctx context.Context, req *wire.ReadReq) (*wire.ReadResp, error)
	// Agg returns shards' windowed partial aggregates, or only their statistics digests
	// (wire.MethodAgg), windows decoded into Windows.
	Agg(ctx context.Context, req *wire.AggReq) (*wire.AggResp, error)
	// LatestPart returns what Latest needs of this replica in one round trip: the
	// series' entry if entry, and the windows of shards (wire.MethodLatestPart).
	LatestPart(ctx context.Context, key string, entry bool, every int64, shards []wire.ShardAgg) (LatestAnswer, error)
	// DeleteRange deletes points of shards and records tombstones (wire.MethodDeleteRange).
	DeleteRange(ctx context.Context, req *wire.DeleteReq) (*wire.DeleteResp, error)
	// Stats returns the replica's own counters.
	Stats(ctx context.Context) (wire.NodeStats, error)
}

// MetaReplica is what a registry replica serves of the series' metadata: their types
// and their catalog entries and tag index (docs/catalog.md).
type MetaReplica interface {
	// DeclareSeries fixes a series' type and quantum at this registry replica and
	// returns what it holds; a different type fixed earlier fails with
	// wire.CodeTypeMismatch, a different quantum is returned (the first one stays).
	DeclareSeries(ctx context.Context, key string, d store.Decl) (store.Decl, error)
	// DeclareMany declares each keys[i] as ds[i], as DeclareSeries would, and returns
	// each answer or its own error (err: the call failed whole).
	DeclareMany(ctx context.Context, keys []string, ds []store.Decl) (out []store.Decl, errs []error, err error)
	// SeriesDecl returns a series' type and quantum as this registry replica knows them.
	SeriesDecl(ctx context.Context, key string) (d store.Decl, known bool, err error)
	// SeriesDecls is SeriesDecl of many series in one request (wire.MethodTypes): an
	// answer per key, in order; at most wire.MaxTypesPerRequest keys.
	SeriesDecls(ctx context.Context, keys []string) ([]KnownDecl, error)
	// MergeEntries merges catalog entries at this registry replica and returns the
	// merged ones, in order (wire.MethodEntryMerge).
	MergeEntries(ctx context.Context, es []catalog.Entry) ([]catalog.Entry, error)
	// Entries returns the entries of keys this replica holds (wire.MethodEntryGet).
	Entries(ctx context.Context, keys []string) ([]catalog.Entry, error)
	// MergePostings merges members into a tag's posting list (wire.MethodPostingsMerge).
	MergePostings(ctx context.Context, tag catalog.Tag, ms []catalog.Member) error
	// MergePostingsMany merges members into many posting lists at once, all stored or,
	// on an error, none (wire.MethodPostingsMergeMany).
	MergePostingsMany(ctx context.Context, lists []catalog.TagMembers) error
	// MergeCatalog merges members into posting lists and merges catalog entries at this
	// replica, all stored at once or, on an error, none, and returns the merged entries
	// in order (wire.MethodCatalogMerge).
	MergeCatalog(ctx context.Context, lists []catalog.TagMembers, es []catalog.Entry) ([]catalog.Entry, error)
	// Postings reads a page of a tag's posting list (wire.MethodPostings).
	Postings(ctx context.Context, tag catalog.Tag, after string, limit int) ([]catalog.Member, error)
	// Listing answers the catalog part of a listing of the series any of qs selects in
	// one request: the posting pages this replica's own catalog.Candidates read and the
	// entries it holds of the candidates (wire.MethodListing).
	Listing(ctx context.Context, qs []catalog.Query) (wire.Listing, error)
	// Shape summarises the live entries q selects that this replica holds
	// (wire.MethodShape).
	Shape(ctx context.Context, q catalog.ShapeQuery) (catalog.Shape, error)
}

// Local is the replica that is this node, as its own coordinator reaches it: beside
// Replica, it answers a page of a long read into buffers the coordinator reuses, and
// yields the core between shards as the page asks (longread.go) — what a remote
// replica is told by a request of its own.
type Local interface {
	Replica
	// ReadInto is Read answering in out when it has a result per shard, else in a new
	// slice, calling yield (when not nil) with each shard's index once it has answered it.
	ReadInto(ctx context.Context, req *wire.ReadReq, out []wire.ShardResult, yield func(i int)) (*wire.ReadResp, error)
	// AggRefs is Agg of shards whose store references refs the caller computed (no ID
	// to compute or check), answering in out when it has a result per shard, else in
	// a new slice, calling yield (when not nil) with each shard's index.
	AggRefs(ctx context.Context, every int64, shards []wire.ShardAgg, refs []store.ShardRef, out []wire.ShardAggResult, yield func(i int)) (*wire.AggResp, error)
}

// Replicas resolves a peer to the Replica that reaches it.
type Replicas interface {
	For(p dht.Peer) Replica
	// Local returns this node's own replica, which For(self) also returns; nil where
	// this node holds none (tests that place every replica elsewhere).
	Local() Local
}

// PeerReplicas reaches this node locally and every other over RPC.
type PeerReplicas struct {
	self    string // peer ID of this node
	local   Local
	cli     *rpc.Client
	timeout time.Duration
	failed  FailureReporter // nil: nobody to tell

	// remotes holds the Replica of each peer called, boxed once: boxing a new
	// remoteReplica on every call was an allocation per replica of every write.
	// At most maxCachedReplicas; past that it starts again empty.
	mu      sync.RWMutex
	remotes map[string]Replica
}

// maxCachedReplicas bounds PeerReplicas' cache: the peers of a large cluster, and
// those that came and went, fit many times over.
const maxCachedReplicas = 4096

func (r *PeerReplicas) Local() Local { return r.local }

func (r *PeerReplicas) For(p dht.Peer) Replica {
	if p.ID == r.self {
		return r.local
	}
	r.mu.RLock()
	c, ok := r.remotes[p.ID]
	r.mu.RUnlock()
	if ok && c.(remoteReplica).peer == p { // the same address: a restarted peer may have moved
		return c
	}
	c = remoteReplica{peer: p, cli: r.cli, timeout: r.timeout, failed: r.failed}
	r.mu.Lock()
	if r.remotes == nil || len(r.remotes) >= maxCachedReplicas {
		r.remotes = make(map[string]Replica)
	}
	r.remotes[p.ID] = c
	r.mu.Unlock()
	return c
}

// FailureReporter is implemented by a Placement that learns liveness from the calls
// made to its peers (dht.Node in kademlia routing mode): every replica call that could
// not reach its peer is reported, so that the placement stops counting the peer an
// owner and looks the replica set up again.
type FailureReporter interface {
	ReportFailure(p dht.Peer)
}

// remoteReplica calls one peer over RPC, each call bounded by timeout.
type remoteReplica struct {
	peer    dht.Peer
	cli     *rpc.Client
	timeout time.Duration
	failed  FailureReporter // nil: nobody to tell
}

func (r remoteReplica) invoke(ctx context.Context, method string, req, resp any) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	err := rpc.Invoke(ctx, r.cli, r.peer.RPCAddr, method, req, resp)
	if r.failed != nil && errors.Is(err, rpc.ErrUnreachable) {
		r.failed.ReportFailure(r.peer)
	}
	return err
}

// AsyncWriter is a Replica that can start a write and return at once, with no
// goroutine of its own while the write is under way (remoteReplica, over
// rpc.Client.Go): what a coordinator uses to write to several replicas at once.
type AsyncWriter interface {
	// WriteAsync starts Write(req) bounded by the replica's call timeout; done
	// receives its outcome exactly once, possibly before WriteAsync returns. done
	// must not block. body, if not nil, is req's encoding (wire.EncodeWriteReq),
	// made once for every replica a write goes to.
	WriteAsync(req *wire.WriteReq, body []byte, done func(*wire.WriteResp, error))
}

func (r remoteReplica) WriteAsync(req *wire.WriteReq, body []byte, done func(*wire.WriteResp, error)) {
	if body == nil {
		var err error
		if body, err = wire.EncodeWriteReq(req); err != nil {
			done(nil, err)
			return
		}
	}
	r.cli.Go(r.peer.RPCAddr, wire.MethodWrite, body, r.timeout, func(out []byte, err error) {
		if err != nil {
			if r.failed != nil && errors.Is(err, rpc.ErrUnreachable) {
				go r.failed.ReportFailure(r.peer) // done must not block
			}
			done(nil, err)
			return
		}
		var resp wire.WriteResp
		if err := wire.DecodeWriteResp(out, &resp); err != nil {
			// As rpc.Invoke: a bad response is no bad request of the caller's.
			done(nil, fmt.Errorf("rpc: response of %s from %s: %v", wire.MethodWrite, r.peer.RPCAddr, err))
			return
		}
		done(&resp, nil)
	})
}

func (r remoteReplica) Write(ctx context.Context, req *wire.WriteReq) (*wire.WriteResp, error) {
	var resp wire.WriteResp
	if err := r.invoke(ctx, wire.MethodWrite, req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// answered checks that a replica answered each of the asked shards and unpacks each
// answer's points: a short or undecodable answer counts as no answer.
func (r remoteReplica) answered(asked, got int, unpack func(i int) error) error {
	if got != asked {
		return rpc.Errorf(wire.CodeUnavailable, "replica %s answered %d of %d shards", r.peer.RPCAddr, got, asked)
	}
	for i := 0; i < got; i++ {
		if err := unpack(i); err != nil {
			return rpc.Errorf(wire.CodeUnavailable, "replica %s: %v", r.peer.RPCAddr, err)
		}
	}
	return nil
}

func (r remoteReplica) Read(ctx context.Context, req *wire.ReadReq) (*wire.ReadResp, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	out, err := r.cli.Call(ctx, r.peer.RPCAddr, wire.MethodRead, wire.EncodeReadReq(req))
	if err != nil {
		if r.failed != nil && errors.Is(err, rpc.ErrUnreachable) {
			r.failed.ReportFailure(r.peer)
		}
		return nil, err
	}
	var resp wire.ReadResp
	if err := wire.DecodeReadResp(out, &resp); err != nil {
		// As rpc.Invoke: a bad response is no bad request of the caller's.
		return nil, fmt.Errorf("rpc: response of %s from %s: %v", wire.MethodRead, r.peer.RPCAddr, err)
	}
	// Each answer's packed form stays beside its points: a coordinator forwards it to
	// a thin client as it came where it has nothing to merge (readparts.go).
	if err := r.answered(len(req.Shards), len(resp.Shards), func(i int) error {
		s := &resp.Shards[i]
		packed := s.Packed
		err := s.Unpack()
		s.Packed = packed
		return err
	}); err != nil {
		return nil, err
	}
	return &resp, nil
}

func (r remoteReplica) DeclareSeries(ctx context.Context, key string, d store.Decl) (store.Decl, error) {
	var resp wire.TypeResp
	req := &wire.TypeReq{Key: key, Type: d.Type, Quantum: int64(d.Quantum), NoQuantum: d.NoQuantum}
	if err := r.invoke(ctx, wire.MethodDeclare, req, &resp); err != nil {
		return store.Decl{}, err
	}
	return DeclOf(&resp), nil
}

func (r remoteReplica) DeclareMany(ctx context.Context, keys []string, ds []store.Decl) ([]store.Decl, []error, error) {
	req := &wire.DeclareManyReq{Items: make([]wire.TypeReq, len(keys))}
	for i, k := range keys {
		req.Items[i] = wire.TypeReq{Key: k, Type: ds[i].Type, Quantum: int64(ds[i].Quantum), NoQuantum: ds[i].NoQuantum}
	}
	var resp wire.DeclareManyResp
	err := r.invoke(ctx, wire.MethodDeclareMany, req, &resp)
	var re *rpc.RemoteError
	if errors.As(err, &re) && re.Code == rpc.CodeUnknownMethod {
		return declareEach(ctx, r, keys, ds)
	}
	if err != nil {
		return nil, nil, err
	}
	if len(resp.Items) != len(keys) || len(resp.Codes) != len(keys) || len(resp.Msgs) != len(keys) {
		return nil, nil, rpc.Errorf(wire.CodeUnavailable, "replica %s: %d answers to %d declarations", r.peer.RPCAddr, len(resp.Items), len(keys))
	}
	out, errs := make([]store.Decl, len(keys)), make([]error, len(keys))
	for i := range keys {
		out[i] = DeclOf(&resp.Items[i])
		if resp.Codes[i] != "" {
			errs[i] = &rpc.RemoteError{Code: resp.Codes[i], Msg: resp.Msgs[i]}
		}
	}
	return out, errs, nil
}

// declareEach declares each series alone (a replica that predates DeclareMany).
func declareEach(ctx context.Context, r Replica, keys []string, ds []store.Decl) ([]store.Decl, []error, error) {
	out, errs := make([]store.Decl, len(keys)), make([]error, len(keys))
	for i, k := range keys {
		out[i], errs[i] = r.DeclareSeries(ctx, k, ds[i])
	}
	return out, errs, nil
}

func (r remoteReplica) SeriesDecl(ctx context.Context, key string) (store.Decl, bool, error) {
	var resp wire.TypeResp
	if err := r.invoke(ctx, wire.MethodType, &wire.TypeReq{Key: key}, &resp); err != nil {
		return store.Decl{}, false, err
	}
	return DeclOf(&resp), resp.Known, nil
}

// DeclOf is the declaration a registry replica's answer states.
func DeclOf(resp *wire.TypeResp) store.Decl {
	return store.Decl{Type: resp.Type, Quantum: quanta.Quantum(resp.Quantum), NoQuantum: resp.NoQuantum}
}

// TypeResp is a registry replica's answer stating d.
func TypeResp(d store.Decl, known bool) *wire.TypeResp {
	return &wire.TypeResp{Known: known, Type: d.Type, Quantum: int64(d.Quantum), NoQuantum: d.NoQuantum}
}

func (r remoteReplica) Stats(ctx context.Context) (wire.NodeStats, error) {
	var s wire.NodeStats
	err := r.invoke(ctx, wire.MethodStats, &struct{}{}, &s)
	return s, err
}

// Agg asks a remote replica: one series' shards packed (wire.MethodAggSeries), or, when
// the shards name several series or the replica does not know that method,
// wire.MethodAgg.
func (r remoteReplica) Agg(ctx context.Context, req *wire.AggReq) (*wire.AggResp, error) {
	if len(req.Shards) > 0 && OneSeries(req.Shards) {
		var resp wire.AggSeriesResp
		sreq := &wire.AggSeriesReq{Key: req.Shards[0].Key, Every: req.Every, Shards: wire.AppendAggSpans(nil, req.Shards), Q: req.Shards[0].Q}
		err := r.invoke(ctx, wire.MethodAggSeries, sreq, &resp)
		var re *rpc.RemoteError
		switch {
		case err == nil:
			shards, err := wire.DecodeAggResults(resp.Shards)
			if err != nil {
				return nil, rpc.Errorf(wire.CodeUnavailable, "replica %s: %v", r.peer.RPCAddr, err)
			}
			if err := r.answered(len(req.Shards), len(shards), func(int) error { return nil }); err != nil {
				return nil, err
			}
			return &wire.AggResp{Shards: shards}, nil
		case !errors.As(err, &re) || re.Code != rpc.CodeUnknownMethod:
			return nil, err
		}
		// An older node: ask it the other way.
	}
	var resp wire.AggResp
	if err := r.invoke(ctx, wire.MethodAgg, req, &resp); err != nil {
		return nil, err
	}
	if err := r.answered(len(req.Shards), len(resp.Shards), func(i int) error { return resp.Shards[i].Unpack() }); err != nil {
		return nil, err
	}
	return &resp, nil
}

// OneSeries reports whether shards all name one series (and so one quantum length).
func OneSeries(shards []wire.ShardAgg) bool {
	for i := range shards {
		if shards[i].Key != shards[0].Key || shards[i].Q != shards[0].Q {
			return false
		}
	}
	return true
}

func (r remoteReplica) MergeEntries(ctx context.Context, es []catalog.Entry) ([]catalog.Entry, error) {
	var resp wire.EntriesMsg
	if err := r.invoke(ctx, wire.MethodEntryMerge, wire.EncodeEntries(es), &resp); err != nil {
		return nil, err
	}
	out, err := resp.Decode()
	if err != nil {
		return nil, rpc.Errorf(wire.CodeUnavailable, "replica %s: %v", r.peer.RPCAddr, err)
	}
	return out, nil
}

func (r remoteReplica) Entries(ctx context.Context, keys []string) ([]catalog.Entry, error) {
	var resp wire.EntriesMsg
	if err := r.invoke(ctx, wire.MethodEntryGet, &wire.KeysReq{Keys: keys}, &resp); err != nil {
		return nil, err
	}
	out, err := resp.Decode()
	if err != nil {
		return nil, rpc.Errorf(wire.CodeUnavailable, "replica %s: %v", r.peer.RPCAddr, err)
	}
	return out, nil
}

func (r remoteReplica) MergePostings(ctx context.Context, tag catalog.Tag, ms []catalog.Member) error {
	return r.invoke(ctx, wire.MethodPostingsMerge, &wire.PostingsMergeReq{K: tag.K, V: tag.V, Members: wire.FromMembers(ms)}, &struct{}{})
}

func (r remoteReplica) MergePostingsMany(ctx context.Context, lists []catalog.TagMembers) error {
	err := r.invoke(ctx, wire.MethodPostingsMergeMany, wire.EncodePostingsMergeMany(lists), &struct{}{})
	var re *rpc.RemoteError
	if !errors.As(err, &re) || re.Code != rpc.CodeUnknownMethod {
		return err
	}
	// A replica that predates the method: each list alone.
	for _, l := range lists {
		if err := r.MergePostings(ctx, l.Tag, l.Members); err != nil {
			return err
		}
	}
	return nil
}

func (r remoteReplica) MergeCatalog(ctx context.Context, lists []catalog.TagMembers, es []catalog.Entry) ([]catalog.Entry, error) {
	var resp wire.EntriesMsg
	err := r.invoke(ctx, wire.MethodCatalogMerge, wire.EncodeCatalogMerge(lists, es), &resp)
	var re *rpc.RemoteError
	if errors.As(err, &re) && re.Code == rpc.CodeUnknownMethod {
		// A replica that predates the method: the postings, then the entries.
		if err := r.MergePostingsMany(ctx, lists); err != nil {
			return nil, err
		}
		return r.MergeEntries(ctx, es)
	}
	if err != nil {
		return nil, err
	}
	out, err := resp.Decode()
	if err == nil && len(out) != len(es) {
		err = fmt.Errorf("%d entries in the answer to %d", len(out), len(es))
	}
	if err != nil {
		return nil, rpc.Errorf(wire.CodeUnavailable, "replica %s: %v", r.peer.RPCAddr, err)
	}
	return out, nil
}

func (r remoteReplica) Listing(ctx context.Context, qs []catalog.Query) (wire.Listing, error) {
	var resp wire.ListingResp
	if err := r.invoke(ctx, wire.MethodListing, wire.EncodeListingReq(qs), &resp); err != nil {
		return wire.Listing{}, err
	}
	l, err := resp.Decode()
	if err == nil {
		for _, p := range l.Pages {
			if err = validateMembers(p.Members); err != nil {
				break
			}
		}
	}
	if err != nil {
		return wire.Listing{}, rpc.Errorf(wire.CodeUnavailable, "replica %s: %v", r.peer.RPCAddr, err)
	}
	return l, nil
}

func validateMembers(ms []catalog.Member) error {
	for _, m := range ms {
		if err := catalog.ValidateMember(m); err != nil {
			return err
		}
	}
	return nil
}

func (r remoteReplica) Postings(ctx context.Context, tag catalog.Tag, after string, limit int) ([]catalog.Member, error) {
	var resp wire.PostingsResp
	if err := r.invoke(ctx, wire.MethodPostings, &wire.PostingsReq{K: tag.K, V: tag.V, After: after, Limit: limit}, &resp); err != nil {
		return nil, err
	}
	ms := wire.ToMembers(resp.Members)
	if err := validateMembers(ms); err != nil {
		return nil, rpc.Errorf(wire.CodeUnavailable, "replica %s: %v", r.peer.RPCAddr, err)
	}
	return ms, nil
}

func (r remoteReplica) Shape(ctx context.Context, q catalog.ShapeQuery) (catalog.Shape, error) {
	var resp wire.ShapeResp
	if err := r.invoke(ctx, wire.MethodShape, &wire.ShapeReq{Prefix: q.Prefix, DB: q.DB, Measurement: q.Measurement, ValuesOf: q.ValuesOf}, &resp); err != nil {
		return catalog.Shape{}, err
	}
	s, err := resp.Decode()
	if err != nil {
		return catalog.Shape{}, rpc.Errorf(wire.CodeUnavailable, "replica %s: %v", r.peer.RPCAddr, err)
	}
	return s, nil
}

func (r remoteReplica) DeleteRange(ctx context.Context, req *wire.DeleteReq) (*wire.DeleteResp, error) {
	var resp wire.DeleteResp
	if err := r.invoke(ctx, wire.MethodDeleteRange, req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// LatestAnswer is what one replica said in Latest's round.
type LatestAnswer struct {
	Entry  catalog.Entry
	Held   bool // the replica holds the entry (asked for it)
	Shards []wire.ShardAggResult
}

// LatestPart implements Replica: one request (wire.MethodLatestPart), or, to a node
// that does not know that method, the two parts separately (LatestInParts).
func (r remoteReplica) LatestPart(ctx context.Context, key string, entry bool, every int64, shards []wire.ShardAgg) (LatestAnswer, error) {
	a, err := r.latestPart(ctx, key, entry, every, shards)
	var re *rpc.RemoteError
	if err != nil && errors.As(err, &re) && re.Code == rpc.CodeUnknownMethod {
		return LatestInParts(ctx, r, key, entry, every, shards)
	}
	return a, err
}

// LatestInParts answers Replica.LatestPart by asking rep for its two parts
// separately: the series' entry if entry (Entries), and the windows of shards (Agg).
func LatestInParts(ctx context.Context, rep interface {
	Entries(ctx context.Context, keys []string) ([]catalog.Entry, error)
	Agg(ctx context.Context, req *wire.AggReq) (*wire.AggResp, error)
}, key string, entry bool, every int64, shards []wire.ShardAgg) (LatestAnswer, error) {
	var a LatestAnswer
	if entry {
		es, err := rep.Entries(ctx, []string{key})
		if err != nil {
			return a, err
		}
		for _, e := range es {
			if e.Key == key {
				a.Entry, a.Held = e, true
			}
		}
	}
	if len(shards) > 0 {
		resp, err := rep.Agg(ctx, &wire.AggReq{Every: every, Shards: shards})
		if err != nil {
			return a, err
		}
		a.Shards = resp.Shards
	}
	return a, nil
}

// latestPart asks a remote replica in one request (wire.MethodLatestPart).
func (r remoteReplica) latestPart(ctx context.Context, key string, entry bool, every int64, shards []wire.ShardAgg) (LatestAnswer, error) {
	var a LatestAnswer
	var resp wire.LatestPartResp
	req := &wire.LatestPartReq{Key: key, Entry: entry, Every: every, Shards: wire.AppendAggSpans(nil, shards)}
	if len(shards) > 0 {
		req.Q = shards[0].Q // one series: one quantum length
	}
	if err := r.invoke(ctx, wire.MethodLatestPart, req, &resp); err != nil {
		return a, err
	}
	if entry && len(resp.Entry) > 0 {
		e, err := catalog.DecodeEntry(resp.Entry)
		if err != nil {
			return a, rpc.Errorf(wire.CodeUnavailable, "replica %s: %v", r.peer.RPCAddr, err)
		}
		a.Entry, a.Held = e, true
	}
	res, err := wire.DecodeAggResults(resp.Shards)
	if err != nil {
		return a, rpc.Errorf(wire.CodeUnavailable, "replica %s: %v", r.peer.RPCAddr, err)
	}
	if err := r.answered(len(shards), len(res), func(int) error { return nil }); err != nil {
		return a, err
	}
	a.Shards = res
	return a, nil
}

// NewReplicas returns the Replicas of a node whose peer ID is self: local for itself,
// and every other peer over cli, each call bounded by timeout. failed, when not nil,
// is told of every peer a call could not reach.
func NewReplicas(self string, local Local, cli *rpc.Client, timeout time.Duration, failed FailureReporter) *PeerReplicas {
	return &PeerReplicas{self: self, local: local, cli: cli, timeout: timeout, failed: failed}
}
