package tsdb

import (
	"testing"

	"github.com/tsdht/tsdht/dht"
)

// TestPeerInfoAlive: what PeerInfo.Alive reads off the wire is dht's live state, and
// only that.
func TestPeerInfoAlive(t *testing.T) {
	for _, s := range []dht.MemberState{dht.StateAlive, dht.StateLeaving, dht.StateStopped, dht.StateDead, dht.StateLeft} {
		if got := peerInfo(dht.Peer{}, s).Alive(); got != (s == dht.StateAlive) {
			t.Errorf("a member %s: Alive() = %v", s, got)
		}
	}
}
