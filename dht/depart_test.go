package dht

import (
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

// TestKademliaLeaveDropsAtOnce: in kademlia mode a node that begins to leave (a
// decommission's hand-off) is dropped from every table, lookup and cached replica
// set at once — by the nodes it told and by those that only meet it later in a
// lookup — while it still answers; a restart of the same identity is taken back.
func TestKademliaLeaveDropsAtOnce(t *testing.T) {
	const n = 12 // with buckets of 2 the leaver's table cannot hold every node
	mode := kademliaMode(2)
	tableSize := func(c *testNode, _ []*testNode) int { return len(c.tablePeers()) }
	seed, leaver, others := startSparseKademlia(t, n, mode, "the leaver's table holds every node", tableSize)
	target := leaver.Self()
	told := leaver.tablePeers() // whom it tells; the others meet it in lookups
	for _, tn := range others {
		tn.ReplicaSet(target.Key, 3) // cache a set that holds it
	}

	if err := leaver.BeginLeave(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	// It still answers (it hands off), yet owns nothing anywhere.
	for _, tn := range others {
		// The nodes it told drop their cached sets at once; the others hold theirs
		// until a lookup meets it, it fails a call, or ReplicaCacheTTL.
		if rs := tn.ReplicaSet(target.Key, 3); has(told, tn.Self().ID) && has(rs, target.ID) {
			t.Errorf("%s, told, still holds the leaving node in its cached replica set %v", tn.Self(), rs)
		}
		if rs := freshSet(t, tn, target, 3); len(rs) != 3 || has(rs, target.ID) {
			t.Errorf("%s: a fresh lookup of the leaving node's own key gives %v: want 3 others", tn.Self(), rs)
		}
		if has(tn.tablePeers(), target.ID) || has(tn.Live(), target.ID) {
			t.Errorf("%s still holds the leaving node in its table or live set", tn.Self())
		}
	}
	if err := leaver.Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	leaver.kill()

	// The same identity started again: it speaks without saying it leaves, and the
	// nodes it meets take it back.
	back, err := startNode(t, leaver.dir, []string{seed.GossipAddr()}, mode)
	if err != nil {
		t.Fatal(err)
	}
	if back.Self().ID != target.ID {
		t.Fatalf("restarted as %s, want %s", back.Self().ID, target.ID)
	}
	testutil.WaitFor(t, 20*time.Second, func() bool {
		for _, tn := range others {
			if rs := freshSet(t, tn, target, 3); len(rs) == 0 || rs[0].ID != target.ID {
				return false
			}
		}
		return true
	}, "the restarted node to be found first for its own key")
}

// TestGoneBook: a departure counts for goneFor, and is forgotten when the peer
// speaks for itself again.
func TestGoneBook(t *testing.T) {
	var b goneBook
	if b.has("a") {
		t.Fatal("an empty book holds a departure")
	}
	b.mark("a")
	if !b.has("a") || b.has("b") {
		t.Fatal("a marked departure is not held, or another is")
	}
	b.forget("a")
	if b.has("a") {
		t.Fatal("a forgotten departure is still held")
	}
	b.mark("c")
	b.mu.Lock()
	b.until["c"] = time.Now().Add(-time.Second)
	b.mu.Unlock()
	if b.has("c") {
		t.Fatal("a departure older than goneFor still counts")
	}
}
