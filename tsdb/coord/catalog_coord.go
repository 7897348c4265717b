package coord

import (
	"context"
	"math"
	"sort"
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
	postings    *coalescer[dht.Peer, tagMember, struct{}]
	entryMerges *coalescer[dht.Peer, catalog.Entry, catalog.Entry]
	entryReads  *coalescer[dht.Peer, string, []catalog.Entry]
}

// entryReadsPerCall bounds the keys of a coalesced entry read: its answer, entries of at
// most about 27 KB each (catalog limits: 64 tags), stays inside an RPC frame (4 MiB).
const entryReadsPerCall = 128

// tagMember is a member to merge into tag's posting list.
type tagMember struct {
	tag catalog.Tag
	m   catalog.Member
}

func tagMemberSize(t tagMember) int { return len(t.tag.K) + len(t.tag.V) + catalog.MemberBytes(t.m) }

// newCatalogCoord returns c's catalog state, its coalescers calling c's replicas.
func newCatalogCoord(c *Coordinator) *catalogCoord {
	return &catalogCoord{
		// Every posting list a peer keeps, in one request (wire.MethodPostingsMergeMany).
		postings: newCoalescer(entriesPerRead, cluster.MaxRequestBytes, tagMemberSize, func(ctx context.Context, p dht.Peer, ins []tagMember) ([]struct{}, error) {
			return make([]struct{}, len(ins)), c.replicas.For(p).MergePostingsMany(ctx, tagLists(ins))
		}),
		entryMerges: newCoalescer(entriesPerRead, cluster.MaxRequestBytes, catalog.EntryBytes, func(ctx context.Context, p dht.Peer, es []catalog.Entry) ([]catalog.Entry, error) {
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
// answers; at least w must answer (mergeEntries of one).
func (c *Coordinator) mergeEntry(ctx context.Context, e catalog.Entry, w int) (catalog.Entry, error) {
	merged, errs := c.mergeEntries(ctx, []catalog.Entry{e}, w, nil)
	return merged[0], errs[0]
}

// readEntry reads a series' entry from its registry replicas and merges the answers
// (readEntriesQuorum of one).
func (c *Coordinator) readEntry(ctx context.Context, key string) (catalog.Entry, bool, error) {
	merged, found, errs := c.readEntriesQuorum(ctx, []string{key})
	return merged[0], found[0], errs[0]
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
// with the members other writers are posting to it meanwhile (postMany of one).
func (c *Coordinator) postMembers(ctx context.Context, tags []catalog.Tag, m catalog.Member, w int) error {
	return c.postMany(ctx, []posting{{tags, m}}, w)[0]
}

// readPostings reads a page of tag's posting list from its replicas, merged: at least
// the read quorum must answer (mergePage).
func (c *Coordinator) readPostings(ctx context.Context, tag catalog.Tag, after string, limit int) ([]catalog.Member, error) {
	owners, err := c.catalogOwners(ctx, tag.ID(), "postings of "+tag.String())
	if err != nil {
		return nil, err
	}
	answers := cluster.FanOut(ctx, owners, 0, c.cfg.CallTimeout, func(ctx context.Context, b *cluster.PeerBatch[struct{}]) ([]catalog.Member, error) {
		return c.replicas.For(b.Peer).Postings(ctx, tag, after, limit)
	})
	var lists [][]catalog.Member
	var lastErr error
	for range owners {
		a := <-answers
		if a.Err != nil {
			lastErr = a.Err
			continue
		}
		lists = append(lists, a.Resp)
	}
	if need := min(c.cfg.ReadQuorum, len(owners)); len(lists) < need {
		return nil, rpc.Errorf(wire.CodeUnavailable, "tag index: %d of %d replicas of %s answered, %d needed: %v", len(lists), len(owners), tag, need, lastErr)
	}
	return mergePage(lists, limit), nil
}

// mergePage merges the replicas' answers to one page ask of a posting list. The page is
// cut where every full replica page still covers it, so a key one replica has and
// another has not is never skipped.
func mergePage(lists [][]catalog.Member, limit int) []catalog.Member {
	cut := ""
	full := false
	for _, l := range lists {
		if len(l) == limit {
			last := l[len(l)-1].Key
			if !full || last < cut {
				cut = last
			}
			full = true
		}
	}
	out := mergeMembers(lists) // postings_merge.go
	if full {
		out = out[:sort.Search(len(out), func(i int) bool { return out[i].Key > cut })]
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// noteWrite keeps the catalog entry of a series being written: it creates the entry
// (and posts the series in the index) when the series has none, and widens its time
// bounds (and its Ahead, for points stamped past the clock) before points outside them
// are written. Cheap when nothing changes: the coordinator's cache answers (noteWrites
// of one: catalog_many.go).
func (c *Coordinator) noteWrite(ctx context.Context, key string, e catalog.Entry, minT, maxT int64, w int) error {
	errs, _ := c.noteWrites(ctx, []noteReq{{key: key, e: e, minT: minT, maxT: maxT}}, w, nil, nil)
	return errs[0]
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

// Meta changes a series' unit, description, nominal rate or tags and returns the entry
// (MetaMany of one).
func (c *Coordinator) Meta(ctx context.Context, req *wire.MetaReq) (catalog.Entry, error) {
	es, errs := c.MetaMany(ctx, []*wire.MetaReq{req})
	return es[0], errs[0]
}

// MetaMany makes the changes of reqs, each as Meta would, every stage for every series
// at once (catalog_many.go): their entries read in one call per registry replica, the
// postings of the tags they gain merged one call per list, their entries merged in one
// call per registry replica, then the postings of the tags they lose. It returns each
// series' entry or error.
func (c *Coordinator) MetaMany(ctx context.Context, reqs []*wire.MetaReq) ([]catalog.Entry, []error) {
	n := len(reqs)
	out, errs := make([]catalog.Entry, n), make([]error, n)
	keys := make([]string, n)
	for i, r := range reqs {
		keys[i] = r.Key
	}
	curs, found, rerrs := c.readEntriesQuorum(ctx, keys)
	k := c.cat
	upds := make([]catalog.Entry, n)
	var adds, removes []posting
	var addOf, removeOf []int // of reqs
	for i, req := range reqs {
		cur := curs[i]
		switch {
		case rerrs[i] != nil:
			errs[i] = rerrs[i]
			continue
		case !found[i] || !cur.Live():
			errs[i] = rpc.Errorf(wire.CodeUnknownSeries, "unknown series %q (no catalog entry)", req.Key)
			continue
		}
		k.clock.Observe(max(cur.Created, cur.MetaVersion, cur.Deleted))
		upd, err := metaUpdate(cur, req)
		if err != nil {
			errs[i] = err
			continue
		}
		upd.MetaVersion = k.clock.Now()
		if err := upd.Validate(); err != nil {
			errs[i] = rpc.Errorf(wire.CodeBadInput, "%v", err)
			continue
		}
		upds[i] = upd
		// Postings first: a listing checks every hit against its entry, so a posting
		// without its entry is harmless, while an entry without its posting is
		// unfindable.
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
		adds, addOf = append(adds, posting{added, catalog.Member{Key: req.Key, Version: upd.MetaVersion}}), append(addOf, i)
		removes, removeOf = append(removes, posting{removed, catalog.Member{Key: req.Key, Version: upd.MetaVersion, Removed: true}}), append(removeOf, i)
	}
	w := c.cfg.WriteQuorum
	for j, err := range c.postMany(ctx, adds, w) {
		if err != nil {
			errs[addOf[j]] = err
		}
	}
	var send []int
	var ins []catalog.Entry
	for _, i := range addOf {
		if errs[i] == nil {
			send, ins = append(send, i), append(ins, upds[i])
		}
	}
	merged, merrs := c.mergeEntries(ctx, ins, w, nil)
	for j, i := range send {
		out[i], errs[i] = merged[j], merrs[j]
	}
	var drop []posting
	var dropOf []int
	for j, i := range removeOf {
		if errs[i] == nil {
			drop, dropOf = append(drop, removes[j]), append(dropOf, i)
		}
	}
	for j, err := range c.postMany(ctx, drop, w) {
		if i := dropOf[j]; err != nil {
			out[i], errs[i] = catalog.Entry{}, err
		}
	}
	for i := range reqs {
		if errs[i] == nil {
			k.remember(out[i])
		} else {
			out[i] = catalog.Entry{}
		}
	}
	return out, errs
}

// metaUpdate is the entry update req asks of cur: its unit, description, nominal rate
// and tags, each as cur has it unless req sets it.
func metaUpdate(cur catalog.Entry, req *wire.MetaReq) (catalog.Entry, error) {
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
	if !req.SetTags {
		return upd, nil
	}
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
	return upd, nil
}

// Series lists the entries of the series q selects, sorted by key. Posting lists
// narrow the candidates; every candidate is then checked against its entry, so a stale
// posting never shows.
func (c *Coordinator) Series(ctx context.Context, q catalog.Query) ([]catalog.Entry, error) {
	return c.SeriesAny(ctx, []catalog.Query{q}) // series_any.go
}

// entriesPerRead bounds the keys of one entry read, so that its answer (entries of up
// to a few hundred bytes) stays well inside a frame.
const entriesPerRead = 2000

// entries reads the entries of many series: one request per registry replica, merged;
// it fails only when no replica answered.
func (c *Coordinator) entries(ctx context.Context, keys []string) ([]catalog.Entry, error) {
	return c.entriesBeside(ctx, keys, nil)
}

// entriesBeside is entries, asking no registry replica of a key for what known says
// its answer to a listing covered: its entry of the key, if it holds one (found).
func (c *Coordinator) entriesBeside(ctx context.Context, keys []string, known func(p dht.Peer, key string) (e catalog.Entry, found, covered bool)) ([]catalog.Entry, error) {
	entries, _, err := c.entriesCounted(ctx, keys, known)
	return entries, err
}

// entriesCounted is entriesBeside, also saying of each key how many of its registry
// replicas answered (through known or a read): an entry merged from at least the read
// quorum's answers is what readEntriesAt would have read.
func (c *Coordinator) entriesCounted(ctx context.Context, keys []string, known func(p dht.Peer, key string) (e catalog.Entry, found, covered bool)) ([]catalog.Entry, map[string]int, error) {
	answered := make(map[string]int, len(keys))
	type owned struct {
		peers []dht.Peer
		key   string
	}
	byKey := make(map[string]catalog.Entry, len(keys))
	merge := func(e catalog.Entry) {
		if old, ok := byKey[e.Key]; ok {
			e = catalog.Merge(old, e)
		}
		byKey[e.Key] = e
	}
	var work []owned
	covered := 0
	for _, k := range keys {
		peers, err := c.place.Locate(ctx, quanta.KeyID(k), c.cfg.RF)
		if err != nil {
			return nil, nil, rpc.Errorf(wire.CodeUnavailable, "catalog entry of %q: %v", k, err)
		}
		ask := peers
		if known != nil {
			ask = nil
			for _, p := range peers {
				e, found, ok := known(p, k)
				switch {
				case !ok:
					ask = append(ask, p)
				case found:
					merge(e)
					fallthrough
				default:
					covered++
					answered[k]++
				}
			}
		}
		work = append(work, owned{ask, k})
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
			answered[k]++
		}
		for _, e := range a.Resp {
			merge(e)
		}
	}
	if failed == len(batches) && len(batches) > 0 && covered == 0 {
		return nil, nil, rpc.Errorf(wire.CodeUnavailable, "catalog: no registry replica answered: %v", lastErr)
	}
	out := make([]catalog.Entry, 0, len(byKey))
	for _, k := range keys {
		if e, ok := byKey[k]; ok {
			out = append(out, e)
		}
	}
	return out, answered, nil
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
