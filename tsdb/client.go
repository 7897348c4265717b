package tsdb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
)

// Client is a thin client: it holds no routing state and has any node of the cluster
// coordinate each request, failing over to the next address when one is unreachable.
type Client struct {
	addrs   []string
	rpc     *rpc.Client
	timeout time.Duration
}

// ClientConfig configures a Client.
type ClientConfig struct {
	// Timeout bounds each request, including the coordinator's fan-out.
	Timeout time.Duration
	// RPC configures framing and connections.
	RPC rpc.Config
	// Transport carries RPC; nil means TCP.
	Transport rpc.Transport
}

// DefaultClientConfig returns the client defaults.
func DefaultClientConfig() ClientConfig {
	return ClientConfig{Timeout: 30 * time.Second, RPC: rpc.DefaultConfig()}
}

// MaxPutBatch is how many points one put request carries; longer puts are split.
const MaxPutBatch = 50_000

// getWindow is the span of one get request; longer reads are split so that an answer
// stays well inside a frame (20 minutes of 60 Hz floats is about 0.9 MB). An answer that
// still does not fit — long strings, fast series — is asked for again in halves.
const getWindow = int64(20 * time.Minute)

// NewClient returns a client of the nodes at the given RPC addresses. It connects lazily.
func NewClient(addrs []string, cfg ClientConfig) (*Client, error) {
	if len(addrs) == 0 {
		return nil, errors.New("no cluster address given")
	}
	if cfg.Transport == nil {
		cfg.Transport = rpc.NewTCPTransport()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultClientConfig().Timeout
	}
	return &Client{addrs: addrs, rpc: rpc.NewClient(cfg.Transport, cfg.RPC), timeout: cfg.Timeout}, nil
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
func (c *Client) Put(ctx context.Context, key string, pts series.Points, opt PutOptions) (int, error) {
	if err := pts.Valid(); err != nil {
		return 0, err
	}
	stored := 0
	for lo := 0; lo < pts.Len(); lo += MaxPutBatch {
		batch := pts.Slice(lo, min(lo+MaxPutBatch, pts.Len()))
		var resp putResp
		err := c.invoke(ctx, methodPut, &putReq{Key: key, Points: batch, WriteQuorum: opt.WriteQuorum}, &resp)
		stored += resp.Stored
		if err != nil {
			return stored, err
		}
	}
	return stored, nil
}

// Get reads the points of a series with from <= t < to.
func (c *Client) Get(ctx context.Context, key string, from, to int64, opt GetOptions) (Result, error) {
	if from > to {
		return Result{}, fmt.Errorf("%w (from %d > to %d)", quanta.ErrBadRange, from, to)
	}
	var res Result
	var parts []series.Points
	window := getWindow
	for lo := from; ; {
		hi := to
		if hi-lo > window {
			hi = lo + window
		}
		var resp getResp
		req := &getReq{Key: key, From: lo, To: hi, ReadQuorum: opt.ReadQuorum, AllowPartial: opt.AllowPartial, Packed: true}
		if err := c.invoke(ctx, methodGet, req, &resp); err != nil {
			if errors.Is(err, rpc.ErrFrameTooLarge) && hi-lo > 1 {
				window = (hi - lo) / 2
				continue
			}
			return Result{}, err
		}
		if err := resp.unpack(); err != nil {
			return Result{}, fmt.Errorf("read of %q: %w", key, err)
		}
		res.Points.Type = resp.Points.Type
		parts = append(parts, resp.Points)
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
func (c *Client) Status(ctx context.Context) ([]NodeStats, error) {
	var resp statusResp
	err := c.invoke(ctx, methodStatus, &struct{}{}, &resp)
	return resp.Nodes, err
}

// Locate returns the replica set of a shard, closest first.
func (c *Client) Locate(ctx context.Context, id quanta.ID) ([]PeerInfo, error) {
	var resp locateResp
	err := c.invoke(ctx, methodLocate, &locateReq{ID: id[:]}, &resp)
	return resp.Replicas, err
}
