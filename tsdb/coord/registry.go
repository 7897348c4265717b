package coord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
)

// maxTypeCache bounds the memory of series types; past it the cache starts over (types
// never change, so forgetting costs only a round trip).
const maxTypeCache = 1 << 16

// Desc is what a coordinator must know of a series before it reads or writes it: its
// value type and the length of its quanta, both fixed at its first write.
type Desc struct {
	Type series.Type
	Q    quanta.Quantum // never 0: the cluster's quantum where the series has none of its own
}

// registry keeps series metadata — a series' type and quantum — on the replica set of
// SHA-1(key), the series' registry replicas, and caches what it learnt.
type Registry struct {
	place      cluster.Placement
	replicas   cluster.Replicas
	rf         int
	readQuorum int
	quantum    quanta.Quantum // the cluster's
	timeout    time.Duration  // per replica call
	concurrent int            // replica calls of one lookupMany at once
	log        *slog.Logger

	mu    sync.Mutex
	descs map[string]Desc
}

func NewRegistry(place cluster.Placement, replicas cluster.Replicas, cfg Config, logger *slog.Logger) *Registry {
	return &Registry{place: place, replicas: replicas, rf: cfg.RF, readQuorum: cfg.ReadQuorum, quantum: cfg.Quantum,
		timeout: cfg.CallTimeout, concurrent: cfg.ReadConcurrency, log: logger, descs: make(map[string]Desc)}
}

// owners returns the registry replicas of a series, each as a batch of one.
func (g *Registry) owners(ctx context.Context, key string) ([]*cluster.PeerBatch[string], error) {
	peers, err := g.locate(ctx, key)
	if err != nil {
		return nil, err
	}
	return cluster.GroupByPeer(func(yield func(dht.Peer, string) bool) {
		for _, p := range peers {
			if !yield(p, key) {
				return
			}
		}
	}, 0, nil), nil
}

// locate returns the registry replicas of a series.
func (g *Registry) locate(ctx context.Context, key string) ([]dht.Peer, error) {
	peers, err := g.place.Locate(ctx, quanta.KeyID(key), g.rf)
	if err != nil {
		return nil, rpc.Errorf(wire.CodeUnavailable, "series %q: no registry replica: %v", key, err)
	}
	return peers, nil
}

func (g *Registry) cached(key string) (Desc, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	d, ok := g.descs[key]
	return d, ok
}

// forget drops a series' cached description: the series was deleted.
func (g *Registry) forget(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.descs, key)
}

func (g *Registry) remember(key string, d Desc) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.descs) >= maxTypeCache {
		g.descs = make(map[string]Desc)
	}
	g.descs[key] = d
}

func mismatch(key string, have, want series.Type) error {
	return rpc.Errorf(wire.CodeTypeMismatch, "series %q holds %s values; refusing %s values", key, have, want)
}

// quantumVotes counts the quanta the registry replicas' answers name; answers that
// know none are not counted.
type quantumVotes map[quanta.Quantum]int

func (v quantumVotes) add(d store.Decl, def quanta.Quantum) {
	if !d.NoQuantum {
		v[d.Quantum.Or(def)]++
	}
}

// winner is the quantum most answers name, the shorter on a tie, so that every
// coordinator that sees the same answers decides alike; false when none names one.
func (v quantumVotes) winner() (quanta.Quantum, bool) {
	var best quanta.Quantum
	n := 0
	for q, c := range v {
		if c > n || c == n && q < best {
			best, n = q, c
		}
	}
	return best, n > 0
}

// ensure fixes the series' type and quantum at its registry replicas on the first
// write (q is the quantum proposed for a new series), refuses a write of another type
// than the one fixed first, and returns the series' description. w replicas must
// record it (ensureMany of one).
func (g *Registry) ensure(ctx context.Context, key string, t series.Type, q quanta.Quantum, w int) (Desc, error) {
	ds, errs := g.ensureMany(ctx, []decl{{key, t, q}}, w)
	return ds[0], errs[0]
}

// decl is a series' type and the quantum proposed for it, should it be new.
type decl struct {
	key string
	t   series.Type
	q   quanta.Quantum
}

// ensureMany does what ensure does for each of ds, those not cached all at once: one
// request per registry replica (wire.MethodDeclareMany), at most entriesPerRead
// declarations each.
func (g *Registry) ensureMany(ctx context.Context, ds []decl, w int) ([]Desc, []error) {
	descs, errs := make([]Desc, len(ds)), make([]error, len(ds))
	var ask []int // of ds
	for i, d := range ds {
		if have, ok := g.cached(d.key); ok {
			if have.Type == d.t {
				descs[i] = have
				continue
			}
			// The series may have been deleted (and its key freed) through another
			// node: the registry replicas decide.
			g.forget(d.key)
		}
		ask = append(ask, i)
	}
	m := len(ask)
	if m == 0 {
		return descs, errs
	}
	aerrs, owners, oks, last, refused := make([]error, m), make([]int, m), make([]int, m), make([]error, m), make([]error, m)
	votes := make([]quantumVotes, m)
	batches := ownerBatches(ctx, g.place, g.rf, m, entriesPerRead, func(j int) quanta.ID { return quanta.KeyID(ds[ask[j]].key) },
		func(j int) string { return fmt.Sprintf("series %q: registry", ds[ask[j]].key) }, aerrs, owners)
	answers := cluster.FanOut(ctx, batches, 0, g.timeout, func(ctx context.Context, b *cluster.PeerBatch[int]) (manyAnswer[store.Decl], error) {
		keys, sds := make([]string, len(b.Items)), make([]store.Decl, len(b.Items))
		for k, j := range b.Items {
			d := ds[ask[j]]
			keys[k], sds[k] = d.key, store.Decl{Type: d.t, Quantum: d.q}
			if d.q == g.quantum {
				sds[k].Quantum = 0 // the cluster's: recorded as such
			}
		}
		out, errs, err := g.replicas.For(b.Peer).DeclareMany(ctx, keys, sds)
		if err == nil && (len(out) != len(keys) || len(errs) != len(keys)) {
			err = fmt.Errorf("registry replica %s: %d answers to %d declarations", b.Peer.RPCAddr, len(out), len(keys))
		}
		return manyAnswer[store.Decl]{out, errs}, err
	})
	eachAnswer(batches, answers, func(j int, d store.Decl, err error) {
		var re *rpc.RemoteError
		switch {
		case err == nil:
			oks[j]++
			if votes[j] == nil {
				votes[j] = quantumVotes{}
			}
			votes[j].add(d, g.quantum)
		case errors.As(err, &re) && re.Code == wire.CodeTypeMismatch:
			refused[j] = rpc.Errorf(wire.CodeTypeMismatch, "%s", re.Msg)
		default:
			last[j] = err
		}
	})
	for j, i := range ask {
		d := ds[i]
		switch {
		case aerrs[j] != nil:
			errs[i] = aerrs[j]
		case refused[j] != nil:
			errs[i] = refused[j]
		case oks[j] < w:
			errs[i] = rpc.Errorf(quorumCode(last[j]), "series %q: could not record its type at %d of %d registry replicas: %v", d.key, w, owners[j], last[j])
		default:
			desc := Desc{Type: d.t, Q: d.q}
			if won, ok := votes[j].winner(); ok {
				desc.Q = won
			}
			g.remember(d.key, desc)
			descs[i] = desc
		}
	}
	return descs, errs
}

// lookup asks the registry replicas for a series' type and quantum. One replica's
// "unknown" is not the truth (it may have just become an owner), so every replica is
// asked.
func (g *Registry) lookup(ctx context.Context, key string) (Desc, error) {
	if d, ok := g.cached(key); ok {
		return d, nil
	}
	owners, err := g.owners(ctx, key)
	if err != nil {
		return Desc{}, err
	}
	answers := cluster.FanOut(ctx, owners, 0, g.timeout, func(ctx context.Context, b *cluster.PeerBatch[string]) (cluster.KnownDecl, error) {
		d, ok, err := g.replicas.For(b.Peer).SeriesDecl(ctx, key)
		return cluster.KnownDecl{Decl: d, Known: ok}, err
	})
	var t declTally
	for range owners {
		a := <-answers
		t.add(a.Resp, a.Err, g.quantum)
	}
	return g.settle(key, &t, len(owners))
}

// declTally is what the registry replicas of one series answered of its declaration.
type declTally struct {
	responded int
	typ       series.Type
	votes     quantumVotes
	lastErr   error
}

// add counts one replica's answer: d (def is the cluster's quantum), or err when it
// did not answer.
func (t *declTally) add(d cluster.KnownDecl, err error, def quanta.Quantum) {
	if err != nil {
		t.lastErr = err
		return
	}
	t.responded++
	if d.Known {
		t.typ = d.Type
		if t.votes == nil {
			t.votes = quantumVotes{}
		}
		t.votes.add(d.Decl, def)
	}
}

// settle decides a series' description from what its registry replicas, owners of
// them, answered (t), and remembers it: a type any of them knows, with the quantum
// most of them name; unknown when none knows it and a read quorum answered.
func (g *Registry) settle(key string, t *declTally, owners int) (Desc, error) {
	if t.typ != series.Unknown {
		// A replica that learnt the series from an append alone knows no quantum; where
		// none knows one, the series predates quanta of their own: the cluster's.
		d := Desc{Type: t.typ, Q: g.quantum}
		if q, ok := t.votes.winner(); ok {
			d.Q = q
		}
		g.remember(key, d)
		return d, nil
	}
	if need := min(g.readQuorum, owners); t.responded < need {
		return Desc{}, rpc.Errorf(wire.CodeUnavailable, "series %q: %d of %d registry replicas answered, %d needed: %v",
			key, t.responded, owners, need, t.lastErr)
	}
	return Desc{}, rpc.Errorf(wire.CodeUnknownSeries, "unknown series %q", key)
}

// Redeclare tells every registry replica of a series what this node holds of it, for
// the repairer: an owner that already knows it answers at no cost, a new owner learns
// it.
func (g *Registry) Redeclare(ctx context.Context, key string, d store.Decl) {
	owners, err := g.owners(ctx, key)
	if err != nil {
		g.log.Warn("repair: registry not found", "series", key, "err", err)
		return
	}
	answers := cluster.FanOut(ctx, owners, 0, g.timeout, func(ctx context.Context, b *cluster.PeerBatch[string]) (store.Decl, error) {
		return g.replicas.For(b.Peer).DeclareSeries(ctx, key, d)
	})
	for range owners {
		if a := <-answers; a.Err != nil {
			g.log.Warn("repair: re-declaring a series failed", "series", key, "peer", cluster.NodeID(a.Batch.Peer), "rpc", a.Batch.Peer.RPCAddr, "err", a.Err)
		}
	}
}
