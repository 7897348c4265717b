// Package watch owns live subscriptions: a subscriber's view of series that begins in
// the past (history from the store, then every new point, each once, in time order per
// series, late points flagged), and the forwarding of stored writes to the nodes whose
// subscribers watch their series. It is a role of the node beside the coordinator: the
// node hands it the coordinator's stored writes through the coordinator's write hooks
// and answers its RPC methods (wire.MethodWatch*). docs/watch.md says how to use it;
// DESIGN-NOTES.md "Subscriptions" why it is built so.
//
// Three parts, one Hub:
//   - interest (interest.go): which nodes watch which series, as those nodes told
//     (wire.MethodWatchInterest, renewed, with a lease); a write of a series nobody
//     watches costs one atomic load, or one map lookup when anything is watched.
//   - senders (notify.go): per interested node, a bounded queue of stored points and
//     one goroutine sending them in order (wire.MethodWatchNotify), numbered, so that
//     the node sees a notification lost and sends its subscribers to the store.
//   - subscriptions (sub.go): per subscriber, the series it watches, the seam between
//     history and live, and a bounded buffer of runs the subscriber long-polls
//     (wire.MethodWatchNext); a series' subscriptions that caught up share its
//     live log (livelog.go), and those of one session at one position of it are
//     stepped and answered as one group (group.go).
package watch
