// Package dht owns where data lives: node identity, the Kademlia routing
// table (go-libp2p-kbucket), membership and failure detection
// (hashicorp/memberlist), iterative lookups and replica sets. It knows nothing
// about time series.
//
// A node's 160-bit ID is the first 160 bits of the key kbucket computes for
// its libp2p peer ID (SHA-256), and a shard ID is zero-extended to 256 bits
// when the routing table is asked for the nearest peers, so XOR order over the
// table and XOR order over 160-bit IDs are the same order.
//
// Two paths find the owners of an ID and give the same answer. When
// memberlist knows every live member (the normal case on a LAN) Node.ReplicaSet
// sorts that full list locally, with no network hop. Router.Lookup is
// Kademlia's iterative FIND_NODE over the routing tables, which hold only what
// Kademlia would give them; it works without gossip and is what the thousand-node
// simulation exercises. The replica set is never computed from one routing
// table alone: buckets overflow past about forty nodes, and two nodes would
// then disagree.
//
// With a cluster key (Config.ClusterKey) memberlist encrypts and
// authenticates all gossip with a key derived from it, so only nodes that
// hold it can join or learn the members; rpc does its own proof.
//
// Node.Subscribe signals every change of membership: the layer above then
// recomputes which shards each node owns.
package dht
