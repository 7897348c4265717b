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
// Two routing modes, one per cluster (Config.Routing, checked at join), find
// the owners of an ID and give the same answer. In RoutingFull mode memberlist
// knows every live member and Node.Locate (Node.ReplicaSet) sorts that full
// list locally, with no network hop. In RoutingKademlia mode there is no
// memberlist: the gossip address serves a bootstrap handshake alone
// (bootstrap.go), the node knows only its routing table, which it fills and
// refreshes by Kademlia's own traffic (replacement cache, pings of stale
// entries: replacement.go), and Node.Locate runs Router.Lookup, Kademlia's
// iterative FIND_NODE, caching the answer per ID until one of its members
// fails (Node.ReportFailure) or a closer peer appears (kademlia.go). The
// replica set is never computed from one routing table alone: buckets overflow
// past about forty nodes, and two nodes would then disagree.
//
// Memberlist talks over the node's own transport (gossip_transport.go): UDP
// packets and TCP streams on the gossip address, each packet read into one
// buffer and handed over as a copy of its own size.
//
// With a cluster key (Config.ClusterKey) memberlist encrypts and
// authenticates all gossip with a key derived from it, so only nodes that
// hold it can join or learn the members; rpc does its own proof. In kademlia
// mode the bootstrap handshake is not encrypted (it tells the seed's RPC
// address and configuration), and rpc's proof guards every FIND_NODE and ping.
//
// Node.Subscribe signals every change of membership (in kademlia mode, of the
// routing table): the layer above then recomputes which shards each node owns.
package dht
