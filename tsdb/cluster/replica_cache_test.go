package cluster

import (
	"testing"

	"github.com/tsdht/tsdht/dht"
)

// PeerReplicas boxes a peer's replica once, gives a moved peer a replica at its new
// address, and keeps at most maxCachedReplicas.
func TestPeerReplicasCache(t *testing.T) {
	r := &PeerReplicas{self: "me"}
	p := dht.Peer{ID: "peer", RPCAddr: "10.0.0.1:7000"}
	first := r.For(p)
	if got := r.For(p).(remoteReplica).peer; got != p {
		t.Fatalf("replica of %v", got)
	}
	if allocs := testing.AllocsPerRun(100, func() { r.For(p) }); allocs != 0 {
		t.Errorf("For of a known peer allocates %v times, want 0", allocs)
	}
	moved := p
	moved.RPCAddr = "10.0.0.2:7000"
	if got := r.For(moved).(remoteReplica).peer.RPCAddr; got != moved.RPCAddr {
		t.Errorf("moved peer's replica calls %s, want %s", got, moved.RPCAddr)
	}
	if first.(remoteReplica).peer.RPCAddr != p.RPCAddr {
		t.Error("a replica handed out earlier changed")
	}
	for i := range maxCachedReplicas + 10 {
		r.For(dht.Peer{ID: string(rune(i + 1000)), RPCAddr: "a:1"})
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if n := len(r.remotes); n > maxCachedReplicas {
		t.Errorf("%d replicas cached, want at most %d", n, maxCachedReplicas)
	}
}
