// Package client is tsdht's thin client: it holds no routing state and has any node of
// the cluster coordinate each request, failing over to the next address when one is
// unreachable. It depends only on rpc, quanta, series, agg and wire, so an application that
// reads or writes series does not pull in the storage engine or the gossip layer.
package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Config configures a Client. The zero value is the default.
type Config struct {
	// Timeout bounds each request, including the coordinator's fan-out. Zero means 30s.
	Timeout time.Duration
	// RPC configures framing and connections; zero fields take rpc's defaults.
	RPC rpc.Config
	// Transport carries RPC; nil means TCP.
	Transport rpc.Transport
	// WatchLinger lets a node hold the points of this client's subscriptions for up to
	// this long after its previous answer to them, to send the points of writes in
	// quick succession in one answer rather than one answer and one poll each: less
	// work for the node, for up to this much more delivery latency. Points that come
	// after a quiet spell of WatchLinger go at once. Zero means none; at most
	// wire.MaxWatchLingerMillis ms, in whole ms (docs/watch.md).
	WatchLinger time.Duration
}

// DefaultConfig returns the client defaults: what the zero Config means.
func DefaultConfig() Config {
	return Config{Timeout: 30 * time.Second, RPC: rpc.DefaultConfig()}
}

// withDefaults returns c with its zero fields set to the defaults.
func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultConfig().Timeout
	}
	if c.Transport == nil {
		c.Transport = rpc.NewTCPTransport()
	}
	return c
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.Timeout < 0 {
		return fmt.Errorf("client timeout %v: must not be negative (0 means the default, 30s)", c.Timeout)
	}
	if c.WatchLinger < 0 || c.WatchLinger > wire.MaxWatchLingerMillis*time.Millisecond {
		return fmt.Errorf("client watch linger %v: want 0 (none) to %v", c.WatchLinger, wire.MaxWatchLingerMillis*time.Millisecond)
	}
	return nil
}

// MaxPutBatch is how many points one put request carries; longer puts are split.
const MaxPutBatch = 50_000

// MaxPutBytes bounds one put request's points (series.Points.WireSize), well inside an
// RPC frame: a put of long strings is split by bytes before it reaches MaxPutBatch.
const MaxPutBytes = 2 << 20

// getWindow is the span of a read's first get request; longer reads are split so that an
// answer stays well inside a frame (20 minutes of 60 Hz floats is about 0.9 MB). An
// answer that still does not fit — long strings, fast series — is asked for again in
// halves; one well below getTarget doubles the next window.
const getWindow = int64(20 * time.Minute)

// getTarget is the answer size the windows aim at; a window whose answer is a quarter of
// it or less is followed by one twice as long.
const getTarget = 1 << 20

// Client is a thin client of a cluster. It is safe for concurrent use.
type Client struct {
	addrs   []string
	rpc     *rpc.Client
	timeout time.Duration
	linger  time.Duration // Config.WatchLinger

	watchMu sync.Mutex
	pollers map[string]*poller // by node address (watch.go)
}

// New returns a client of the nodes at the given RPC addresses. It connects lazily.
func New(addrs []string, cfg Config) (*Client, error) {
	if len(addrs) == 0 {
		return nil, errors.New("no cluster address given")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Client{addrs: addrs, rpc: rpc.NewClient(cfg.Transport, cfg.RPC), timeout: cfg.Timeout, linger: cfg.WatchLinger}, nil
}

// Close closes the client's connections.
func (c *Client) Close() error { return c.rpc.Close() }

// invoke sends one coordinator request to the first node that answers. Only an
// unreachable node moves the request on: any answer, error or not, is the answer.
func (c *Client) invoke(ctx context.Context, method string, req, resp any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var errs []error
	for _, addr := range c.addrs {
		err := rpc.Invoke(ctx, c.rpc, addr, method, req, resp)
		if err == nil || !errors.Is(err, rpc.ErrUnreachable) {
			return err
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	return fmt.Errorf("cluster unreachable: %w", errors.Join(errs...))
}

// Put writes points of one series and returns how many were stored.
func (c *Client) Put(ctx context.Context, key string, pts series.Points, opt wire.PutOptions) (int, error) {
	r, err := c.PutReport(ctx, key, pts, opt)
	return r.Stored, err
}

// PutReport writes like Put and also returns how long the coordinators waited for
// failed replicas to leave placement (WaitedMillis, summed over the requests).
func (c *Client) PutReport(ctx context.Context, key string, pts series.Points, opt wire.PutOptions) (wire.PutResp, error) {
	var total wire.PutResp
	if err := pts.Valid(); err != nil {
		return total, err
	}
	for _, batch := range pts.Batches(MaxPutBatch, MaxPutBytes) {
		var resp wire.PutResp
		req := &wire.PutReq{Key: key, Points: batch, WriteQuorum: opt.WriteQuorum, Quantum: int64(opt.Quantum), FitQuanta: opt.FitQuanta}
		err := c.invoke(ctx, wire.MethodPut, req, &resp)
		for pause := slowDownPause; slowDown(err) && ctx.Err() == nil; pause = min(2*pause, maxSlowDownPause) {
			// The node's budget of new series a second is spent (nothing was stored):
			// the write goes again once it has had time to refill.
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return total, err
			case <-t.C:
			}
			err = c.invoke(ctx, wire.MethodPut, req, &resp)
		}
		total.Stored += resp.Stored
		total.WaitedMillis += resp.WaitedMillis
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// A put refused by its coordinator's budget of new series a second (wire.CodeSlowDown,
// nothing stored) is sent again after slowDownPause, then pauses doubling up to
// maxSlowDownPause, until it is taken or ctx ends: a restore or an import of many
// series then goes at the rate the node takes them.
const (
	slowDownPause    = 250 * time.Millisecond
	maxSlowDownPause = 2 * time.Second
)

func slowDown(err error) bool {
	var re *rpc.RemoteError
	return errors.As(err, &re) && re.Code == wire.CodeSlowDown
}

// Get reads the points of a series with from <= t < to. A range wider than an hour
// is first narrowed to the series' bounds (Clamp).
func (c *Client) Get(ctx context.Context, key string, from, to int64, opt wire.GetOptions) (wire.Result, error) {
	return c.get(ctx, key, from, to, opt, nil)
}

// get reads in windows; entry, if not nil, asks the first window for the series'
// catalog entry and receives it.
func (c *Client) get(ctx context.Context, key string, from, to int64, opt wire.GetOptions, entry func([]byte) error) (wire.Result, error) {
	if from > to {
		return wire.Result{}, fmt.Errorf("%w (from %d > to %d)", quanta.ErrBadRange, from, to)
	}
	from, to, err := c.Clamp(ctx, key, from, to)
	if err != nil {
		return wire.Result{}, err
	}
	var res wire.Result
	var parts []series.Points
	window := getWindow
	for lo := from; ; {
		hi := to
		if hi-lo > window {
			hi = lo + window
		}
		var resp wire.GetResp
		req := &wire.GetReq{Key: key, From: lo, To: hi, ReadQuorum: opt.ReadQuorum, AllowPartial: opt.AllowPartial, Packed: true,
			PackedVersion: series.PackedVersion, Parts: true,
			Entry: entry != nil}
		if err := c.invoke(ctx, wire.MethodGet, req, &resp); err != nil {
			var re *rpc.RemoteError
			tooLarge := errors.Is(err, rpc.ErrFrameTooLarge) || errors.As(err, &re) && re.Code == wire.CodeTooLarge
			if tooLarge && hi-lo > 1 {
				window = (hi - lo) / 2
				continue
			}
			return wire.Result{}, err
		}
		if entry != nil {
			if err := entry(resp.Entry); err != nil {
				return wire.Result{}, fmt.Errorf("read of %q: catalog entry: %w", key, err)
			}
			entry = nil
		}
		if err := resp.Unpack(); err != nil {
			return wire.Result{}, fmt.Errorf("read of %q: %w", key, err)
		}
		res.Points.Type = resp.Points.Type
		parts = append(parts, resp.Points)
		if resp.Points.WireSize() < getTarget/4 && window < math.MaxInt64/2 {
			// A sparse series (a point a minute) would otherwise cost a request per
			// window for what one answer holds: the windows grow while answers are small.
			window *= 2
		}
		res.Partial = res.Partial || resp.Partial
		res.Missing += resp.Missing
		if hi == to {
			break
		}
		lo = hi
	}
	if all := series.Concat(parts...); all.Len() > 0 {
		res.Points = all
	}
	return res, nil
}

// Status returns every member's counters as the first reachable node sees them.
func (c *Client) Status(ctx context.Context) ([]wire.NodeStats, error) {
	var resp wire.StatusResp
	err := c.invoke(ctx, wire.MethodStatus, &struct{}{}, &resp)
	return resp.Nodes, err
}

// Locate returns the replica set of a shard, closest first.
func (c *Client) Locate(ctx context.Context, id quanta.ID) ([]wire.PeerInfo, error) {
	var resp wire.LocateResp
	err := c.invoke(ctx, wire.MethodLocate, &wire.LocateReq{ID: id[:]}, &resp)
	return resp.Replicas, err
}

// Decommission has the node with the given 160-bit ID (40 hex digits, as Status
// reports it) hand all its shards off and leave the cluster for good. It returns once
// the hand-off is done; the node leaves right after.
func (c *Client) Decommission(ctx context.Context, nodeID string) (wire.DecommissionResp, error) {
	var resp wire.DecommissionResp
	err := c.invoke(ctx, wire.MethodDecommission, &wire.DecommissionReq{NodeID: nodeID}, &resp)
	return resp, err
}

// LocateTrace has the node find the replica set of a shard afresh and say how: its
// routing mode and, in kademlia mode, every request of the lookup.
func (c *Client) LocateTrace(ctx context.Context, id quanta.ID) (*wire.LocateResp, error) {
	var resp wire.LocateResp
	if err := c.invoke(ctx, wire.MethodLocate, &wire.LocateReq{ID: id[:], Trace: true}, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// StatusOf is Status, and tells the answering node's routing mode: in kademlia mode
// the nodes listed are what that node knows, not the whole cluster.
func (c *Client) StatusOf(ctx context.Context) (*wire.StatusResp, error) {
	var resp wire.StatusResp
	if err := c.invoke(ctx, wire.MethodStatus, &struct{}{}, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}
