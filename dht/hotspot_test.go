package dht

import (
	"bytes"
	"crypto/sha1"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/tsdht/tsdht/quanta"
)

// The ingest hot spot, simulated: 18 nodes of random identity (three sets, from fixed
// seeds), 40 series written at 60 Hz for an hour in 10 s quanta at rf 3. For each ID
// format it reports the busiest node's writes in a quantum over a perfect spread (every
// node taking 1/18 of the replicas' writes), averaged over the hour's quanta and at
// its worst, the same over the whole hour, and the fan-out of a 150 s read of one
// series: how many distinct nodes the read asks (every replica of every shard: the
// closest sends points, the others digests) and how many send points.
//
// Beside the DHT's placement (the rf nodes XOR-closest to the shard ID) it computes two
// placements for comparison, neither of which tsdht uses:
//   - xor-v16: every node also sits at 15 more virtual positions, SHA-1(Key ‖ i), and a
//     shard goes to the rf distinct nodes owning the XOR-closest positions. It evens out
//     the XOR regions of random IDs without changing a node's identity;
//   - hrw: rendezvous hashing, each shard on the rf nodes ranking first by
//     SHA-1(shard ID ‖ node Key): a uniform random choice per shard, the floor that any
//     placement hashing 40 shards a quantum independently can reach.
//
// Each row is also logged as one line of JSON (logResult), which scripts/bench-dht
// saves in docs/bench/placement.jsonl.
//
// Run: go test -run TestHotSpotSimulation -v ./dht
func TestHotSpotSimulation(t *testing.T) {
	const (
		nodes   = 18
		nSeries = 40
		hz      = 60
		rf      = 3
		q       = 10    // s
		hour    = 3600  // s
		readS   = 150   // s
		start   = 1.7e9 // an aligned quantum start, UNIX s
		reads   = 200   // random 150 s reads per (set, format)
		virtual = 16    // positions per node for xor-v16
		perfect = nSeries * hz * q * rf / float64(nodes)
	)
	keys := make([]string, nSeries)
	for i := range keys {
		keys[i] = fmt.Sprintf("pmu%02d/bus%d/vang", i/4, i%4)
	}
	// A row, as scripts/bench-dht saves it in docs/bench/placement.jsonl: the setting,
	// then the figures.
	type row struct {
		Bench     string  `json:"bench"`
		Set       int     `json:"set"`
		Format    string  `json:"format"`
		Placement string  `json:"placement"`
		Nodes     int     `json:"nodes"`
		Series    int     `json:"series"`
		Hz        int     `json:"hz"`
		QuantumS  int     `json:"quantum_s"`
		RF        int     `json:"rf"`
		ReadS     int     `json:"read_s"`
		Reads     int     `json:"reads"`
		MeanQ     float64 `json:"busiest_quantum_mean"`
		WorstQ    float64 `json:"busiest_quantum_worst"`
		HourMax   float64 `json:"busiest_hour"`
		FanAll    float64 `json:"read_asks"`
		FanData   float64 `json:"read_sending"`
	}
	var rows []row
	for set := 1; set <= 3; set++ {
		peers := testPeers(t, nodes, byte(100+set))
		tr := newKeyTrie(peers) // the XOR-closest peers, as ClosestPeers orders them
		for _, k := range keys[:4] {
			id := quanta.ShardID(quanta.HFI, k, start)
			if !sameIDs(tr.closest(id, rf), ClosestPeers(peers, id, rf)) {
				t.Fatalf("the trie and ClosestPeers disagree on %s", id)
			}
		}
		placements := []struct {
			name  string
			place func(quanta.ID) []Peer
		}{
			{"xor", func(id quanta.ID) []Peer { return tr.closest(id, rf) }},
			{fmt.Sprintf("xor-v%d", virtual), virtualPlacement(peers, virtual, rf)},
			{"hrw", func(id quanta.ID) []Peer { return rendezvous(peers, id, rf) }},
		}
		for _, f := range quanta.Formats {
			for _, pl := range placements {
				r := row{Bench: "placement", Set: set, Format: f.String(), Placement: pl.name,
					Nodes: nodes, Series: nSeries, Hz: hz, QuantumS: q, RF: rf, ReadS: readS, Reads: reads}
				hourLoad := map[string]float64{}
				for qs := int64(start); qs < start+hour; qs += q {
					load := map[string]float64{}
					for _, k := range keys {
						for _, p := range pl.place(quanta.ShardID(f, k, qs)) {
							load[p.ID] += hz * q
							hourLoad[p.ID] += hz * q
						}
					}
					busiest := maxOf(load) / perfect
					r.MeanQ += busiest / (hour / q)
					r.WorstQ = max(r.WorstQ, busiest)
				}
				r.HourMax = maxOf(hourLoad) / (perfect * hour / q)

				rng := rand.New(rand.NewPCG(uint64(set), uint64(f)))
				for range reads {
					k := keys[rng.IntN(nSeries)]
					from := int64(start)*1e9 + rng.Int64N((hour-readS)*1e9)
					starts, err := quanta.Quantum(q).Covering(from, from+readS*1e9)
					if err != nil {
						t.Fatal(err)
					}
					all, data := map[string]bool{}, map[string]bool{}
					for _, s := range starts {
						reps := pl.place(quanta.ShardID(f, k, s))
						data[reps[0].ID] = true
						for _, p := range reps {
							all[p.ID] = true
						}
					}
					r.FanAll += float64(len(all)) / reads
					r.FanData += float64(len(data)) / reads
				}
				rows = append(rows, r)
			}
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "%d nodes, %d series at %d Hz for %d s, %d s quanta, rf %d; busiest node over a perfect spread; fan-out of a %d s read (mean of %d)\n",
		nodes, nSeries, hz, hour, q, rf, readS, reads)
	fmt.Fprintf(&b, "| set | format | placement | busiest/quantum mean | worst quantum | busiest/hour | read asks nodes | nodes sending points |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %d | %s | %s | %.2f× | %.2f× | %.2f× | %.1f | %.1f |\n",
			r.Set, r.Format, r.Placement, r.MeanQ, r.WorstQ, r.HourMax, r.FanAll, r.FanData)
	}
	t.Log("\n" + b.String())
	for _, r := range rows {
		logResult(t, r)
	}

	for _, r := range rows {
		if r.Placement != "xor" {
			continue
		}
		switch r.Format {
		case "qfi":
			// Every series' shard of a quantum shares the first 80 bits: all of them
			// land on the same rf nodes, which then take nodes/rf = 6× a fair share.
			if r.MeanQ < float64(nodes)/rf-0.01 {
				t.Errorf("set %d: QFI's busiest node takes %.2f× a perfect spread per quantum, want %d× (the hot spot)", r.Set, r.MeanQ, nodes/rf)
			}
		case "kfi":
			// A series' shards share their first 80 bits: a read asks rf nodes.
			if r.FanAll > rf+0.01 {
				t.Errorf("set %d: a KFI read asks %.1f nodes, want %d", r.Set, r.FanAll, rf)
			}
		case "hfi":
			if r.MeanQ > 3 {
				t.Errorf("set %d: HFI's busiest node takes %.2f× a perfect spread per quantum, want well under QFI's 6×", r.Set, r.MeanQ)
			}
			if r.FanAll < 2*rf {
				t.Errorf("set %d: an HFI read asks %.1f nodes, want its shards spread over many", r.Set, r.FanAll)
			}
		}
	}
}

func maxOf(m map[string]float64) float64 {
	most := 0.0
	for _, v := range m {
		most = max(most, v)
	}
	return most
}

// virtualPlacement returns a placement that gives every peer v positions, its Key and
// SHA-1(Key ‖ i) for i in 1..v−1, and places a shard on the rf distinct peers owning the
// positions XOR-closest to its ID.
func virtualPlacement(peers []Peer, v, rf int) func(quanta.ID) []Peer {
	var all []Peer // a position: Key is the position, ID the peer's
	byID := map[string]Peer{}
	for _, p := range peers {
		byID[p.ID] = p
		all = append(all, p)
		for i := 1; i < v; i++ {
			all = append(all, Peer{ID: p.ID, Key: quanta.ID(sha1.Sum(append(p.Key[:], byte(i))))})
		}
	}
	tr := newKeyTrie(all)
	return func(id quanta.ID) []Peer {
		for want := 4 * rf; ; want *= 2 {
			var out []Peer
			for _, x := range tr.closest(id, want) {
				if !slices.ContainsFunc(out, func(p Peer) bool { return p.ID == x.ID }) {
					out = append(out, byID[x.ID])
				}
				if len(out) == rf {
					return out
				}
			}
		}
	}
}

// rendezvous places a shard on the rf peers ranking first by SHA-1(id ‖ Key).
func rendezvous(peers []Peer, id quanta.ID, rf int) []Peer {
	score := func(p Peer) []byte {
		h := sha1.Sum(append(id[:], p.Key[:]...))
		return h[:]
	}
	ps := slices.Clone(peers)
	slices.SortFunc(ps, func(a, b Peer) int { return bytes.Compare(score(a), score(b)) })
	return ps[:rf]
}
