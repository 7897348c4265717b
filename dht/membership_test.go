package dht

import (
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
)

// longestRPCAddr is the longest address New accepts: a 253-character DNS
// name and a five-digit port.
var longestRPCAddr = strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." +
	strings.Repeat("c", 63) + "." + strings.Repeat("d", 61) + ":65535"

func TestMetaFitsMemberlist(t *testing.T) {
	if len(longestRPCAddr) != MaxRPCAddrLen {
		t.Fatalf("test address of %d bytes, want %d", len(longestRPCAddr), MaxRPCAddrLen)
	}
	p := testPeers(t, 1, 4)[0]
	p.RPCAddr = longestRPCAddr
	m := Meta{Protocol: ProtocolVersion, Quantum: 1 << 40, Format: quanta.HFI, Routing: RoutingKademlia, Leaving: true}
	b := encodeMeta(p, m)
	if len(b) >= memberlist.MetaMaxSize {
		t.Fatalf("metadata of %d bytes for the longest RPC address, memberlist's limit is %d", len(b), memberlist.MetaMaxSize)
	}
	t.Logf("metadata for the longest RPC address: %d bytes", len(b))
	gp, gm, err := decodeMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	if gp != p || gm != m {
		t.Fatalf("decoded %v %+v, want %v %+v", gp, gm, p, m)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	srv := rpc.NewServer(rpc.NewMemNetwork().Transport(), rpc.DefaultConfig())
	defer srv.Close()
	id := testPeers(t, 1, 5)[0].PeerID()
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"long RPC address", func(c *Config) { c.RPCAddr = "a" + longestRPCAddr }, "RPC address"},
		{"wildcard gossip", func(c *Config) { c.GossipAddr = "0.0.0.0:7946" }, "wildcard"},
		{"no RPC address", func(c *Config) { c.RPCAddr = "" }, "RPC address"},
		{"bad format", func(c *Config) { c.Format = 9 }, "format"},
	} {
		cfg := DefaultLANConfig()
		cfg.RPCAddr, cfg.GossipAddr = "127.0.0.1:7000", "127.0.0.1:7946"
		tc.edit(&cfg)
		if _, err := New(cfg, id, srv, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New returned %v, want an error about %q", tc.name, err, tc.want)
		}
	}
}

func FuzzDecodeMeta(f *testing.F) {
	p := Peer{ID: "\x00\x24\x08\x01\x12\x20" + strings.Repeat("k", 32), RPCAddr: "10.0.0.1:7000"}
	f.Add(encodeMeta(p, Meta{Protocol: 1, Quantum: 10, Format: quanta.QFI}))
	f.Add([]byte{metaVersion, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, m, err := decodeMeta(b)
		if err != nil {
			return
		}
		// What decodes survives a round trip. (Not byte for byte: flags
		// this version does not know, and trailing bytes, are ignored, so
		// that a later version can add to the layout.)
		p2, m2, err := decodeMeta(encodeMeta(p, m))
		if err != nil || p2 != p || m2 != m {
			t.Fatalf("decode(%x) = %v %+v, which round-trips to %v %+v, %v", b, p, m, p2, m2, err)
		}
	})
}

// checkCompatible remembers what it accepted, and only that: the same member with
// other metadata is checked again, and a refusal is never remembered.
func TestCheckCompatibleCache(t *testing.T) {
	n := &Node{cfg: Config{Quantum: 10, Format: quanta.QFI, Routing: RoutingFull}}
	p := testPeers(t, 1, 4)[0]
	name := memberlistName(p.PeerID())
	good := encodeMeta(p, Meta{Protocol: ProtocolVersion, Quantum: 10, Format: quanta.QFI, Routing: RoutingFull})
	leaving := encodeMeta(p, Meta{Protocol: ProtocolVersion, Quantum: 10, Format: quanta.QFI, Routing: RoutingFull, Leaving: true})
	bad := encodeMeta(p, Meta{Protocol: ProtocolVersion, Quantum: 60, Format: quanta.QFI, Routing: RoutingFull})
	for range 2 {
		if err := n.checkCompatible(name, good); err != nil {
			t.Fatalf("compatible member refused: %v", err)
		}
	}
	if !n.compatible.accepted(name, good) {
		t.Fatal("an accepted member was not remembered")
	}
	if err := n.checkCompatible(name, bad); err == nil || !strings.Contains(err.Error(), "quantum") {
		t.Fatalf("same member, another quantum: %v, want a refusal naming the quantum", err)
	}
	if n.compatible.accepted(name, bad) {
		t.Fatal("a refused metadata was remembered")
	}
	if err := n.checkCompatible(name, leaving); err != nil {
		t.Fatalf("metadata saying it leaves: %v", err)
	}
	if err := n.checkCompatible("someone-else", good); err == nil {
		t.Fatal("metadata under another member's name accepted")
	}
	allocs := testing.AllocsPerRun(100, func() { n.checkCompatible(name, leaving) })
	if allocs != 0 {
		t.Errorf("checking a remembered member allocates %v times, want 0", allocs)
	}
}
