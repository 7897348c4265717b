package tsdb

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
)

// maxTypeCache bounds the memory of series types; past it the cache starts over (types
// never change, so forgetting costs only a round trip).
const maxTypeCache = 1 << 16

// registry keeps series metadata — today a series' type — on the replica set of
// SHA-1(key), the series' registry replicas, and caches what it learnt.
type registry struct {
	place      cluster.Placement
	replicas   cluster.Replicas
	rf         int
	readQuorum int
	timeout    time.Duration // per replica call
	log        *slog.Logger

	mu    sync.Mutex
	types map[string]series.Type
}

func newRegistry(place cluster.Placement, replicas cluster.Replicas, cfg *Config, logger *slog.Logger) *registry {
	return &registry{place: place, replicas: replicas, rf: cfg.RF, readQuorum: cfg.ReadQuorum,
		timeout: cfg.CallTimeout, log: logger, types: make(map[string]series.Type)}
}

// owners returns the registry replicas of a series, each as a batch of one.
func (g *registry) owners(ctx context.Context, key string) ([]*cluster.PeerBatch[string], error) {
	peers, err := g.place.Locate(ctx, quanta.KeyID(key), g.rf)
	if err != nil {
		return nil, rpc.Errorf(CodeUnavailable, "series %q: no registry replica: %v", key, err)
	}
	return cluster.GroupByPeer(func(yield func(dht.Peer, string) bool) {
		for _, p := range peers {
			if !yield(p, key) {
				return
			}
		}
	}, 0, nil), nil
}

func (g *registry) cached(key string) (series.Type, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t, ok := g.types[key]
	return t, ok
}

// forget drops a series' cached type: the series was deleted.
func (g *registry) forget(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.types, key)
}

func (g *registry) remember(key string, t series.Type) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.types) >= maxTypeCache {
		g.types = make(map[string]series.Type)
	}
	g.types[key] = t
}

func mismatch(key string, have, want series.Type) error {
	return rpc.Errorf(CodeTypeMismatch, "series %q holds %s values; refusing %s values", key, have, want)
}

// ensure fixes the series' type at its registry replicas on the first write, and
// refuses a write of another type than the one fixed first. w replicas must record it.
func (g *registry) ensure(ctx context.Context, key string, t series.Type, w int) error {
	if have, ok := g.cached(key); ok {
		if have == t {
			return nil
		}
		// The series may have been deleted (and its key freed) through another node:
		// the registry replicas decide.
		g.forget(key)
	}
	owners, err := g.owners(ctx, key)
	if err != nil {
		return err
	}
	answers := cluster.FanOut(ctx, owners, 0, g.timeout, func(ctx context.Context, b *cluster.PeerBatch[string]) (series.Type, error) {
		return g.replicas.For(b.Peer).DeclareType(ctx, key, t)
	})
	ok := 0
	var lastErr error
	for range owners {
		a := <-answers
		var re *rpc.RemoteError
		switch {
		case a.Err == nil:
			ok++
		case errors.As(a.Err, &re) && re.Code == CodeTypeMismatch:
			return rpc.Errorf(CodeTypeMismatch, "%s", re.Msg)
		default:
			lastErr = a.Err
		}
	}
	if ok < w {
		return rpc.Errorf(CodeUnavailable, "series %q: could not record its type at %d of %d registry replicas: %v", key, w, len(owners), lastErr)
	}
	g.remember(key, t)
	return nil
}

// lookup asks the registry replicas for a series' type. One replica's "unknown" is not
// the truth (it may have just become an owner), so every replica is asked.
func (g *registry) lookup(ctx context.Context, key string) (series.Type, error) {
	if t, ok := g.cached(key); ok {
		return t, nil
	}
	owners, err := g.owners(ctx, key)
	if err != nil {
		return series.Unknown, err
	}
	type known struct {
		t  series.Type
		ok bool
	}
	answers := cluster.FanOut(ctx, owners, 0, g.timeout, func(ctx context.Context, b *cluster.PeerBatch[string]) (known, error) {
		t, ok, err := g.replicas.For(b.Peer).SeriesType(ctx, key)
		return known{t, ok}, err
	})
	responded := 0
	var lastErr error
	for range owners {
		a := <-answers
		if a.Err != nil {
			lastErr = a.Err
			continue
		}
		responded++
		if a.Resp.ok {
			g.remember(key, a.Resp.t)
			return a.Resp.t, nil
		}
	}
	if need := min(g.readQuorum, len(owners)); responded < need {
		return series.Unknown, rpc.Errorf(CodeUnavailable, "series %q: %d of %d registry replicas answered, %d needed: %v",
			key, responded, len(owners), need, lastErr)
	}
	return series.Unknown, rpc.Errorf(CodeUnknownSeries, "unknown series %q", key)
}

// Redeclare tells every registry replica of a series its type, for the repairer: an
// owner that already knows it answers at no cost, a new owner learns it.
func (g *registry) Redeclare(ctx context.Context, key string, t series.Type) {
	owners, err := g.owners(ctx, key)
	if err != nil {
		g.log.Warn("repair: registry not found", "series", key, "err", err)
		return
	}
	answers := cluster.FanOut(ctx, owners, 0, g.timeout, func(ctx context.Context, b *cluster.PeerBatch[string]) (series.Type, error) {
		return g.replicas.For(b.Peer).DeclareType(ctx, key, t)
	})
	for range owners {
		if a := <-answers; a.Err != nil {
			g.log.Warn("repair: re-declaring a series failed", "series", key, "peer", cluster.NodeID(a.Batch.Peer), "rpc", a.Batch.Peer.RPCAddr, "err", a.Err)
		}
	}
}
