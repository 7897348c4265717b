package coord

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/replica"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/store"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// widenOrder is a registry replica that counts the catalog requests it is asked for and
// holds each entry merge until the points of the same write have reached it (or a
// long wait has passed), recording whether the merge had to wait that long: a merge
// sent before the points, as a new series' is, can only be answered after the wait.
type widenOrder struct {
	*replica.Local
	mu                       sync.Mutex
	wrote                    chan struct{} // closed by the next point write
	merges, reads, catMerges int
	declares, postings       int
	timedOut                 bool
	refuse                   error // what every entry merge answers, when not nil
}

func (r *widenOrder) Write(ctx context.Context, req *wire.WriteReq) (*wire.WriteResp, error) {
	r.mu.Lock()
	select {
	case <-r.wrote:
	default:
		close(r.wrote)
	}
	r.mu.Unlock()
	return r.Local.Write(ctx, req)
}

func (r *widenOrder) MergeEntries(ctx context.Context, es []catalog.Entry) ([]catalog.Entry, error) {
	r.mu.Lock()
	r.merges++
	wrote, refuse := r.wrote, r.refuse
	r.mu.Unlock()
	if refuse != nil {
		return nil, refuse
	}
	select {
	case <-wrote:
	case <-time.After(time.Second):
		r.mu.Lock()
		r.timedOut = true
		r.mu.Unlock()
	}
	return r.Local.MergeEntries(ctx, es)
}

func (r *widenOrder) Entries(ctx context.Context, keys []string) ([]catalog.Entry, error) {
	r.count(&r.reads)
	return r.Local.Entries(ctx, keys)
}

func (r *widenOrder) MergeCatalog(ctx context.Context, lists []catalog.TagMembers, es []catalog.Entry) ([]catalog.Entry, error) {
	r.count(&r.catMerges)
	return r.Local.MergeCatalog(ctx, lists, es)
}

func (r *widenOrder) DeclareMany(ctx context.Context, keys []string, ds []store.Decl) ([]store.Decl, []error, error) {
	r.count(&r.declares)
	return r.Local.DeclareMany(ctx, keys, ds)
}

func (r *widenOrder) MergePostingsMany(ctx context.Context, lists []catalog.TagMembers) error {
	r.count(&r.postings)
	return r.Local.MergePostingsMany(ctx, lists)
}

func (r *widenOrder) count(n *int) {
	r.mu.Lock()
	*n++
	r.mu.Unlock()
}

// next readies r for the next write and returns the catalog requests of the last one:
// entry merges, entry reads, catalog merges, declarations and posting requests, and
// whether an entry merge waited in vain for the points.
func (r *widenOrder) next() (merges, reads, catMerges, declares, postings int, timedOut bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	merges, reads, catMerges, declares, postings, timedOut = r.merges, r.reads, r.catMerges, r.declares, r.postings, r.timedOut
	r.merges, r.reads, r.catMerges, r.declares, r.postings, r.timedOut = 0, 0, 0, 0, 0, false
	r.wrote = make(chan struct{})
	return
}

// A batch of series that exist, written past their bounds and into a newer quantum (a
// backfill crossing an hour, as TSBS loads), merges their entries — bounds and newest
// together — in one request per registry replica sent beside the points, not before
// them, and reports no newest of its own; the entries then cover the points and
// Latest finds them. A batch within the bounds and the newest quantum costs no catalog
// request at all.
func TestPutManyWidensBesideThePoints(t *testing.T) {
	var rep *widenOrder
	c := diskNode(t, func(l *replica.Local) cluster.Local {
		rep = &widenOrder{wrote: make(chan struct{}), Local: l}
		return rep
	})
	ctx := context.Background()

	const n = 40
	base := time.Now().Add(-6 * time.Hour).Truncate(time.Hour).UnixNano()
	write := func(what string, t0 int64) {
		t.Helper()
		puts := make([]SeriesPut, n)
		for i := range puts {
			puts[i] = SeriesPut{Key: fmt.Sprintf("widen/s%02d", i), Points: series.Points{Type: series.Float,
				T: []int64{t0, t0 + int64(10*time.Second)}, F: []float64{1, 2}}, Tags: map[string]string{"truck": fmt.Sprint(i % 4)}}
		}
		for i, r := range c.PutMany(ctx, puts, wire.PutOptions{}) {
			if r.Err != nil || r.Stored != 2 || !r.Tagged {
				t.Fatalf("%s, series %d: stored %d, tagged %v, %v", what, i, r.Stored, r.Tagged, r.Err)
			}
		}
	}

	write("new series", base)
	if merges, _, catMerges, _, _, timedOut := rep.next(); catMerges != 1 || merges != 0 || timedOut {
		t.Fatalf("a write of %d new series: %d catalog merges, %d entry merges; want 1 and none", n, catMerges, merges)
	}

	later := base + int64(3*time.Hour)
	write("three hours later", later)
	merges, reads, catMerges, declares, postings, timedOut := rep.next()
	if merges != 1 || reads+catMerges+declares+postings != 0 {
		t.Errorf("a write of %d known series past their bounds: %d entry merges, %d reads, %d catalog merges, %d declarations, %d posting requests; want one entry merge and nothing else",
			n, merges, reads, catMerges, declares, postings)
	}
	if timedOut {
		t.Error("the entry merge of series that exist waited for points that never came: it went before the points, not beside them")
	}

	write("in the same hour and quantum", later)
	if merges, reads, catMerges, declares, postings, _ := rep.next(); merges+reads+catMerges+declares+postings != 0 {
		t.Errorf("a write within the bounds and the newest quantum: %d entry merges, %d reads, %d catalog merges, %d declarations, %d posting requests; want none",
			merges, reads, catMerges, declares, postings)
	}

	// What the replica holds, not the coordinator's cache.
	for i := range n {
		key := fmt.Sprintf("widen/s%02d", i)
		c.cat.forget(key)
		e, err := c.Entry(ctx, key)
		if err != nil || !e.Live() || !e.HasBounds || e.Last < later+int64(10*time.Second) || !e.HasNewest || e.Newest != later+int64(10*time.Second) {
			t.Fatalf("%s after the later write: %+v, %v; want bounds past %d and newest at it", key, e, err, later+int64(10*time.Second))
		}
	}
	pts, err := c.Latest(ctx, "widen/s07", 0, later+int64(time.Hour))
	if err != nil || pts.Len() != 1 || pts.T[0] != later+int64(10*time.Second) {
		t.Fatalf("Latest of widen/s07: %+v, %v; want the later write's newest point", pts, err)
	}

	// An entry the registry replica refuses to widen fails the write, though its points
	// went beside it: it is not acknowledged.
	rep.mu.Lock()
	rep.refuse = rpc.Errorf(wire.CodeDiskFull, "refused by the test") // not retried, as a placement failure is
	rep.mu.Unlock()
	puts := []SeriesPut{{Key: "widen/s03", Points: series.Points{Type: series.Float, T: []int64{later + int64(2*time.Hour)}, F: []float64{3}}}}
	if r := c.PutMany(ctx, puts, wire.PutOptions{}); r[0].Err == nil || !strings.Contains(r[0].Err.Error(), "refused by the test") {
		t.Fatalf("a write whose entry could not be widened: %+v; want the replica's refusal", r[0])
	}
}
