package coord

import (
	"context"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/tsdb/catalog"
)

// The newest quanta of a PutMany's series, reported at once.
//
// A write whose newest point reaches a quantum its coordinator has not reported for the
// series reports it to the series' registry replicas (bounds.go). A batch of many series
// crosses into a new quantum for all of them at about the same time: PutMany sends all
// their reports in one request per registry replica (cut as groupByPeer cuts), beside
// the points, and a store that merges entries at once (store.EntriesMerger) stores them
// in one commit and one disk sync. One request per series before the points cost a
// commit and a sync each, a stall of the write every quantum: a quarter of a node's wall
// time under scripts/bench-http with the default quantum.

// newestMany is the Newest reports of one PutMany in flight.
type newestMany struct {
	c        *Coordinator
	ctx      context.Context
	deadline time.Time
	puts     []SeriesPut
	w        int
	reps     []newestReport
	batches  int
	answers  <-chan cluster.FanResult[int, []catalog.Entry]
	alone    []int // series (indexes of puts) reported one by one, through reportNewest
}

// newestReport is the report of one series and how its registry replicas answered.
type newestReport struct {
	i      int // the series' index in puts
	e      catalog.Entry
	owners int // registry replicas
	need   int // answers for quorum
	acks   int
	fails  int
}

func (r *newestReport) decided() bool { return r.acks >= r.need || r.fails > r.owners-r.need }

// startNewestMany sends the Newest reports that the series of puts (normalized, checked:
// those with an error in res are skipped) need for a write at quorum w, without waiting.
// A series whose entry is not cached, or whose replicas cannot be located, is reported
// alone by wait.
func (c *Coordinator) startNewestMany(ctx context.Context, deadline time.Time, puts []SeriesPut, res []SeriesResult, w int) *newestMany {
	var owners [][]dht.Peer
	var nm *newestMany // made for the first series that has a report to send
	start := func() {
		if nm == nil {
			nm = &newestMany{c: c, ctx: ctx, deadline: deadline, puts: puts, w: w}
		}
	}
	for i := range puts {
		p := &puts[i]
		if res[i].Err != nil || p.Points.Len() == 0 || res[i].widening {
			continue
		}
		t := p.Points.T[p.Points.Len()-1]
		cur, ok := c.cat.cached(p.Key)
		if ok && !c.needsNewest(p.Key, cur, t) {
			continue
		}
		if !ok || !cur.Live() || !cur.HasBounds || t < cur.First || t > cur.Last {
			start()
			nm.alone = append(nm.alone, i)
			continue
		}
		peers, err := c.place.Locate(ctx, quanta.KeyID(p.Key), c.cfg.RF)
		if err != nil || len(peers) == 0 {
			start()
			nm.alone = append(nm.alone, i)
			continue
		}
		start()
		owners = append(owners, peers)
		nm.reps = append(nm.reps, newestReport{i: i, owners: len(peers), need: min(w, len(peers)), e: catalog.Entry{Key: cur.Key,
			Type: cur.Type, Created: cur.Created, HasBounds: true, First: cur.First, Last: cur.Last, HasNewest: true, Newest: t}})
	}
	if nm == nil || len(nm.reps) == 0 {
		return nm
	}
	batches := cluster.GroupByPeer(func(yield func(dht.Peer, int) bool) {
		for r := range nm.reps {
			for _, o := range owners[r] {
				if !yield(o, r) {
					return
				}
			}
		}
	}, cluster.EntryBatch, func(r int) int { return cluster.EntrySize(nm.reps[r].e) })
	nm.batches = len(batches)
	// The requests outlive ctx's cancellation, as sendNewest's do.
	nm.answers = cluster.FanOut(context.WithoutCancel(ctx), batches, 0, c.cfg.CallTimeout, func(ctx context.Context, b *cluster.PeerBatch[int]) ([]catalog.Entry, error) {
		es := make([]catalog.Entry, len(b.Items))
		for j, r := range b.Items {
			es[j] = nm.reps[r].e
		}
		return c.replicas.For(b.Peer).MergeEntries(ctx, es)
	})
	return nm
}

// wait returns once every report is stored at quorum or failed; a nil nm (nothing to
// report) returns at once. A report that missed
// its quorum goes again alone, with reportNewest's retries until the deadline; a series
// whose report still fails gets the error in res, unless it has one already.
func (nm *newestMany) wait(res []SeriesResult) {
	if nm == nil {
		return
	}
	undecided := len(nm.reps)
collect:
	for received := 0; received < nm.batches && undecided > 0; received++ {
		select {
		case a := <-nm.answers:
			ok := a.Err == nil && len(a.Resp) == len(a.Batch.Items)
			for _, r := range a.Batch.Items {
				rp := &nm.reps[r]
				if rp.decided() {
					continue
				}
				if ok {
					rp.acks++
				} else {
					rp.fails++
				}
				if rp.decided() {
					undecided--
				}
			}
		case <-nm.ctx.Done():
			break collect
		}
	}
	alone := nm.alone
	for r := range nm.reps {
		rp := &nm.reps[r]
		if rp.acks >= rp.need {
			nm.c.noteNewest(rp.e.Key, rp.e.Created, rp.e.Newest)
		} else {
			alone = append(alone, rp.i)
		}
	}
	report := func(i int) {
		p := &nm.puts[i]
		t := p.Points.T[p.Points.Len()-1]
		err := nm.c.untilPlaced(nm.ctx, nm.deadline, func() error { return nm.c.reportNewest(nm.ctx, p.Key, t, nm.w) })
		if err != nil && res[i].Err == nil {
			res[i].Err = err
		}
	}
	switch len(alone) {
	case 0:
	case 1: // one series (Put's): no goroutine to wait for
		report(alone[0])
	default:
		inParallel(alone, report)
	}
}
