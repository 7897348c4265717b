// Package coord is the coordinator: what any node does for a client that asks it to
// write or read a series. It turns a series' points into replicated shards (quanta →
// shard IDs → replica sets, written at a write quorum, retried against the replica
// sets as they change, hinted where a replica did not answer) and reads them back
// complete and trimmed (paged, paced, repaired where replicas disagree, never
// silently short); it aggregates at the replicas, answers the latest point exactly,
// keeps the series catalog (types at the registry, entries, bounds, the tag index)
// and asks rollup homes for the windows they keep. Every write runs the same
// pipeline and the same hooks (writeHooks), Put being PutMany of one series.
//
// It reaches replicas only through package cluster, and rollup homes only through
// package rollup's client; package tsdb assembles it into a node.
package coord
