package coord

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tsdht/tsdht/tsdb/cluster"

	"github.com/tsdht/tsdht/dht"
	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/catalog"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// The coordinator's side of the catalog (docs/catalog.md): a series' entry lives at
// quorum on its registry replicas (the replica set of quanta.KeyID(key), where its type
// lives), each posting list on its tag's replica set (quanta.TagID).

// boundsStep is the rounding of an entry's First and Last: a write updates the entry
// only when it falls outside the bounds rounded out to whole hours, so a series
// streaming in order costs one entry update per hour per coordinator, not per write.
const boundsStep = int64(time.Hour)

// entryCacheTTL is how long a coordinator trusts what it knows of an entry. A whole-
// series delete coordinated elsewhere is seen by this node's writes at most this late.
const entryCacheTTL = time.Minute

// maxEntryCache bounds the entries a coordinator remembers; past it the cache starts over.
const maxEntryCache = 1 << 16

// catalogCoord is the coordinator's catalog state.
type catalogCoord struct {
	clock catalog.Clock
	mu    sync.Mutex
	cache map[string]cachedEntry

	// Concurrent catalog calls, coalesced per target (coalesce.go).
	postings    *coalescer[postingTarget, catalog.Member, struct{}]
	entryMerges *coalescer[dht.Peer, catalog.Entry, catalog.Entry]
	entryReads  *coalescer[dht.Peer, string, []catalog.Entry]
}

// entryReadsPerCall bounds the keys of a coalesced entry read: its answer, entries of at
// most about 27 KB each (catalog limits: 64 tags), stays inside an RPC frame (4 MiB).
const entryReadsPerCall = 128

// memberSize and entrySize are what a member and an entry add to a request, about.
func memberSize(m catalog.Member) int { return len(m.Key) + 16 }

func entrySize(e catalog.Entry) int {
	n := len(e.Key) + len(e.Unit) + len(e.Description) + 96
	for _, t := range e.Tags {
		n += len(t.K) + len(t.V) + 8
	}
	return n
}

// postingTarget is a posting list and the write quorum its merges need.
type postingTarget struct {
	tag catalog.Tag
	w   int
}

// newCatalogCoord returns c's catalog state, its coalescers calling c's replicas.
func newCatalogCoord(c *Coordinator) *catalogCoord {
	return &catalogCoord{
		postings: newCoalescer(entriesPerRead, cluster.MaxRequestBytes, memberSize, func(ctx context.Context, t postingTarget, ms []catalog.Member) ([]struct{}, error) {
			return make([]struct{}, len(ms)), c.mergePostings(ctx, t.tag, ms, t.w)
		}),
		entryMerges: newCoalescer(entriesPerRead, cluster.MaxRequestBytes, entrySize, func(ctx context.Context, p dht.Peer, es []catalog.Entry) ([]catalog.Entry, error) {
			return c.replicas.For(p).MergeEntries(ctx, es)
		}),
		// An answer holds the entries asked for, of unknown size: at most entryReadsPerCall.
		entryReads: newCoalescer(entryReadsPerCall, math.MaxInt, func(string) int { return 0 }, func(ctx context.Context, p dht.Peer, keys []string) ([][]catalog.Entry, error) {
			found, err := c.replicas.For(p).Entries(ctx, keys)
			if err != nil {
				return nil, err
			}
			at := make(map[string]int, len(keys))
			for i, k := range keys {
				at[k] = i // a key asked twice: the answer goes to the last
			}
			out := make([][]catalog.Entry, len(keys))
			for _, e := range found {
				if i, ok := at[e.Key]; ok {
					out[i] = append(out[i], e)
				}
			}
			for i, k := range keys {
				if j := at[k]; j != i {
					out[i] = out[j]
				}
			}
			return out, nil
		}),
	}
}

type cachedEntry struct {
	e    catalog.Entry
	seen time.Time
}

func (k *catalogCoord) cached(key string) (catalog.Entry, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	ce, ok := k.cache[key]
	if !ok || time.Since(ce.seen) > entryCacheTTL {
		return catalog.Entry{}, false
	}
	return ce.e, true
}

func (k *catalogCoord) remember(e catalog.Entry) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cache == nil || len(k.cache) >= maxEntryCache {
		k.cache = make(map[string]cachedEntry)
	}
	k.cache[e.Key] = cachedEntry{e: e, seen: time.Now()}
}

func (k *catalogCoord) forget(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.cache, key)
}

func floorStep(t int64) int64 {
	f := t / boundsStep * boundsStep
	if t < 0 && t%boundsStep != 0 {
		f -= boundsStep
	}
	return f
}

func ceilStep(t int64) int64 { // the last ns of t's step
	f := floorStep(t)
	if f > math.MaxInt64-boundsStep {
		return math.MaxInt64
	}
	return f + boundsStep - 1
}

// owners returns the replica set of a catalog ID.
func (c *Coordinator) catalogOwners(ctx context.Context, id quanta.ID, what string) ([]*cluster.PeerBatch[struct{}], error) {
	peers, err := c.place.Locate(ctx, id, c.cfg.RF)
	if err != nil || len(peers) == 0 {
		return nil, rpc.Errorf(wire.CodeUnavailable, "%s: no replica found: %v", what, err)
	}
	out := make([]*cluster.PeerBatch[struct{}], len(peers))
	for i, p := range peers {
		out[i] = &cluster.PeerBatch[struct{}]{Peer: p, Items: []struct{}{{}}}
	}
	return out, nil
}

// mergeEntry merges e at the series' registry replicas and returns the merge of their
// answers; at least w must answer.
func (c *Coordinator) mergeEntry(ctx context.Context, e catalog.Entry, w int) (catalog.Entry, error) {
	owners, err := c.catalogOwners(ctx, quanta.KeyID(e.Key), fmt.Sprintf("catalog entry of %q", e.Key))
	if err != nil {
		return catalog.Entry{}, err
	}
	// An entry the replicas would refuse goes alone, so that it fails no other.
	alone := e.Validate() != nil
	answers := cluster.FanOut(ctx, owners, 0, c.cfg.CallTimeout, func(ctx context.Context, b *cluster.PeerBatch[struct{}]) ([]catalog.Entry, error) {
		if alone {
			return c.replicas.For(b.Peer).MergeEntries(ctx, []catalog.Entry{e})
		}
		m, err := c.cat.entryMerges.do(ctx, b.Peer, e)
		return []catalog.Entry{m}, err
	})
	merged, ok := e, 0
	var lastErr error
	for range owners {
		a := <-answers
		if a.Err != nil || len(a.Resp) != 1 {
			lastErr = errors.Join(a.Err, lastErr)
			continue
		}
		ok++
		merged = catalog.Merge(merged, a.Resp[0])
	}
	if ok < min(w, len(owners)) {
		return catalog.Entry{}, rpc.Errorf(quorumCode(lastErr), "catalog entry of %q stored at %d of %d registry replicas, %d needed: %v",
			e.Key, ok, len(owners), w, lastErr)
	}
	return merged, nil
}

// readEntry reads a series' entry from its registry replicas and merges the answers.
func (c *Coordinator) readEntry(ctx context.Context, key string) (catalog.Entry, bool, error) {
	owners, err := c.catalogOwners(ctx, quanta.KeyID(key), fmt.Sprintf("catalog entry of %q", key))
	if err != nil {
		return catalog.Entry{}, false, err
	}
	answers := cluster.FanOut(ctx, owners, 0, c.cfg.CallTimeout, func(ctx context.Context, b *cluster.PeerBatch[struct{}]) ([]catalog.Entry, error) {
		return c.cat.entryReads.do(ctx, b.Peer, key)
	})
	var merged catalog.Entry
	found, ok := false, 0
	var lastErr error
	for range owners {
		a := <-answers
		if a.Err != nil {
			lastErr = a.Err
			continue
		}
		ok++
		for _, e := range a.Resp {
			if e.Key != key {
				continue
			}
			if found {
				merged = catalog.Merge(merged, e)
			} else {
				merged, found = e, true
			}
		}
	}
	if need := min(c.cfg.ReadQuorum, len(owners)); ok < need {
		return catalog.Entry{}, false, rpc.Errorf(wire.CodeUnavailable, "catalog entry of %q: %d of %d registry replicas answered, %d needed: %v",
			key, ok, len(owners), need, lastErr)
	}
	return merged, found, nil
}

// mergePostings merges members into tag's posting list at its replicas; at least w
// must answer.
func (c *Coordinator) mergePostings(ctx context.Context, tag catalog.Tag, ms []catalog.Member, w int) error {
	owners, err := c.catalogOwners(ctx, tag.ID(), "postings of "+tag.String())
	if err != nil {
		return err
	}
	answers := cluster.FanOut(ctx, owners, 0, c.cfg.CallTimeout, func(ctx context.Context, b *cluster.PeerBatch[struct{}]) (struct{}, error) {
		return struct{}{}, c.replicas.For(b.Peer).MergePostings(ctx, tag, ms)
	})
	ok := 0
	var lastErr error
	for range owners {
		if a := <-answers; a.Err != nil {
			lastErr = a.Err
		} else {
			ok++
		}
	}
	if ok < min(w, len(owners)) {
		return rpc.Errorf(quorumCode(lastErr), "tag index: postings stored at %d of %d replicas, %d needed: %v", ok, len(owners), w, lastErr)
	}
	return nil
}

// postMembers merges one member into each tag's posting list, all tags at once, each
// with the members other writers are posting to it meanwhile (coalesce.go).
func (c *Coordinator) postMembers(ctx context.Context, tags []catalog.Tag, m catalog.Member, w int) error {
	errs := make([]error, len(tags))
	var wg sync.WaitGroup
	for i, t := range tags {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if catalog.ValidateIndexTag(t) != nil || catalog.ValidateMember(m) != nil {
				// Refused: alone, so that it fails no other member.
				errs[i] = c.mergePostings(ctx, t, []catalog.Member{m}, w)
				return
			}
			_, errs[i] = c.cat.postings.do(ctx, postingTarget{t, w}, m)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// readPostings reads a page of tag's posting list from its replicas, merged: at least
// the read quorum must answer. The page is cut where every full replica page still
// covers it, so a key one replica has and another has not is never skipped.
func (c *Coordinator) readPostings(ctx context.Context, tag catalog.Tag, after string, limit int) ([]catalog.Member, error) {
	owners, err := c.catalogOwners(ctx, tag.ID(), "postings of "+tag.String())
	if err != nil {
		return nil, err
	}
	answers := cluster.FanOut(ctx, owners, 0, c.cfg.CallTimeout, func(ctx context.Context, b *cluster.PeerBatch[struct{}]) ([]catalog.Member, error) {
		return c.replicas.For(b.Peer).Postings(ctx, tag, after, limit)
	})
	var lists [][]catalog.Member
	ok := 0
	cut := ""
	full := false
	var lastErr error
	for range owners {
		a := <-answers
		if a.Err != nil {
			lastErr = a.Err
			continue
		}
		ok++
		lists = append(lists, a.Resp)
		if len(a.Resp) == limit {
			last := a.Resp[len(a.Resp)-1].Key
			if !full || last < cut {
				cut = last
			}
			full = true
		}
	}
	if need := min(c.cfg.ReadQuorum, len(owners)); ok < need {
		return nil, rpc.Errorf(wire.CodeUnavailable, "tag index: %d of %d replicas of %s answered, %d needed: %v", ok, len(owners), tag, need, lastErr)
	}
	out := mergeMembers(lists) // postings_merge.go
	if full {
		out = out[:sort.Search(len(out), func(i int) bool { return out[i].Key > cut })]
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// noteWrite keeps the catalog entry of a series being written: it creates the entry
// (and posts the series in the index) when the series has none, and widens its time
// bounds (and its Ahead, for points stamped past the clock) before points outside them
// are written. Cheap when nothing changes: the
// coordinator's cache answers.
func (c *Coordinator) noteWrite(ctx context.Context, key string, e catalog.Entry, minT, maxT int64, w int) error {
	k := c.cat
	// A write stamped past the clock's slack records how far ahead it went (bounds.go).
	ahead := maxT > time.Now().UnixNano()+int64(aheadSlack)
	covers := func(cur catalog.Entry) bool {
		return cur.Live() && cur.Type == e.Type && cur.HasBounds && cur.First <= minT && maxT <= cur.Last &&
			(!ahead || cur.HasAhead && maxT <= cur.Ahead)
	}
	cur, ok := k.cached(key)
	if ok && covers(cur) {
		return nil
	}
	if !ok {
		got, found, err := c.readEntry(ctx, key)
		if err != nil {
			return err
		}
		cur = got
		if found {
			k.clock.Observe(max(cur.Created, cur.MetaVersion, cur.Deleted))
		}
	}
	if covers(cur) {
		k.remember(cur)
		return nil
	}
	if !cur.Live() || cur.Type != e.Type {
		// A new series, or one deleted since: a new incarnation.
		cur = catalog.Entry{Key: key, Type: e.Type, Created: k.clock.Now(), Deleted: cur.Deleted}
		m := catalog.Member{Key: key, Version: cur.Created}
		if err := c.postMembers(ctx, catalog.IndexTags(key, nil), m, w); err != nil {
			return err
		}
	}
	upd := catalog.Entry{Key: key, Type: cur.Type, Created: cur.Created, HasBounds: true,
		First: floorStep(minT), Last: ceilStep(maxT)}
	if cur.HasBounds {
		upd.First, upd.Last = min(upd.First, cur.First), max(upd.Last, cur.Last)
	}
	if ahead {
		// Rounded up to a minute, so a device whose clock runs ahead costs one update a
		// minute, not one per write.
		upd.Ahead, upd.HasAhead = maxT, true
		if m := int64(time.Minute); maxT < math.MaxInt64-m {
			upd.Ahead = min(maxT/m*m+m-1, upd.Last)
		}
	}
	// The entry goes to the registry replicas anyway: it carries the write's newest
	// point too, when that starts a newer quantum (bounds.go), instead of a second
	// round beside the points. A backfill crosses a quantum about as often as an hour
	// of bounds, each series twice per quantum otherwise.
	newest := c.needsNewest(key, upd, maxT)
	if newest {
		upd.HasNewest, upd.Newest = true, maxT
	}
	merged, err := c.mergeEntry(ctx, upd, w)
	if err != nil {
		return err
	}
	if merged.Live() && merged.Type == upd.Type && merged.Created != upd.Created {
		// Another coordinator created the series at the same time, and its incarnation
		// won (catalog.Merge keeps the newest): these points are the series' all the
		// same, so its bounds must cover them too. Once is enough: the winner is live,
		// and a later incarnation would need a delete, after which a write starts over.
		upd.Created = merged.Created
		if merged, err = c.mergeEntry(ctx, upd, w); err != nil {
			return err
		}
	}
	k.remember(merged)
	if newest {
		c.noteNewest(key, upd.Created, maxT)
	}
	return nil
}

// Entry returns a series' catalog entry, read from its registry replicas.
func (c *Coordinator) Entry(ctx context.Context, key string) (catalog.Entry, error) {
	e, found, err := c.readEntry(ctx, key)
	if err != nil {
		return catalog.Entry{}, err
	}
	if !found || !e.Live() {
		return catalog.Entry{}, rpc.Errorf(wire.CodeUnknownSeries, "unknown series %q (no catalog entry)", key)
	}
	return e, nil
}

// Meta changes a series' unit, description, nominal rate or tags and returns the entry.
func (c *Coordinator) Meta(ctx context.Context, req *wire.MetaReq) (catalog.Entry, error) {
	cur, err := c.Entry(ctx, req.Key)
	if err != nil {
		return catalog.Entry{}, err
	}
	k := c.cat
	k.clock.Observe(max(cur.Created, cur.MetaVersion, cur.Deleted))
	upd := catalog.Entry{Key: req.Key, Unit: cur.Unit, Description: cur.Description, NominalRate: cur.NominalRate, Tags: cur.Tags}
	if req.SetUnit {
		upd.Unit = req.Unit
	}
	if req.SetDescription {
		upd.Description = req.Description
	}
	if req.SetRate {
		upd.NominalRate = req.NominalRate
	}
	if req.SetTags {
		tags, err := catalog.ParseTags(req.Tags...)
		if err != nil {
			return catalog.Entry{}, rpc.Errorf(wire.CodeBadInput, "--tag: %v", err)
		}
		if len(req.Pairs)%2 != 0 {
			return catalog.Entry{}, rpc.Errorf(wire.CodeBadInput, "tag pairs: an odd count (%d)", len(req.Pairs))
		}
		for i := 0; i+1 < len(req.Pairs); i += 2 {
			tags = append(tags, catalog.Tag{K: req.Pairs[i], V: req.Pairs[i+1]})
		}
		if tags, err = catalog.NormalizeTags(tags); err != nil {
			return catalog.Entry{}, rpc.Errorf(wire.CodeBadInput, "tags: %v", err)
		}
		if req.AddTags {
			merged := map[string]string{}
			for _, t := range cur.Tags {
				merged[t.K] = t.V
			}
			for _, t := range tags {
				merged[t.K] = t.V
			}
			tags = tags[:0]
			for k, v := range merged {
				tags = append(tags, catalog.Tag{K: k, V: v})
			}
			if tags, err = catalog.NormalizeTags(tags); err != nil {
				return catalog.Entry{}, rpc.Errorf(wire.CodeBadInput, "--tag: %v", err)
			}
		}
		upd.Tags = tags
	}
	upd.MetaVersion = k.clock.Now()
	if err := upd.Validate(); err != nil {
		return catalog.Entry{}, rpc.Errorf(wire.CodeBadInput, "%v", err)
	}
	w := c.cfg.WriteQuorum
	// Postings first: a listing checks every hit against its entry, so a posting
	// without its entry is harmless, while an entry without its posting is unfindable.
	var added, removed []catalog.Tag
	for _, t := range upd.Tags {
		if !catalog.Matches(cur.Tags, []catalog.Tag{t}) {
			added = append(added, t)
		}
	}
	for _, t := range cur.Tags {
		if !catalog.Matches(upd.Tags, []catalog.Tag{t}) {
			removed = append(removed, t)
		}
	}
	if err := c.postMembers(ctx, added, catalog.Member{Key: req.Key, Version: upd.MetaVersion}, w); err != nil {
		return catalog.Entry{}, err
	}
	merged, err := c.mergeEntry(ctx, upd, w)
	if err != nil {
		return catalog.Entry{}, err
	}
	if err := c.postMembers(ctx, removed, catalog.Member{Key: req.Key, Version: upd.MetaVersion, Removed: true}, w); err != nil {
		return catalog.Entry{}, err
	}
	c.cat.remember(merged)
	return merged, nil
}

// Series lists the entries of the series q selects, sorted by key. Posting lists
// narrow the candidates; every candidate is then checked against its entry, so a stale
// posting never shows.
func (c *Coordinator) Series(ctx context.Context, q catalog.Query) ([]catalog.Entry, error) {
	keys, err := catalog.Candidates(ctx, c.readPostings, q) // each checked against its entry below
	if err != nil {
		var re *rpc.RemoteError
		if errors.As(err, &re) {
			return nil, err
		}
		return nil, rpc.Errorf(wire.CodeBadInput, "%v", err)
	}
	entries, err := c.entries(ctx, keys)
	if err != nil {
		return nil, err
	}
	out := entries[:0]
	for _, e := range entries {
		if e.Live() && strings.HasPrefix(e.Key, q.Prefix) && catalog.Matches(e.Tags, q.Match) {
			out = append(out, e)
		}
	}
	return out, nil
}

// entriesPerRead bounds the keys of one entry read, so that its answer (entries of up
// to a few hundred bytes) stays well inside a frame.
const entriesPerRead = 2000

// entries reads the entries of many series: one request per registry replica, merged.
func (c *Coordinator) entries(ctx context.Context, keys []string) ([]catalog.Entry, error) {
	read, err := c.readEntries(ctx, keys)
	if err != nil {
		return nil, err
	}
	out := make([]catalog.Entry, 0, len(read.byKey))
	for _, k := range keys {
		if e, ok := read.byKey[k]; ok {
			out = append(out, e)
		}
	}
	return out, nil
}

// entriesRead is what readEntries read: the merged entry of each key some registry
// replica holds, and for each key how many of its registry replicas answered of how
// many were asked.
type entriesRead struct {
	byKey            map[string]catalog.Entry
	answered, owners map[string]int
}

// atQuorum reports whether key's entry (or its absence) was read from a read quorum
// r of its registry replicas (all of them, when fewer).
func (e *entriesRead) atQuorum(key string, r int) bool {
	return e.answered[key] >= min(r, e.owners[key])
}

// readEntries reads the entries of many series: one request per registry replica,
// merged; it fails only when no replica answered.
func (c *Coordinator) readEntries(ctx context.Context, keys []string) (*entriesRead, error) {
	type owned struct {
		peers []dht.Peer
		key   string
	}
	read := &entriesRead{byKey: make(map[string]catalog.Entry, len(keys)), answered: make(map[string]int, len(keys)),
		owners: make(map[string]int, len(keys))}
	var work []owned
	for _, k := range keys {
		peers, err := c.place.Locate(ctx, quanta.KeyID(k), c.cfg.RF)
		if err != nil {
			return nil, rpc.Errorf(wire.CodeUnavailable, "catalog entry of %q: %v", k, err)
		}
		work = append(work, owned{peers, k})
		read.owners[k] = len(peers)
	}
	batches := cluster.GroupByPeer(func(yield func(dht.Peer, string) bool) {
		for _, o := range work {
			for _, p := range o.peers {
				if !yield(p, o.key) {
					return
				}
			}
		}
	}, entriesPerRead, func(k string) int { return len(k) + 4 })
	answers := cluster.FanOut(ctx, batches, c.cfg.ReadConcurrency, c.cfg.CallTimeout, func(ctx context.Context, b *cluster.PeerBatch[string]) ([]catalog.Entry, error) {
		return c.replicas.For(b.Peer).Entries(ctx, b.Items)
	})
	failed := 0
	var lastErr error
	for range batches {
		a := <-answers
		if a.Err != nil {
			failed++
			lastErr = a.Err
			continue
		}
		for _, k := range a.Batch.Items {
			read.answered[k]++
		}
		for _, e := range a.Resp {
			if old, ok := read.byKey[e.Key]; ok {
				e = catalog.Merge(old, e)
			}
			read.byKey[e.Key] = e
		}
	}
	if failed == len(batches) && len(batches) > 0 {
		return nil, rpc.Errorf(wire.CodeUnavailable, "catalog: no registry replica answered: %v", lastErr)
	}
	return read, nil
}

// Delete deletes a series' points with from <= t < to, or (whole) the series: its
// points, its entry and type (freeing the key) and its postings. Each shard's replicas
// drop the points and keep a tombstone (store.Deleter), so that a replica that missed
// the delete cannot bring them back. It returns how many shards it reached at quorum.
func (c *Coordinator) Delete(ctx context.Context, req *wire.DelReq) (int, error) {
	e, err := c.Entry(ctx, req.Key)
	if err != nil {
		return 0, err
	}
	from, to := req.From, req.To
	if req.Whole {
		from, to = math.MinInt64, math.MaxInt64
	} else if from >= to {
		return 0, rpc.Errorf(wire.CodeBadInput, "delete of %q: the range [%d, %d) is empty: --from must be before --to", req.Key, from, to)
	}
	shards := 0
	if e.HasBounds {
		lo, hi := max(from, e.First), min(to, e.Last+1)
		if e.Last == math.MaxInt64 {
			hi = to
		}
		if lo < hi {
			shards, err = c.deleteRange(ctx, req.Key, lo, hi, req.Whole)
			// Rollups over the range are stale whether or not every shard was reached.
			if merr := c.markDeleted(ctx, req.Key, lo, hi, req.Whole); err == nil {
				err = merr
			}
			if err != nil {
				return shards, err
			}
		}
	}
	if !req.Whole {
		return shards, nil
	}
	w := c.cfg.WriteQuorum
	c.cat.clock.Observe(max(e.Created, e.MetaVersion, e.Deleted))
	v := c.cat.clock.Now()
	if _, err := c.mergeEntry(ctx, catalog.Entry{Key: req.Key, Deleted: v}, w); err != nil {
		return shards, err
	}
	c.cat.forget(req.Key)
	c.types.forget(req.Key)
	err = c.postMembers(ctx, catalog.IndexTags(req.Key, e.Tags), catalog.Member{Key: req.Key, Version: v, Removed: true}, w)
	return shards, err
}

// maxDeleteBatch bounds the quanta of one round of a range delete.
const maxDeleteBatch = 4096

// deleteRange sends the range's deletes to every shard's replicas, in slices of
// quanta, and fails if a shard could not reach its write quorum (a retry is harmless).
func (c *Coordinator) deleteRange(ctx context.Context, key string, from, to int64, whole bool) (int, error) {
	q := c.quantumFor(ctx, key)
	w := c.cfg.WriteQuorum
	done := 0
	for lo := from; lo < to; {
		// At most maxDeleteBatch quanta per round.
		hi := to
		if span := int64(maxDeleteBatch) * q.Duration().Nanoseconds(); to-lo > span && lo < math.MaxInt64-span {
			hi = q.StartNanos(lo + span)
			if hi <= lo {
				hi = to
			}
		}
		starts, err := q.Covering(lo, hi)
		if err != nil {
			return done, rpc.Errorf(wire.CodeBadInput, "%v", err)
		}
		type item struct {
			i  int
			sd wire.ShardDelete
		}
		var work []struct {
			peers []dht.Peer
			it    item
		}
		for i, s := range starts {
			ref := cluster.ShardRef(c.cfg.Format, key, s)
			peers, err := c.Locate(ctx, ref.ID)
			if err != nil {
				return done, err
			}
			f, t := max(lo, q.BeginNanos(s)), min(hi, q.EndNanos(s))
			work = append(work, struct {
				peers []dht.Peer
				it    item
			}{peers, item{i, wire.ShardDelete{ID: ref.ID[:], Start: s, Q: c.wireQ(q), Key: key, From: f, To: t, Whole: whole}}})
		}
		batches := cluster.GroupByPeer(func(yield func(dht.Peer, item) bool) {
			for _, wk := range work {
				for _, p := range wk.peers {
					if !yield(p, wk.it) {
						return
					}
				}
			}
		}, wire.MaxDeleteShards, func(it item) int { return len(it.sd.Key) + 48 })
		answers := cluster.FanOut(ctx, batches, c.cfg.ReadConcurrency, c.cfg.CallTimeout, func(ctx context.Context, b *cluster.PeerBatch[item]) (*wire.DeleteResp, error) {
			req := &wire.DeleteReq{Shards: make([]wire.ShardDelete, len(b.Items))}
			for j, it := range b.Items {
				req.Shards[j] = it.sd
			}
			return c.replicas.For(b.Peer).DeleteRange(ctx, req)
		})
		acks := make([]int, len(starts))
		var lastErr error
		for range batches {
			a := <-answers
			if a.Err != nil {
				lastErr = a.Err
				continue
			}
			for _, it := range a.Batch.Items {
				acks[it.i]++
			}
		}
		for i, n := range acks {
			if n < min(w, len(work[i].peers)) {
				return done, rpc.Errorf(wire.CodeUnavailable, "delete of %q: quantum %d reached %d replicas, %d needed (retrying is safe): %v",
					key, starts[i], n, w, lastErr)
			}
			done++
		}
		lo = hi
	}
	return done, nil
}
