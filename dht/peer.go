package dht

import (
	"bytes"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/tsdht/tsdht/quanta"
)

// Peer is a node as the rest of the system sees it.
type Peer struct {
	// ID is the libp2p peer ID's bytes. It is a string rather than a
	// peer.ID so that it can travel in messages: peer.ID's binary
	// unmarshalling demands a multihash.
	ID string
	// Key is the node's 160-bit ID: the first 20 bytes of
	// kb.ConvertPeerID(ID), the SHA-256 key that the routing table uses.
	Key quanta.ID
	// RPCAddr is the host:port of the node's rpc server.
	RPCAddr string
}

// NewPeer returns the Peer for id reachable at rpcAddr, its Key computed
// from id (a Key is never taken from the wire: a node cannot choose where it
// sits).
func NewPeer(id peer.ID, rpcAddr string) Peer {
	return Peer{ID: string(id), Key: KeyOf(id), RPCAddr: rpcAddr}
}

// PeerID returns p.ID as a peer.ID.
func (p Peer) PeerID() peer.ID { return peer.ID(p.ID) }

// shortIDLen is how many base58 characters of a peer ID String shows.
const shortIDLen = 8

// String returns a short form for logs: the last characters of the base58
// peer ID and the RPC address, e.g. "pZ3h9Kqe@10.0.0.5:7000". The tail, not
// the head: every ed25519 peer ID starts with the same "12D3KooW".
func (p Peer) String() string {
	s := p.PeerID().String()
	if len(s) > shortIDLen {
		s = s[len(s)-shortIDLen:]
	}
	return s + "@" + p.RPCAddr
}

// KeyOf returns the 160-bit ID of a peer: the first 20 bytes of the
// routing-table key kbucket computes for it.
func KeyOf(id peer.ID) quanta.ID {
	var k quanta.ID
	copy(k[:], kb.ConvertPeerID(id))
	return k
}

// tableKey zero-extends a 160-bit ID to the 256-bit key space of the routing
// table. kb.ConvertKey must not be used here: it would hash the ID again.
func tableKey(id quanta.ID) kb.ID {
	k := make(kb.ID, 32)
	copy(k, id[:])
	return k
}

// Distance returns the XOR distance between two IDs.
func Distance(a, b quanta.ID) quanta.ID {
	var d quanta.ID
	for i := range d {
		d[i] = a[i] ^ b[i]
	}
	return d
}

// Closer reports whether a is strictly closer to target than b in XOR
// distance.
func Closer(target, a, b quanta.ID) bool { return compareDistance(target, a, b) < 0 }

// compareDistance compares the XOR distances of a and b to target: -1 if a
// is closer, 1 if b is, 0 if a == b.
func compareDistance(target, a, b quanta.ID) int {
	da, db := Distance(target, a), Distance(target, b)
	return bytes.Compare(da[:], db[:])
}
