package coord

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/tsdht/tsdht/tsdb/repair"
	"github.com/tsdht/tsdht/tsdb/wire"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/rollup"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
)

// Coordinator writes and reads series on behalf of clients: it maps points to shards,
// shards to replica sets (Placement), and fans requests out to the replicas (Replicas)
// in parallel.
type Coordinator struct {
	cfg      Config
	place    cluster.Placement
	replicas cluster.Replicas
	types    *Registry
	hints    *repair.Hints // nil: no hints kept
	log      *slog.Logger

	cat    *catalogCoord // catalog entries and the tag index (catalog_coord.go)
	newest newestTracker // newest quanta reported to the registry by writes (bounds.go)

	commits *cluster.GroupCommit // groups concurrent writes per replica (groupcommit.go)

	repairSlots chan struct{} // bounds background read repairs
	readRepairs atomic.Int64  // shards repaired by reads
	longReads   chan struct{} // bounds reads of more than one page of quanta (longread.go)
	longPace    *pacer        // paces their pages (longread.go)

	rollup *rollup.Client // nil: rollups off (rollup.go)

	hooks writeHooks // what every write runs beside storing its points (write.go)

	budget *seriesBudget // new series taken on per write and per second (newseries.go)

	// localParts is how many parts PutMany cuts the batch to this node's own store
	// into (0: a part per shard); parts are written at once, on StoreWorkers. One part
	// is one replica request, which a store that appends a request's shards in one
	// commit and one disk sync (CoordConfig.LocalBatches) stores at the cost of about
	// one append: then one part. A store that appends shard by shard syncs once per
	// shard in a row, and there a part per shard is faster (appends made at once share
	// their syncs).
	localParts int

	placedPauses atomic.Int64 // pauses of untilPlaced: writes that waited for failed replicas
}

// CoordConfig configures a Coordinator: what it takes of the node's Config (which see
// for each field's meaning and default).
type Config struct {
	RF, WriteQuorum, ReadQuorum int
	ReadQuorumOnly              bool
	Quantum                     quanta.Quantum
	Format                      quanta.Format
	MaxFuture                   time.Duration
	CallTimeout                 time.Duration
	WriteRetry                  time.Duration
	ReadConcurrency             int
	LongReadShare               float64
	// LocalBatches says that this node's store appends a request's shards in one
	// commit and one disk sync (a store.BatchAppender): PutMany then sends its own
	// store one request, not a part per shard (localParts).
	LocalBatches bool
	// NewSeriesPerRequest and NewSeriesPerSecond bound the series a coordinator does not
	// know that one write and all writes per second may name (newseries.go); 0: no limit.
	NewSeriesPerRequest int
	NewSeriesPerSecond  float64
	// FullMembership says that the placement's Live lists every live member (routing
	// mode full), so that asking each of them reaches every registry replica (Shape).
	FullMembership bool
}

// maxReadRepairs bounds the read repairs in flight on one node.
const maxReadRepairs = 4

func New(cfg Config, place cluster.Placement, replicas cluster.Replicas, types *Registry, h *repair.Hints, roll *rollup.Client, logger *slog.Logger) *Coordinator {
	share := cfg.LongReadShare
	if share <= 0 { // a Config that did not go through withDefaults
		share = DefaultLongReadShare
	}
	c := &Coordinator{cfg: cfg, place: place, replicas: replicas, types: types, hints: h, rollup: roll, log: logger,
		commits: cluster.NewGroupCommit(), repairSlots: make(chan struct{}, maxReadRepairs), longReads: make(chan struct{}, MaxLongReads),
		longPace: newPacer(share, longReadBurst), budget: newSeriesBudget(cfg.NewSeriesPerRequest, cfg.NewSeriesPerSecond)}
	c.cat = newCatalogCoord(c)
	if cfg.LocalBatches {
		c.localParts = 1
	}
	c.registerWriteHooks()
	c.hooks.beside = append(c.hooks.beside, c.writeContends) // paces long reads beside writes (longread.go)
	return c
}

// shardSpan is one shard of a request with the part of the request's range inside it.
type shardSpan struct {
	key      string // the series' (reads: a read of many series asks for many)
	ref      store.ShardRef
	from, to int64
	replicas []dht.Peer
	pts      series.Points // for writes
}

// dataReplica returns which of a shard's replicas a first round asks for its data
// (the others send digests): this node when it is one, as its answer crosses no
// network, else the closest.
func dataReplica(replicas []dht.Peer, self string) int {
	for j := range replicas {
		if replicas[j].ID == self {
			return j
		}
	}
	return 0
}

// Put writes points of one series. It returns how many points reached their write
// quorum; on error, the points counted are stored and the rest may not be.
func (c *Coordinator) Put(ctx context.Context, key string, pts series.Points, opt wire.PutOptions) (int, error) {
	r, err := c.PutReport(ctx, key, pts, opt)
	return r.Stored, err
}

// PutResult says what a write did.
type PutResult struct {
	Stored int           // points that reached their write quorum
	Waited time.Duration // how long the write retried for replicas that had failed
}

// PutReport writes points of one series like Put and also says how long it waited. It
// is PutMany of one series: a write some of whose shards miss their quorum because
// replicas failed — in the seconds before failure detection takes the dead nodes out
// of placement — retries those shards against their replica sets as they are then,
// with a growing pause, until they are stored or Config.WriteRetry (or ctx's deadline,
// if sooner) has passed. Writes are idempotent, so a replica that did store a retried
// point is not harmed.
func (c *Coordinator) PutReport(ctx context.Context, key string, pts series.Points, opt wire.PutOptions) (PutResult, error) {
	if _, err := c.checkPut(key, pts, opt); err != nil || pts.Len() == 0 {
		return PutResult{}, err
	}
	r := c.PutMany(ctx, []SeriesPut{{Key: key, Points: pts}}, opt)[0]
	return PutResult{Stored: r.Stored, Waited: r.Waited}, r.Err
}

// quorumCode is the code of a write that missed its quorum because of the replicas'
// errors errs: wire.CodeDiskFull when a replica's disk is full (retrying soon does not
// help), else wire.CodeUnavailable.
func quorumCode(errs error) string {
	if diskFull(errs) {
		return wire.CodeDiskFull
	}
	return wire.CodeUnavailable
}

// diskFull says whether err, or one of the errors it joins, is a replica's "disk full".
func diskFull(err error) bool {
	if err == nil {
		return false
	}
	var re *rpc.RemoteError
	if errors.As(err, &re) && re.Code == wire.CodeDiskFull {
		return true
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if diskFull(e) {
				return true
			}
		}
	}
	return false
}

// untilPlaced runs step until it succeeds, fails for another reason than too few
// replicas (wire.CodeUnavailable), or deadline passes, pausing longer each time.
func (c *Coordinator) untilPlaced(ctx context.Context, deadline time.Time, step func() error) error {
	pause := 100 * time.Millisecond
	for {
		err := step()
		if err == nil || !unavailable(err) {
			return err
		}
		wait := min(pause, time.Until(deadline))
		if wait <= 0 {
			return err
		}
		c.placedPauses.Add(1)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause = min(2*pause, time.Second)
	}
}

// MinTimestamp is the earliest timestamp a write may carry (in 1677): two of the longest
// quanta after the first instant of int64 nanoseconds, so that every quantum and
// catalog bound around a stored point is a time int64 holds. Earlier points are refused
// at once, as points too far in the future are.
const MinTimestamp = math.MinInt64 + 2*int64(quanta.MaxQuantum)*int64(time.Second)

// checkPut validates a write and returns its write quorum.
func (c *Coordinator) checkPut(key string, pts series.Points, opt wire.PutOptions) (int, error) {
	if err := series.ValidateKey(key); err != nil {
		return 0, rpc.Errorf(wire.CodeBadInput, "%v", err)
	}
	if err := pts.Valid(); err != nil {
		return 0, rpc.Errorf(wire.CodeBadInput, "%v", err)
	}
	w := c.cfg.WriteQuorum
	if opt.WriteQuorum != 0 {
		w = opt.WriteQuorum
	}
	if w < 1 || w > c.cfg.RF {
		return 0, rpc.Errorf(wire.CodeBadInput, "write quorum %d: must be 1..rf (%d)", w, c.cfg.RF)
	}
	limit := time.Now().Add(c.cfg.MaxFuture).UnixNano()
	for _, t := range pts.T {
		if t > limit {
			return 0, rpc.Errorf(wire.CodeBadInput, "timestamp %s is more than %v in the future (check the writer's clock)",
				time.Unix(0, t).UTC().Format(time.RFC3339Nano), c.cfg.MaxFuture)
		}
		if t < MinTimestamp {
			return 0, rpc.Errorf(wire.CodeBadInput, "timestamp %d (%s) is before %s, the earliest time tsdht stores (check the writer's clock and precision)",
				t, time.Unix(0, t).UTC().Format(time.RFC3339), time.Unix(0, MinTimestamp).UTC().Format(time.RFC3339))
		}
	}
	return w, nil
}

// locate returns the replica set of a shard.
func (c *Coordinator) Locate(ctx context.Context, id quanta.ID) ([]dht.Peer, error) {
	peers, err := c.place.Locate(ctx, id, c.cfg.RF)
	if err != nil {
		return nil, rpc.Errorf(wire.CodeUnavailable, "shard %s: no replica found: %v", id, err)
	}
	return peers, nil
}

// wireQ is a quantum length as requests carry it: 0 for the cluster's.
func (c *Coordinator) wireQ(q quanta.Quantum) int64 {
	if q == c.cfg.Quantum {
		return 0
	}
	return int64(q)
}

// cachedQ is the quantum length of a series as this coordinator last learnt it, or the
// cluster's if it knows none: for what costs only bookkeeping when it is wrong.
func (c *Coordinator) cachedQ(key string) quanta.Quantum {
	if d, ok := c.types.cached(key); ok {
		return d.Q
	}
	return c.cfg.Quantum
}

// quantumFor is the quantum length of a series, or the cluster's if its registry
// replicas cannot say (an unknown series holds nothing to find).
func (c *Coordinator) quantumFor(ctx context.Context, key string) quanta.Quantum {
	if d, err := c.types.lookup(ctx, key); err == nil {
		return d.Q
	}
	return c.cfg.Quantum
}

// splitByQuantum cuts sorted points at the boundaries of the series' quanta.
func (c *Coordinator) splitByQuantum(ctx context.Context, key string, pts series.Points) ([]shardSpan, error) {
	desc, err := c.types.lookup(ctx, key)
	if err != nil {
		return nil, err
	}
	q := desc.Q
	var spans []shardSpan
	for lo := 0; lo < pts.Len(); {
		start := q.Start(pts.T[lo])
		end := q.EndNanos(start)
		hi := lo + 1
		for hi < pts.Len() && pts.T[hi] < end {
			hi++
		}
		ref := cluster.ShardRef(c.cfg.Format, key, start)
		ref.Q = q
		replicas, err := c.Locate(ctx, ref.ID)
		if err != nil {
			return nil, err
		}
		// A quantum holding more than a request's worth (long strings) goes in parts.
		q := pts.Slice(lo, hi)
		for _, part := range q.Batches(0, cluster.MaxRequestBytes-cluster.ShardWriteOverhead) {
			spans = append(spans, shardSpan{ref: ref, replicas: replicas, pts: part})
		}
		lo = hi
	}
	return spans, nil
}

// ReadRepairs returns how many shards this coordinator's reads repaired.
func (c *Coordinator) ReadRepairs() int64 { return c.readRepairs.Load() }

// RollupStats returns this coordinator's use of rollup homes (zero when rollups are
// off).
func (c *Coordinator) RollupStats() rollup.Stats {
	if c.rollup == nil {
		return rollup.Stats{}
	}
	return c.rollup.Stats()
}

// RollupSource returns what the rollup homes read of the cluster through this
// coordinator.
func (c *Coordinator) RollupSource() rollup.Source { return rollupSource{c} }

// unavailable reports whether err is a replica's or the cluster's CodeUnavailable: too
// few replicas, which waiting may mend.
func unavailable(err error) bool {
	var re *rpc.RemoteError
	return errors.As(err, &re) && re.Code == wire.CodeUnavailable
}
