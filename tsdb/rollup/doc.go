// Package rollup keeps coarser levels of a series' statistics at its rollup homes, so
// that an aggregate over a day of minutes or a year of days is one request per home
// instead of one per quantum. docs/rollups.md argues the design.
//
// It owns both ends of the rollup protocol (the wire messages are in tsdb/wire):
//
//   - The home side, [Homes]: the series this node keeps rollups of, their pull loop,
//     their levels in the store (store.RollupStore; store.go has the record layout),
//     the RPC handlers ([Homes.Register]) and its counters. It reaches the cluster only
//     through a [Source]: a series' homes, its catalog entry, and the per-quantum
//     statistics each raw replica holds.
//   - The coordinator side, [Client]: marking late writes and deletes at the homes and
//     answering an aggregate from the windows the homes agree on, with the rest read
//     from the raw shards by a function the coordinator passes.
//
// In short:
//
//   - A series' homes are its registry replicas (the rf nodes closest to KeyID(key)).
//     A home keeps, per window of the finest level (1 minute by default), the merged
//     statistics of the window's quanta and their digest, and the coarser levels (1 h,
//     1 day) merged from them, in its store, each level for its Retention; in memory
//     only each series' head and marked windows, bounded by MaxSeries and MaxMarks.
//     Recent windows, within Horizon of now, are never held: they are always answered
//     from the raw shards. A home drops a series it stopped being a home of.
//   - Pull, not push: a home pulls the per-quantum statistics from every raw replica of
//     the window's quanta (the same digests replicas compare), in the background. A
//     window is settled when every replica that answered holds the same copy (by
//     digest) and at least a read quorum answered.
//   - Late writes mark dirty: a write whose points are older than now − Horizon/2 at the
//     coordinator, once its replicas acknowledged and before the client is, marks their
//     windows dirty at a write quorum of the homes; a range delete marks its range, a
//     series delete resets it. A dirty window stays unsettled until a pull that started
//     after the mark.
//   - Reads: the planner takes the coarsest level whose width divides the aggregate's,
//     asks every home once, and uses a window only where a read quorum of homes answered
//     and every home that answered holds it settled with the same digest. Every other
//     window, the unaligned edges and the span inside the horizon are aggregated from the
//     raw shards, so an answer is as exact as one computed from the raw data.
package rollup
