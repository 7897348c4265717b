// Package replica serves a node's local store as a replica of shards and of series
// metadata: Local answers what package cluster's Replica and Local interfaces ask —
// writes, reads trimmed at the source, partial aggregates, deletes with tombstones,
// series types and the catalog — checking every request it is sent against the
// cluster's quantum and ID layout, and Register serves it over RPC in the messages of
// package wire.
package replica
