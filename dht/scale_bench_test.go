package dht

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tsdht/tsdht/quanta"
)

// BenchmarkScaleSim grows the in-memory Kademlia simulation of sim_test.go (routers
// that learn each other only from lookup traffic, on an rpc.MemNetwork) to
// TSDHT_SCALE_NODES nodes (default 1,000 and 10,000; comma-separated) and reports, per
// size:
//
//   - hops/op, msgs/op: rounds and FIND_NODE requests per iterative lookup (k = 20);
//   - top3-exact-%, top20-exact-%: lookups whose first 3 (a replica set at rf 3) and
//     whole 20 equal the true XOR-closest nodes;
//   - qfi-max/mean, kfi-max/mean: shard balance, the most shards (replicas at rf 3)
//     any node holds over the mean, for 100 series × 8640 quanta (a day of 10 s
//     quanta) placed on the true closest nodes under each ID format, and
//     qfi-nodes-used-%, kfi-nodes-used-%: the share of nodes holding any;
//   - build-s, MB: time and heap to build the network.
//
// Run: go test -run '^$' -bench ScaleSim -benchtime 1000x -timeout 60m ./dht
func BenchmarkScaleSim(b *testing.B) {
	if testing.Short() {
		b.Skip("builds networks of up to 10,000 nodes")
	}
	sizes := []int{1000, 10000}
	if env := os.Getenv("TSDHT_SCALE_NODES"); env != "" {
		sizes = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 2 {
				b.Fatalf("TSDHT_SCALE_NODES=%q: want sizes ≥ 2, comma-separated", env)
			}
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) { benchScale(b, n) })
	}
}

func benchScale(b *testing.B, n int) {
	const (
		k       = 20
		rf      = 3
		nSeries = 100
		nQuanta = 8640
	)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	s := newSimulation(b, n, 7)
	s.join(b, false)
	built := time.Since(start)
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)

	// Shard balance over the true closest nodes. closestTrie finds them in O(k log n);
	// it is checked against the full sort of closest() first.
	tr := newKeyTrie(s.all)
	balance := map[string]float64{}
	for f, format := range []quanta.Format{quanta.QFI, quanta.KFI} {
		held := make(map[string]int, n)
		for sk := range nSeries {
			key := fmt.Sprintf("pmu%03d/vang", sk)
			for q := range nQuanta {
				id := quanta.ShardID(format, key, 1_700_000_000+int64(q)*10)
				reps := tr.closest(id, rf)
				if sk == 0 && q < 50 && !sameIDs(reps, closest(s.all, id, rf)) {
					b.Fatalf("trie and sort disagree on the closest nodes to %x", id)
				}
				for _, p := range reps {
					held[p.ID]++
				}
			}
		}
		most := 0
		for _, c := range held {
			most = max(most, c)
		}
		mean := float64(nSeries*nQuanta*rf) / float64(n)
		balance[[]string{"qfi-max/mean", "kfi-max/mean"}[f]] = float64(most) / mean
		balance[[]string{"qfi-nodes-used-%", "kfi-nodes-used-%"}[f]] = 100 * float64(len(held)) / float64(n)
	}

	rng := rand.New(rand.NewPCG(11, 12))
	var hops, msgs, top3, topK, lookups int
	for b.Loop() { // the set-up above is not timed: b.Loop starts the timer
		target := randomKey(rng)
		got, st, err := s.nodes[rng.IntN(len(s.nodes))].LookupWithStats(context.Background(), target, k)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		want := closest(s.all, target, k)
		if len(got) >= rf && sameIDs(got[:rf], want[:rf]) {
			top3++
		}
		if sameIDs(got, want) {
			topK++
		}
		b.StartTimer()
		hops += st.Hops
		msgs += st.Messages
		lookups++
	}
	for unit, v := range balance { // reported after the loop, which would reset them
		b.ReportMetric(v, unit)
	}
	b.ReportMetric(float64(hops)/float64(lookups), "hops/op")
	b.ReportMetric(float64(msgs)/float64(lookups), "msgs/op")
	b.ReportMetric(100*float64(top3)/float64(lookups), "top3-exact-%")
	b.ReportMetric(100*float64(topK)/float64(lookups), "top20-exact-%")
	b.ReportMetric(built.Seconds(), "build-s")
	b.ReportMetric(float64(after.HeapAlloc-min(after.HeapAlloc, before.HeapAlloc))/(1<<20), "MB")
}

// keyTrie answers "the count peers XOR-closest to an ID" over a fixed set in
// O(count · log n): peers sorted by key form an implicit binary trie, and every peer
// on the target's side of a bit is closer than every peer on the other side.
type keyTrie struct{ peers []Peer }

func newKeyTrie(peers []Peer) *keyTrie {
	ps := slices.Clone(peers)
	slices.SortFunc(ps, func(a, b Peer) int { return slices.Compare(a.Key[:], b.Key[:]) })
	return &keyTrie{ps}
}

func (t *keyTrie) closest(target quanta.ID, count int) []Peer {
	return appendClosest(nil, t.peers, target, 0, count)
}

// appendClosest appends to out the count peers of ps closest to target, closest
// first; ps are sorted and share their first bit bits.
func appendClosest(out, ps []Peer, target quanta.ID, bit, count int) []Peer {
	if count <= 0 || len(ps) == 0 {
		return out
	}
	if len(ps) == 1 || bit == quanta.IDLen*8 {
		return append(out, ps[:min(count, len(ps))]...)
	}
	byteI, mask := bit/8, byte(0x80)>>(bit%8)
	split, _ := slices.BinarySearchFunc(ps, true, func(p Peer, _ bool) int {
		if p.Key[byteI]&mask != 0 {
			return 1
		}
		return -1
	})
	near, far := ps[:split], ps[split:]
	if target[byteI]&mask != 0 {
		near, far = far, near
	}
	before := len(out)
	out = appendClosest(out, near, target, bit+1, count)
	return appendClosest(out, far, target, bit+1, count-(len(out)-before))
}
