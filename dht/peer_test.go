package dht

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/host/peerstore"

	"github.com/tsdht/tsdht/quanta"
)

// testPeers returns n peers with real ed25519 identities from seed.
func testPeers(t testing.TB, n int, seed byte) []Peer {
	t.Helper()
	rng := rand.NewChaCha8([32]byte{seed})
	var ps []Peer
	for i := range n {
		sk, _, err := crypto.GenerateEd25519Key(rng)
		if err != nil {
			t.Fatal(err)
		}
		id, err := peer.IDFromPrivateKey(sk)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, NewPeer(id, "node-"+string(rune('a'+i%26))))
	}
	return ps
}

// TestTableOrderIsKeyOrder checks the premise of the package: with 160-bit
// Keys taken as the prefix of the 256-bit table IDs and targets
// zero-extended, the routing table's XOR order and kb.SortClosestPeers equal
// XOR order over the 160-bit IDs.
func TestTableOrderIsKeyOrder(t *testing.T) {
	ps := testPeers(t, 19, 1) // fewer than a bucket: the table holds them all
	self := ps[0]
	table, err := kb.NewRoutingTable(20, kb.ConvertPeerID(self.PeerID()), latencyTolerance, peerstore.NewMetrics(), usefulnessGracePeriod, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer table.Close()
	for _, p := range ps[1:] {
		if _, err := table.TryAddPeer(p.PeerID(), true, false); err != nil {
			t.Fatal(err)
		}
	}
	ids := make([]peer.ID, len(ps))
	for i, p := range ps {
		ids[i] = p.PeerID()
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for range 1000 {
		target := randomKey(rng)
		want := closest(ps[1:], target, len(ps))
		if got := table.NearestPeers(tableKey(target), len(ps)); !slices.Equal(got, peerIDs(want)) {
			t.Fatalf("table order %v differs from 160-bit XOR order %v", got, peerIDs(want))
		}
		if got := kb.SortClosestPeers(ids, tableKey(target)); !slices.Equal(got, peerIDs(closest(ps, target, len(ps)))) {
			t.Fatal("kb.SortClosestPeers differs from 160-bit XOR order")
		}
	}
}

func peerIDs(ps []Peer) []peer.ID {
	out := make([]peer.ID, len(ps))
	for i, p := range ps {
		out[i] = p.PeerID()
	}
	return out
}

func TestDistance(t *testing.T) {
	var a, b, target quanta.ID
	a[0], b[0], target[0] = 0x80, 0x01, 0x00
	if d := Distance(a, b); d[0] != 0x81 || !bytes.Equal(d[1:], make([]byte, 19)) {
		t.Errorf("Distance = %s", d)
	}
	if !Closer(target, b, a) || Closer(target, a, b) || Closer(target, a, a) {
		t.Error("Closer disagrees with XOR order")
	}
}

func TestRandomIDWithCPL(t *testing.T) {
	key := randomKey(rand.New(rand.NewPCG(2, 2)))
	for cpl := range quanta.IDLen * 8 {
		id := randomIDWithCPL(key, cpl)
		if got := kb.CommonPrefixLen(tableKey(id), tableKey(key)); got != cpl {
			t.Fatalf("randomIDWithCPL(%d) shares %d bits", cpl, got)
		}
	}
}

func TestPeerString(t *testing.T) {
	p := testPeers(t, 1, 3)[0]
	p.RPCAddr = "10.0.0.5:7000"
	if s := p.String(); len(s) != shortIDLen+len("@10.0.0.5:7000") {
		t.Errorf("String() = %q", s)
	}
}
