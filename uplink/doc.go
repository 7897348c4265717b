// Package uplink forwards chosen series from a tsdht cluster to a central store —
// InfluxDB 1.x (line protocol), Prometheus remote write, or another tsdht cluster —
// raw or as mean/min/max/count per window, through outages of the centre and the loss
// of nodes. docs/uplink.md explains it to operators.
//
// In short:
//
//   - Every node runs the same uplinks (Config). A series is forwarded by one node at a
//     time: the first of its registry replicas (the rf nodes closest to KeyID(key),
//     closest first) that is alive. When that node dies, the next one takes over.
//   - The store is the queue. A forwarder reads from the cluster, by a cursor per
//     (uplink, series), what it has not forwarded yet; it holds in memory at most one
//     batch per uplink. The cursor is kept in the DHT as the newest point of an
//     internal series (CursorKey), written after acknowledged batches, so a new
//     forwarder resumes after the last batch acknowledged and saved: at most the
//     batches since the last save are sent again, as identical overwrites.
//   - A point that arrives late into a range already forwarded is found by comparing,
//     every LateEvery, the count of points per window over the last LateWindow with
//     the count forwarded; its window is forwarded again.
//   - Deletes are not forwarded.
//   - A raw series is read from the forwarder's own replica (Own) where it is a replica
//     of every shard read; what that replica lacks (a point written at its quorum
//     without it) the late check finds, since it counts through Cluster.
//
// The package reaches the cluster only through Cluster (a node's coordinator), Own (the
// same coordinator's read of this node's replica) and Membership (its DHT).
package uplink
