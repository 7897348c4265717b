package wire

import "github.com/tsdht/tsdht/tsdb/series"

// Live subscriptions (docs/watch.md, DESIGN-NOTES.md "Subscriptions"). A thin client
// opens a subscription at any node (MethodWatchOpen) and long-polls it for batches
// (MethodWatchNext). The node registers the subscription's series with every live
// node (MethodWatchInterest); a coordinator that stores a write of such a series
// forwards its points to the nodes interested (MethodWatchNotify).
const (
	// MethodWatchOpen opens a subscription at the node asked: WatchOpenReq →
	// WatchOpenResp.
	MethodWatchOpen = "tsdb.watch.open"
	// MethodWatchNext long-polls a subscription: WatchNextReq → WatchNextResp, or
	// CodeWatchResume when the subscription is gone (reopen it, at any node, with
	// WatchOpenReq.After).
	MethodWatchNext = "tsdb.watch.next"
	// MethodWatchInterest tells a node every series the sender's subscriptions watch,
	// replacing what the sender told before: WatchInterestReq → an empty map.
	MethodWatchInterest = "tsdb.watch.interest"
	// MethodWatchNotify carries points a coordinator stored to a node that watches
	// their series: WatchNotifyReq → an empty map.
	MethodWatchNotify = "tsdb.watch.notify"
)

// CodeWatchResume: the subscription no longer exists at this node (its subscriber was
// too slow and its buffer filled, its lease ran out, or the node lost points meant for
// it); reopen it with WatchOpenReq.After set to the last point received of each series:
// history from the store fills the gap.
const CodeWatchResume = "watch_resume"

// Limits of the watch messages, checked by the node before it allocates for them.
const (
	// MaxWatchSeries bounds the series of one subscription and the keys of one
	// WatchOpenReq.After or WatchInterestReq.
	MaxWatchSeries = 10_000
	// MaxWatchWait bounds how long one MethodWatchNext waits for points.
	MaxWatchWaitMillis = 10_000
)

// WatchOpenReq selects the series of a subscription: exactly one of Series, Prefix and
// Match. Points with t ≥ From are delivered; a series named in After starts after the
// time given instead (a resumed subscription).
type WatchOpenReq struct {
	Series string           `msgpack:"k,omitempty"`
	Prefix string           `msgpack:"pre,omitempty"`
	Match  []string         `msgpack:"m,omitempty"` // "k=v"
	From   int64            `msgpack:"f"`
	After  map[string]int64 `msgpack:"a,omitempty"`
}

// WatchOpenResp names the subscription opened.
type WatchOpenResp struct {
	ID uint64 `msgpack:"id"`
}

// WatchNextReq asks for the points of subscription ID after the first Seen it
// delivered, waiting up to WaitMillis for some. Asking again with the same Seen gets
// the same points (an answer lost on the way is not lost).
type WatchNextReq struct {
	ID         uint64 `msgpack:"id"`
	Seen       uint64 `msgpack:"s"`
	WaitMillis int64  `msgpack:"w"`
}

// WatchNextResp is the next runs of a subscription, in delivery order; Seen counts the
// runs delivered up to and including them.
type WatchNextResp struct {
	Runs []WatchRun `msgpack:"r"`
	Seen uint64     `msgpack:"s"`
}

// WatchRun is points of one series delivered together, in time order. Late says they
// are older than a point of the series delivered before them.
type WatchRun struct {
	Key    string        `msgpack:"k"`
	Points series.Points `msgpack:"p"`
	Late   bool          `msgpack:"l,omitempty"`
}

// WatchInterestReq is every series the subscriptions at node From watch; TTLMillis is
// how long it holds unless renewed.
type WatchInterestReq struct {
	From      string   `msgpack:"f"`
	Keys      []string `msgpack:"k"`
	TTLMillis int64    `msgpack:"ttl"`
}

// WatchNotifyReq carries runs a coordinator (From, started at Epoch) stored; Seq
// numbers its notifications to one node, so that the node sees one lost.
type WatchNotifyReq struct {
	From  string     `msgpack:"f"`
	Epoch uint64     `msgpack:"e"`
	Seq   uint64     `msgpack:"s"`
	Runs  []WatchRun `msgpack:"r"`
}
