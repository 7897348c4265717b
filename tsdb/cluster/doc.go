// Package cluster is how a node reaches the replicas of a shard: Placement (which
// nodes own an ID; *dht.Node implements it), the replica interfaces split by what
// they serve — DataReplica (points, aggregates, deletes) and MetaReplica (types and
// the catalog) — with Local for the replica that is this node, the remote
// implementation over RPC (messages of package wire) and Replicas choosing one per
// peer; the fan-out of requests to many peers, group commit of concurrent writes to
// one replica, a pool of workers for this node's own store, and the digests that
// replicas answer and coordinators and repairers compare. It knows nothing of who
// asks: the coordinator, the repairer and rollups all reach replicas through it.
package cluster
