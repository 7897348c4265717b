package coord

import (
	"context"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/agg"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// Latest's round: the series' catalog entry and the statistics of its newest quanta in
// one request to each replica involved (wire.MethodLatestPart), settled as soon as a
// read quorum of each has answered and agrees, not when the slowest has.

// latestRoundResult is what Latest's round found.
type latestRoundResult struct {
	entry catalog.Entry // merged from a read quorum of the registry replicas
	found bool          // some replica holds an entry
	// settled: every shard of the range was settled by a read quorum, and pt (when
	// ptFound) is the latest point of the range; otherwise the caller reads the range
	// again the long way (latestIn).
	settled bool
	pt      series.Points
	ptFound bool
}

// latestRound reads series key's catalog entry from its registry replicas and the
// windows of its quanta in [from, to) from their replicas, one request per node (under
// KFI the registry replicas are usually the shards' replicas too). It asks a read
// quorum of each first, chosen to ask few nodes, and the other replicas only where
// those did not settle (settleQuorum); it returns once a read quorum of registry
// replicas has answered and every shard is settled, or once every replica has
// answered. It fails only when too few registry replicas answered (as readEntry).
func (c *Coordinator) latestRound(ctx context.Context, key string, from, to int64) (latestRoundResult, error) {
	var out latestRoundResult
	if err := series.ValidateKey(key); err != nil {
		return out, rpc.Errorf(wire.CodeBadInput, "%v", err)
	}
	owners, err := c.place.Locate(ctx, quanta.KeyID(key), c.cfg.RF)
	if err != nil || len(owners) == 0 {
		return out, rpc.Errorf(wire.CodeUnavailable, "catalog entry of %q: no replica found: %v", key, err)
	}
	desc, err := c.types.lookup(ctx, key)
	if err != nil {
		return out, err
	}
	q := desc.Q
	var spans []shardSpan
	if from < to {
		starts, err := q.Covering(from, to)
		if err != nil {
			return out, rpc.Errorf(wire.CodeBadInput, "%v", err)
		}
		if spans, err = c.planRead(ctx, nil, key, q, starts, from, to); err != nil {
			return out, err
		}
	}
	// groups of replicas to settle: each shard's, and last the entry's registry replicas.
	groups := append(spans[:len(spans):len(spans)], shardSpan{replicas: owners})
	entryGroup := len(spans)
	r := c.cfg.ReadQuorum
	asked := make([][]bool, len(groups))
	answers := make([][]aggAnswer, len(spans))
	need := make([]int, len(groups))
	for i := range groups {
		asked[i] = make([]bool, len(groups[i].replicas))
		need[i] = min(r, len(groups[i].replicas))
		if i < len(spans) {
			answers[i] = make([]aggAnswer, len(spans[i].replicas))
		}
	}
	windows := make([][]agg.Window, len(spans))
	done := make([]bool, len(spans))
	left := len(spans) // shards not settled yet
	needEntries, entries := need[entryGroup], 0
	every := q.Duration().Nanoseconds()
	var lastErr error

	// ask sends plan, one request per node, and takes the answers as they come until
	// everything is settled or every node has answered.
	ask := func(plan []fetch) {
		batches := cluster.GroupByPeer(func(yield func(p dht.Peer, f fetch) bool) {
			for _, f := range plan {
				if !yield(groups[f.shard].replicas[f.replica], f) {
					return
				}
			}
		}, 0, nil)
		results := cluster.FanOut(ctx, batches, 0, c.cfg.CallTimeout, func(ctx context.Context, b *cluster.PeerBatch[fetch]) (cluster.LatestAnswer, error) {
			var shards []wire.ShardAgg
			entry := false
			for _, f := range b.Items {
				if f.shard == entryGroup {
					entry = true
					continue
				}
				s := &spans[f.shard]
				shards = append(shards, wire.ShardAgg{ID: s.ref.ID[:], Start: s.ref.Start, Q: c.wireQ(s.ref.Q), Key: key, From: s.from, To: s.to})
			}
			return c.replicas.For(b.Peer).LatestPart(ctx, key, entry, every, shards)
		})
		for range batches {
			a := <-results
			if a.Err != nil {
				lastErr = a.Err
				c.log.Debug("latest from a replica failed", "series", key, "peer", cluster.NodeID(a.Batch.Peer), "err", a.Err)
				continue
			}
			k := 0 // the answer's shards follow the batch's shard items, in order
			for _, f := range a.Batch.Items {
				if f.shard == entryGroup {
					entries++
					if a.Resp.Held && a.Resp.Entry.Key == key {
						if out.found {
							out.entry = catalog.Merge(out.entry, a.Resp.Entry)
						} else {
							out.entry, out.found = a.Resp.Entry, true
						}
					}
					continue
				}
				answers[f.shard][f.replica] = aggAnswer{ok: true, res: a.Resp.Shards[k], isData: true}
				k++
				if !done[f.shard] {
					if ws, ok, complete := settleQuorum(answers[f.shard], r); ok || complete {
						done[f.shard], windows[f.shard] = true, ws
						left--
					}
				}
			}
			if entries >= needEntries && left == 0 {
				return
			}
		}
	}
	// First a read quorum of each group, chosen to ask few nodes (this one first); then,
	// where that did not settle (a replica failed, or those asked differ), the others.
	self := c.place.Self().ID
	ask(chooseReplicas(groups, asked, need, self, true))
	if entries < needEntries || left > 0 {
		var plan []fetch
		for i := range groups {
			if i == entryGroup && entries >= needEntries || i < len(spans) && done[i] {
				continue
			}
			for j := range groups[i].replicas {
				if !asked[i][j] {
					plan = append(plan, fetch{shard: i, replica: j, data: true})
					asked[i][j] = true
				}
			}
		}
		if len(plan) > 0 {
			ask(plan)
		}
	}
	if entries < needEntries {
		return out, rpc.Errorf(wire.CodeUnavailable, "catalog entry of %q: %d of %d registry replicas answered, %d needed: %v",
			key, entries, len(owners), needEntries, lastErr)
	}
	if left > 0 {
		return out, nil // not settled: the caller reads the range the long way
	}
	out.settled = true
	for i := len(windows) - 1; i >= 0; i-- {
		if n := len(windows[i]); n > 0 {
			out.pt, out.ptFound = lastPoint(&windows[i][n-1]), true
			break
		}
	}
	return out, nil
}

// settleQuorum settles one shard from the answers in hand, each holding windows: ok
// when at least r of them (all, if fewer replicas) hold the same copy by digest — those
// windows answer; complete without ok when as many hold nothing. Neither: wait for more
// answers. As settleAgg's byQuorum, this is exact for the latest acknowledged point: a
// write quorum meets any r replicas (w + r > rf), so r agreeing copies all hold every
// acknowledged point, and r empty ones show that none was acknowledged there.
func settleQuorum(ans []aggAnswer, r int) (ws []agg.Window, ok, complete bool) {
	need := min(r, len(ans))
	empty := 0
	for k := range ans {
		a := &ans[k]
		if !a.ok {
			continue
		}
		if !a.res.Held || a.res.Count == 0 {
			empty++
			continue
		}
		agree := 0
		for m := range ans {
			b := &ans[m]
			if b.ok && b.res.Held && b.res.Count == a.res.Count && b.res.Hash == a.res.Hash {
				agree++
			}
		}
		if agree >= need {
			return a.res.Windows, true, true
		}
	}
	return nil, false, empty >= need
}
