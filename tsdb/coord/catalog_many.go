package coord

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/cluster"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// The catalog work of many series at once.
//
// A write of line protocol names hundreds or thousands of series, and in a bulk load
// many of them are new, or cross an hour of bounds together. Readied one by one (a
// goroutine each, a bounded number at once), each stage of their catalog work — read the
// entry, post the new series in the index, merge the entry — went in coalesced calls
// of at most that many series, one stage after another, so a batch of N such series
// waited for about 3·N/maxPrepareParallel rounds, each a store commit and, with --sync
// always, a disk sync, at every registry replica. Here each stage goes for every series
// of the write at once: one call per registry replica (per posting list, for the
// index), cut only by the calls' own limits (entriesPerRead, cluster.MaxRequestBytes,
// entryReadsPerCall), so a write's catalog work costs three rounds, however many
// series it readies. The single-series functions (readEntry, mergeEntry, postMembers,
// noteWrite) are these of one series.
//
// The order of the stages is what a crash needs: a new series is posted in the index
// before its entry is merged (a retried write that finds no live entry posts it
// again), and both are stored at quorum before any of its points are written, so an
// acknowledged point's series is found by its tags after a crash. Its type is fixed
// at its registry replicas beside the read and the postings (catalogReady: write.go),
// and its entry merged only once that is done.

// catalogBatches groups items 0..n-1 by the registry (or posting) replicas of id(i),
// one batch per peer. An item whose replicas cannot be found gets its error in errs
// and goes nowhere; owners[i] is how many replicas item i has.
func (c *Coordinator) catalogBatches(ctx context.Context, n int, id func(i int) quanta.ID, what func(i int) string,
	errs []error, owners []int) []*cluster.PeerBatch[int] {
	return ownerBatches(ctx, c.place, c.cfg.RF, n, 0, id, what, errs, owners)
}

// ownerBatches is catalogBatches on place at rf, each batch of at most maxBatch items
// (0: no limit).
func ownerBatches(ctx context.Context, place cluster.Placement, rf, n, maxBatch int, id func(i int) quanta.ID, what func(i int) string,
	errs []error, owners []int) []*cluster.PeerBatch[int] {
	return sizedOwnerBatches(ctx, place, rf, n, maxBatch, nil, id, what, errs, owners)
}

// sizedOwnerBatches is ownerBatches whose batches are also cut by size (see
// cluster.GroupByPeer) when size is not nil.
func sizedOwnerBatches(ctx context.Context, place cluster.Placement, rf, n, maxBatch int, size func(i int) int, id func(i int) quanta.ID,
	what func(i int) string, errs []error, owners []int) []*cluster.PeerBatch[int] {
	return cluster.GroupByPeer(func(yield func(dht.Peer, int) bool) {
		for i := range n {
			if errs[i] != nil {
				continue
			}
			peers, err := place.Locate(ctx, id(i), rf)
			if err != nil || len(peers) == 0 {
				errs[i] = rpc.Errorf(wire.CodeUnavailable, "%s: no replica found: %v", what(i), err)
				continue
			}
			owners[i] = len(peers)
			for _, p := range peers {
				if !yield(p, i) {
					return
				}
			}
		}
	}, maxBatch, size)
}

// manyAnswer is one replica's answers to a batch of items, one per item.
type manyAnswer[Out any] struct {
	outs []Out
	errs []error
}

// eachAnswer calls f with every item's answer from every batch (its error: the batch's
// or the item's), as the batches finish.
func eachAnswer[Out any](batches []*cluster.PeerBatch[int], answers <-chan cluster.FanResult[int, manyAnswer[Out]], f func(i int, out Out, err error)) {
	for range batches {
		a := <-answers
		for j, i := range a.Batch.Items {
			var out Out
			err := a.Err
			if err == nil {
				out, err = a.Resp.outs[j], a.Resp.errs[j]
			}
			f(i, out, err)
		}
	}
}

// readEntriesQuorum reads the entries of keys from their registry replicas, merged per key;
// found[i] says whether any replica holds keys[i]. A read quorum must answer for each.
func (c *Coordinator) readEntriesQuorum(ctx context.Context, keys []string) (merged []catalog.Entry, found []bool, errs []error) {
	return c.readEntriesAt(ctx, keys, c.cfg.ReadQuorum)
}

// readEntriesAt is readEntriesQuorum with a read quorum of r.
func (c *Coordinator) readEntriesAt(ctx context.Context, keys []string, r int) (merged []catalog.Entry, found []bool, errs []error) {
	n := len(keys)
	merged, found, errs = make([]catalog.Entry, n), make([]bool, n), make([]error, n)
	owners, oks, last := make([]int, n), make([]int, n), make([]error, n)
	what := func(i int) string { return fmt.Sprintf("catalog entry of %q", keys[i]) }
	batches := c.catalogBatches(ctx, n, func(i int) quanta.ID { return quanta.KeyID(keys[i]) }, what, errs, owners)
	answers := cluster.FanOut(ctx, batches, 0, c.cfg.CallTimeout, func(ctx context.Context, b *cluster.PeerBatch[int]) (manyAnswer[[]catalog.Entry], error) {
		ks := make([]string, len(b.Items))
		for j, i := range b.Items {
			ks[j] = keys[i]
		}
		outs, errs := c.cat.entryReads.doMany(ctx, b.Peer, ks)
		return manyAnswer[[]catalog.Entry]{outs, errs}, nil
	})
	eachAnswer(batches, answers, func(i int, es []catalog.Entry, err error) {
		if err != nil {
			last[i] = err
			return
		}
		oks[i]++
		for _, e := range es {
			if e.Key != keys[i] {
				continue
			}
			if found[i] {
				merged[i] = catalog.Merge(merged[i], e)
			} else {
				merged[i], found[i] = e, true
			}
		}
	})
	for i := range keys {
		if need := min(r, owners[i]); errs[i] == nil && oks[i] < need {
			errs[i] = rpc.Errorf(wire.CodeUnavailable, "catalog entry of %q: %d of %d registry replicas answered, %d needed: %v",
				keys[i], oks[i], owners[i], need, last[i])
		}
		if errs[i] != nil {
			merged[i], found[i] = catalog.Entry{}, false
		}
	}
	return merged, found, errs
}

// mergeEntries merges each of es at its series' registry replicas and returns, for
// each, the merge of their answers; at least w must answer for each. An entry the
// replicas would refuse goes alone, so that it fails no other. with[i], when there is
// one, is es[i]'s series' postings, whose lists its registry replicas keep
// (postsWithEntry): they go in the same request as the entry, stored in the same
// commit (catalog_together.go).
func (c *Coordinator) mergeEntries(ctx context.Context, es []catalog.Entry, w int, with map[int]posting) ([]catalog.Entry, []error) {
	n := len(es)
	merged, errs := make([]catalog.Entry, n), make([]error, n)
	owners, oks, last := make([]int, n), make([]int, n), make([]error, n)
	what := func(i int) string { return fmt.Sprintf("catalog entry of %q", es[i].Key) }
	var batches []*cluster.PeerBatch[int]
	if len(with) == 0 {
		batches = c.catalogBatches(ctx, n, func(i int) quanta.ID { return quanta.KeyID(es[i].Key) }, what, errs, owners)
	} else {
		batches = sizedOwnerBatches(ctx, c.place, c.cfg.RF, n, cluster.EntryBatch, withSize(es, with),
			func(i int) quanta.ID { return quanta.KeyID(es[i].Key) }, what, errs, owners)
	}
	answers := cluster.FanOut(ctx, batches, 0, c.cfg.CallTimeout, func(ctx context.Context, b *cluster.PeerBatch[int]) (manyAnswer[catalog.Entry], error) {
		outs, errs := make([]catalog.Entry, len(b.Items)), make([]error, len(b.Items))
		var valid []int // of b.Items
		var ins []catalog.Entry
		var idx []int // of es, per valid item
		posts := false
		for j, i := range b.Items {
			if es[i].Validate() != nil {
				got, err := c.replicas.For(b.Peer).MergeEntries(ctx, []catalog.Entry{es[i]})
				if err == nil && len(got) != 1 {
					err = fmt.Errorf("catalog entry of %q: %d answers to one entry", es[i].Key, len(got))
				}
				if err == nil {
					outs[j] = got[0]
				}
				errs[j] = err
				continue
			}
			valid = append(valid, j)
			ins = append(ins, es[i])
			idx = append(idx, i)
			_, has := with[i]
			posts = posts || has
		}
		if posts {
			got, err := c.mergeWithPostings(ctx, b.Peer, es, idx, with)
			for k, j := range valid {
				if errs[j] = err; err == nil {
					outs[j] = got[k]
				}
			}
			return manyAnswer[catalog.Entry]{outs, errs}, nil
		}
		got, gotErrs := c.cat.entryMerges.doMany(ctx, b.Peer, ins)
		for k, j := range valid {
			outs[j], errs[j] = got[k], gotErrs[k]
		}
		return manyAnswer[catalog.Entry]{outs, errs}, nil
	})
	for i := range es {
		merged[i] = es[i]
	}
	eachAnswer(batches, answers, func(i int, e catalog.Entry, err error) {
		if err != nil {
			last[i] = errors.Join(err, last[i])
			return
		}
		oks[i]++
		merged[i] = catalog.Merge(merged[i], e)
	})
	for i := range es {
		if errs[i] == nil && oks[i] < min(w, owners[i]) {
			errs[i] = rpc.Errorf(quorumCode(last[i]), "catalog entry of %q stored at %d of %d registry replicas, %d needed: %v",
				es[i].Key, oks[i], owners[i], w, last[i])
		}
		if errs[i] != nil {
			merged[i] = catalog.Entry{}
		}
	}
	return merged, errs
}

// posting is a member to merge into each of tags' posting lists.
type posting struct {
	tags []catalog.Tag
	m    catalog.Member
}

// postMany merges each posting's member into each of its tags' posting lists: every
// list a replica keeps in one request to it (with the members other writers are posting
// there meanwhile: coalesce.go), at least w replicas of each list, and returns each
// posting's error. A tag or member the replicas would refuse goes alone.
func (c *Coordinator) postMany(ctx context.Context, ps []posting, w int) []error {
	errs := make([]error, len(ps))
	var items []tagMember
	var of []int // of ps, per item
	var mu sync.Mutex
	var wg sync.WaitGroup
	for p, x := range ps {
		for _, t := range x.tags {
			if catalog.ValidateIndexTag(t) != nil || catalog.ValidateMember(x.m) != nil {
				wg.Go(func() {
					if err := c.mergePostings(ctx, t, []catalog.Member{x.m}, w); err != nil {
						mu.Lock()
						errs[p] = errors.Join(errs[p], err)
						mu.Unlock()
					}
				})
				continue
			}
			items, of = append(items, tagMember{t, x.m}), append(of, p)
		}
	}
	n := len(items)
	itemErrs, owners, oks, last := make([]error, n), make([]int, n), make([]int, n), make([]error, n)
	what := func(i int) string { return "postings of " + items[i].tag.String() }
	batches := c.catalogBatches(ctx, n, func(i int) quanta.ID { return items[i].tag.ID() }, what, itemErrs, owners)
	answers := cluster.FanOut(ctx, batches, 0, c.cfg.CallTimeout, func(ctx context.Context, b *cluster.PeerBatch[int]) (manyAnswer[struct{}], error) {
		ins := make([]tagMember, len(b.Items))
		for j, i := range b.Items {
			ins[j] = items[i]
		}
		outs, errs := c.cat.postings.doMany(ctx, b.Peer, ins)
		return manyAnswer[struct{}]{outs, errs}, nil
	})
	eachAnswer(batches, answers, func(i int, _ struct{}, err error) {
		if err != nil {
			last[i] = err
			return
		}
		oks[i]++
	})
	wg.Wait()
	for i := range items {
		if itemErrs[i] == nil && oks[i] < min(w, owners[i]) {
			itemErrs[i] = rpc.Errorf(quorumCode(last[i]), "tag index: postings of %s stored at %d of %d replicas, %d needed: %v",
				items[i].tag, oks[i], owners[i], w, last[i])
		}
		if itemErrs[i] != nil {
			errs[of[i]] = errors.Join(errs[of[i]], itemErrs[i])
		}
	}
	return errs
}

// noteReq is the catalog work a write asks of one series: its entry must be live with
// type e.Type and its bounds cover [minT, maxT].
type noteReq struct {
	key        string
	e          catalog.Entry
	minT, maxT int64
	tags       []catalog.Tag // normalized: a new series is created with them
}

// noteWrites keeps the catalog entries of the series of a write (noteWrite, for each of
// reqs), every stage for every series at once, and returns each series' error and
// whether its entry holds every tag of its request (a new series is created with them,
// posted under them beside its prefix). typed, when not nil, waits for the series'
// types to be fixed (declareBeside: an error per request); an entry is merged only for
// a series whose type was.
//
// later, when not nil, takes the entries of series that exist (live, of the request's
// type) and only need their bounds widened or their newest recorded (not an ahead,
// which still goes before the points): they are not
// merged here but left in later, to be merged beside the points (widenBeside:
// widen_beside.go); their errs and tagged are settled there.
func (c *Coordinator) noteWrites(ctx context.Context, reqs []noteReq, w int, typed func() []error, later *laterMerges) (errs []error, tagged []bool) {
	k := c.cat
	errs, tagged = make([]error, len(reqs)), make([]bool, len(reqs))
	now := time.Now().UnixNano()
	ahead := func(r noteReq) bool { return r.maxT > now+int64(aheadSlack) }
	covers := func(r noteReq, cur catalog.Entry) bool {
		return cur.Live() && cur.Type == r.e.Type && cur.HasBounds && cur.First <= r.minT && r.maxT <= cur.Last &&
			(!ahead(r) || cur.HasAhead && r.maxT <= cur.Ahead)
	}
	// The entries known: cached, or read from the registry replicas.
	curs := make([]catalog.Entry, len(reqs))
	var unknown []int
	var todo []int // series whose entry must change
	for i, r := range reqs {
		cur, ok := k.cached(r.key)
		switch {
		case ok && covers(r, cur):
			tagged[i] = catalog.Matches(cur.Tags, r.tags)
		case ok:
			curs[i] = cur
			todo = append(todo, i)
		default:
			unknown = append(unknown, i)
		}
	}
	if len(unknown) > 0 {
		keys := make([]string, len(unknown))
		for j, i := range unknown {
			keys[j] = reqs[i].key
		}
		got, found, rerrs := c.readEntriesQuorum(ctx, keys)
		for j, i := range unknown {
			if found[j] {
				k.clock.Observe(max(got[j].Created, got[j].MetaVersion, got[j].Deleted))
			}
			switch {
			case rerrs[j] != nil:
				errs[i] = rerrs[j]
			case covers(reqs[i], got[j]):
				k.remember(got[j])
				tagged[i] = catalog.Matches(got[j].Tags, reqs[i].tags)
			default:
				curs[i] = got[j]
				todo = append(todo, i)
			}
		}
	}
	// A new series, or one deleted since (a new incarnation), is posted in the index
	// before its entry is merged.
	upds := make([]catalog.Entry, len(todo))
	var posts []posting
	var posted []int // of todo
	for j, i := range todo {
		r, cur := reqs[i], curs[i]
		created := !cur.Live() || cur.Type != r.e.Type
		if created {
			cur = catalog.Entry{Key: r.key, Type: r.e.Type, Created: k.clock.Now(), Deleted: cur.Deleted}
		}
		upds[j] = c.boundsUpdate(r, cur, ahead(r))
		if !created {
			continue
		}
		var tags []catalog.Tag
		if withTags := upds[j]; len(r.tags) > 0 {
			withTags.Tags, withTags.MetaVersion = r.tags, cur.Created
			if withTags.Validate() == nil {
				upds[j], tags = withTags, r.tags
			}
		}
		posts = append(posts, posting{catalog.IndexTags(r.key, tags), catalog.Member{Key: r.key, Version: cur.Created}})
		posted = append(posted, j)
	}
	// Postings whose lists the series' registry replicas keep go with its entry; the
	// others are stored first.
	with := map[int]posting{}   // of ins, below
	withOf := map[int]posting{} // of todo
	var first []posting
	var firstOf []int // of todo
	for p, x := range posts {
		if upds[posted[p]].Validate() == nil && c.postsWithEntry(ctx, x) {
			withOf[posted[p]] = x
			continue
		}
		first, firstOf = append(first, x), append(firstOf, posted[p])
	}
	if len(first) > 0 {
		for p, err := range c.postMany(ctx, first, w) {
			if err != nil {
				errs[todo[firstOf[p]]] = err
			}
		}
	}
	var terrs []error
	if typed != nil && len(todo) > 0 {
		terrs = typed()
	}
	var send []int // of todo
	var ins []catalog.Entry
	for j, i := range todo {
		if terrs != nil && terrs[i] != nil && errs[i] == nil {
			errs[i] = terrs[i]
		}
		if errs[i] != nil {
			continue
		}
		if _, posts := withOf[j]; later != nil && !posts && curs[i].Live() && curs[i].Type == reqs[i].e.Type && !ahead(reqs[i]) {
			later.add(i, reqs[i], upds[j])
			continue
		}
		if x, ok := withOf[j]; ok {
			with[len(ins)] = x
		}
		send = append(send, j)
		ins = append(ins, upds[j])
	}
	if len(ins) == 0 {
		return errs, tagged
	}
	merged, merrs := c.mergeEntries(ctx, ins, w, with)
	for s, j := range send {
		i := todo[j]
		tagged[i], errs[i] = c.settleMerge(ctx, w, reqs[i], upds[j], merged[s], merrs[s])
	}
	return errs, tagged
}

// settleMerge completes the merge of upd, the entry update of a write's request r,
// given the registry replicas' merged answer m (or their error): it merges again once
// when another coordinator's incarnation won, remembers the entry and the newest it
// holds, and returns whether its entry holds r's tags, or the series' error.
func (c *Coordinator) settleMerge(ctx context.Context, w int, r noteReq, upd, m catalog.Entry, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	if m.Live() && m.Type == upd.Type && m.Created != upd.Created {
		// Another coordinator created the series at the same time, and its
		// incarnation won (catalog.Merge keeps the newest): these points are the
		// series' all the same, so its bounds must cover them too. Once is enough:
		// the winner is live, and a later incarnation would need a delete, after
		// which a write starts over.
		upd.Created = m.Created
		if m, err = c.mergeEntry(ctx, upd, w); err != nil {
			return false, err
		}
	}
	c.cat.remember(m)
	if upd.HasNewest {
		c.noteNewest(upd.Key, upd.Created, upd.Newest)
	}
	return catalog.Matches(m.Tags, r.tags), nil
}

// boundsUpdate is the entry update that makes cur (live, of r's type) cover r: its
// bounds widened to whole steps, Ahead when the write is stamped past the clock, and
// the write's newest point when that starts a newer quantum.
func (c *Coordinator) boundsUpdate(r noteReq, cur catalog.Entry, ahead bool) catalog.Entry {
	upd := catalog.Entry{Key: r.key, Type: cur.Type, Created: cur.Created, HasBounds: true,
		First: floorStep(r.minT), Last: ceilStep(r.maxT)}
	if cur.HasBounds {
		upd.First, upd.Last = min(upd.First, cur.First), max(upd.Last, cur.Last)
	}
	if ahead {
		// Rounded up to a minute, so a device whose clock runs ahead costs one update a
		// minute, not one per write.
		upd.Ahead, upd.HasAhead = r.maxT, true
		if m := int64(time.Minute); r.maxT < math.MaxInt64-m {
			upd.Ahead = min(r.maxT/m*m+m-1, upd.Last)
		}
	}
	// The entry goes to the registry replicas anyway: it carries the write's newest
	// point too, when that starts a newer quantum (bounds.go), instead of a second
	// round beside the points. A backfill crosses a quantum about as often as an hour
	// of bounds, each series twice per quantum otherwise.
	if c.needsNewest(r.key, upd, r.maxT) {
		upd.HasNewest, upd.Newest = true, r.maxT
	}
	return upd
}
