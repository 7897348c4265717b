package coord

import (
	"context"
	"time"

	"github.com/tsdht/tsdht/tsdb/catalog"
)

// Bounds widened beside the points.
//
// A series that exists (its entry live, of the write's type) and whose entry only needs
// its bounds widened, or its newest quantum recorded (a write stamped past the clock,
// which records an ahead, still merges its entry first), has nothing the points depend on:
// its type is fixed and it is found by its tags already. So its entry is merged at its
// registry replicas beside its points, not before them, and the write is acknowledged
// only once both are stored at quorum: the bounds and newest still never miss an
// acknowledged point. A backfill crosses an hour of bounds, and a quantum, every few
// batches at each coordinating node; each such batch waited for a catalog round (a
// commit and, under sync always, a disk sync at each registry replica) before its points
// went, and now shares the round trip, and the replicas' syncs, with them. What a crash
// may leave: points stored outside their series' bounds by a write that was never
// acknowledged.

// laterMerges are the entry updates that noteWrites left to go beside the points: the
// series' index in puts, its request and its update.
type laterMerges struct {
	of   []int // the index in puts of each request of the current noteWrites call
	puts []int
	reqs []noteReq
	upds []catalog.Entry
}

func (l *laterMerges) add(j int, r noteReq, upd catalog.Entry) {
	l.puts = append(l.puts, l.of[j])
	l.reqs = append(l.reqs, r)
	l.upds = append(l.upds, upd)
}

// widenBeside starts merging the entries of l at quorum w, marks their series in res as
// widening (no newest is reported for them beside: theirs goes with the entry), and
// returns what waits for them: it sets each series' Tagged and, when its entry could
// not be merged (after retrying until deadline while too few replicas are placed), its
// error, unless the series has one already.
func (c *Coordinator) widenBeside(ctx context.Context, deadline time.Time, l *laterMerges, res []SeriesResult, w int) func([]SeriesResult) {
	n := len(l.upds)
	if n == 0 {
		return nothingToWait
	}
	tagged, errs := make([]bool, n), make([]error, n)
	merge := func(ks []int) {
		es := make([]catalog.Entry, len(ks))
		for j, k := range ks {
			es[j] = l.upds[k]
		}
		merged, merrs := c.mergeEntries(ctx, es, w, nil)
		for j, k := range ks {
			tagged[k], errs[k] = c.settleMerge(ctx, w, l.reqs[k], l.upds[k], merged[j], merrs[j])
		}
	}
	all := make([]int, n)
	for k := range all {
		all[k] = k
	}
	for _, i := range l.puts {
		res[i].widening = true
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		merge(all)
	}()
	return func(res []SeriesResult) {
		<-done
		// The first round went beside the points; what failed for want of placed
		// replicas goes again, as catalogReady retries.
		pending, first := all, true
		_ = c.untilPlaced(ctx, deadline, func() error {
			if !first {
				merge(pending)
			}
			first = false
			var again []int
			var retry error
			for _, k := range pending {
				if errs[k] != nil && unavailable(errs[k]) {
					again, retry = append(again, k), errs[k]
				}
			}
			pending = again
			return retry
		})
		for k, i := range l.puts {
			res[i].widening = false
			if errs[k] != nil {
				if res[i].Err == nil {
					res[i].Err = errs[k]
				}
				continue
			}
			res[i].Tagged = tagged[k] && l.reqs[k].tags != nil && res[i].Err == nil
		}
	}
}
