package paperdht

import (
	"bytes"
	"testing"
	"time"

	"github.com/tsdht/tsdht/quanta"
)

// The rebuild stores on the rf XOR-closest nodes and reads every point back.
func TestStoreAndReadBack(t *testing.T) {
	for _, f := range []quanta.Format{quanta.QFI, quanta.KFI} {
		t.Run(f.String(), func(t *testing.T) {
			cl, err := StartCluster(18)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			q := quanta.Quantum(10)
			w := cl.Client(0, f, q)
			defer w.Close()
			const key, rf, n = "pmu1/vang", 4, 1800 // 30 s at 60 Hz: 3 or 4 quanta
			t0 := time.Date(2026, 1, 1, 0, 0, 3, 0, time.UTC).UnixNano()
			period := int64(time.Second) / 60
			for i := range n {
				if err := w.Put(key, t0+int64(i)*period, float64(i), rf, rf); err != nil {
					t.Fatal(err)
				}
			}
			// Each quantum's shard is on exactly its rf closest nodes, whole.
			starts, _ := q.Covering(t0, t0+n*period)
			for _, s := range starts {
				id := quanta.ShardID(f, key, s)
				want := map[quanta.ID]bool{}
				for _, c := range Closest(cl.Contacts, id, rf) {
					want[c.ID] = true
				}
				held := 0
				for _, node := range cl.Nodes {
					m, ok := node.get(id)
					if ok != want[node.ID] {
						t.Fatalf("quantum %d: node %x holds it: %v, is a replica: %v", s, node.ID[:4], ok, want[node.ID])
					}
					if ok {
						held++
						if len(m) == 0 {
							t.Fatalf("quantum %d: node %x holds an empty shard", s, node.ID[:4])
						}
					}
				}
				if held != rf {
					t.Fatalf("quantum %d on %d nodes, want %d", s, held, rf)
				}
			}
			// A thin client reads everything back, in order, padded to whole quanta
			// (here the quanta hold nothing outside the written span).
			r := NewClient(nil, cl.Contacts, f, q)
			defer r.Close()
			got, err := r.Get(key, t0, t0+n*period, rf)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != n {
				t.Fatalf("read %d measurements, want %d", len(got), n)
			}
			for i, m := range got {
				if m.T != t0+int64(i)*period || m.V != float64(i) {
					t.Fatalf("measurement %d = %+v", i, m)
				}
			}
			if err := w.Put(key, t0, 0, rf, rf+1); err == nil {
				t.Fatal("quorum above rf accepted")
			}
		})
	}
}

// Closest orders by XOR distance, not by numeric distance.
func TestClosestIsXOR(t *testing.T) {
	var a, b, c quanta.ID
	a[0], b[0], c[0] = 0x80, 0x7f, 0x01 // target 0x00…: c is closest, then b, then a
	got := Closest([]Contact{{ID: a, Addr: "a"}, {ID: b, Addr: "b"}, {ID: c, Addr: "c"}}, quanta.ID{}, 2)
	if len(got) != 2 || got[0].Addr != "c" || got[1].Addr != "b" {
		t.Fatalf("closest = %+v", got)
	}
	var target quanta.ID
	target[0] = 0x81 // XOR: a 0x01, b 0xfe, c 0x80
	got = Closest([]Contact{{ID: a, Addr: "a"}, {ID: b, Addr: "b"}, {ID: c, Addr: "c"}}, target, 3)
	order := []string{got[0].Addr, got[1].Addr, got[2].Addr}
	if !bytes.Equal([]byte(order[0]+order[1]+order[2]), []byte("acb")) {
		t.Fatalf("order %v, want a c b", order)
	}
}

// The Kademlia lookup finds the true closest nodes, also from a client that knows only
// three of them, and Put with Lookup stores where Closest says.
func TestLookupFindsTheClosest(t *testing.T) {
	cl, err := StartCluster(18)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	q := quanta.Quantum(10)
	full := cl.Client(0, quanta.QFI, q)
	full.Lookup = true
	defer full.Close()
	thin := NewClient(nil, cl.Contacts[5:8], quanta.QFI, q) // knows 3 nodes
	thin.Lookup = true
	defer thin.Close()
	for i := range 40 {
		id := quanta.ShardID(quanta.QFI, "k", int64(i)*10)
		want := Closest(cl.Contacts, id, 7)
		for name, c := range map[string]*Client{"full": full, "thin": thin} {
			got, err := c.lookup(id, 7)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%s: %d contacts, want %d", name, len(got), len(want))
			}
			for j := range want {
				if got[j].ID != want[j].ID {
					t.Fatalf("%s: lookup %d: contact %d is %x, want %x", name, i, j, got[j].ID[:4], want[j].ID[:4])
				}
			}
		}
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	if err := thin.Put("k", t0, 1, 7, 7); err != nil {
		t.Fatal(err)
	}
	id := quanta.ShardID(quanta.QFI, "k", q.Start(t0))
	for _, c := range Closest(cl.Contacts, id, 7) {
		for _, n := range cl.Nodes {
			if n.ID == c.ID && n.Shards() != 1 {
				t.Fatalf("replica %x holds %d shards, want 1", n.ID[:4], n.Shards())
			}
		}
	}
}

// TestDialEach: with a connection per RPC, writes (with lookups) and reads work and no
// connection is kept.
func TestDialEach(t *testing.T) {
	cl, err := StartCluster(6)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	q := quanta.Quantum(10)
	w := NewClient(nil, cl.Contacts[:2], quanta.KFI, q)
	w.Lookup, w.DialEach = true, true
	defer w.Close()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	const n = 50
	for i := range n {
		if err := w.Put("dial/each", t0+int64(i)*int64(time.Second), float64(i), 3, 3); err != nil {
			t.Fatal(err)
		}
	}
	got, err := w.Get("dial/each", t0, t0+n*int64(time.Second), 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n || got[n-1].V != n-1 {
		t.Fatalf("read back %d measurements, want %d", len(got), n)
	}
	if len(w.conns) != 0 {
		t.Fatalf("%d connections kept, want none", len(w.conns))
	}
}
