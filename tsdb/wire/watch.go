package wire

import (
	"github.com/tsdht/tsdht/internal/mp"
	"github.com/tsdht/tsdht/tsdb/series"
)

// Live subscriptions (docs/watch.md, DESIGN-NOTES.md "Subscriptions"). A thin client
// opens a subscription at any node (MethodWatchOpen) and long-polls it for batches
// (MethodWatchNext). The node registers the subscription's series with every live
// node (MethodWatchInterest); a coordinator that stores a write of such a series
// forwards its points to the nodes interested (MethodWatchNotify).
const (
	// MethodWatchOpen opens a subscription at the node asked: WatchOpenReq →
	// WatchOpenResp.
	MethodWatchOpen = "tsdb.watch.open"
	// MethodWatchNext long-polls the subscriptions of a session: WatchNextReq →
	// WatchNextResp; a subscription that is gone says so in its WatchBatch.Ended
	// (reopen it, at any node, with WatchOpenReq.After).
	MethodWatchNext = "tsdb.watch.next"
	// MethodWatchInterest tells a node every series the sender's subscriptions watch,
	// replacing what the sender told before: WatchInterestReq → an empty map.
	MethodWatchInterest = "tsdb.watch.interest"
	// MethodWatchNotify carries points a coordinator stored to a node that watches
	// their series: WatchNotifyReq → an empty map.
	MethodWatchNotify = "tsdb.watch.notify"
)

// Limits of the watch messages, checked by the node before it allocates for them.
const (
	// MaxWatchSeries bounds the series of one subscription and the keys of one
	// WatchOpenReq.After or WatchInterestReq.
	MaxWatchSeries = 10_000
	// MaxWatchWaitMillis bounds how long one MethodWatchNext waits for points.
	MaxWatchWaitMillis = 10_000
	// MaxWatchAnswerPoints bounds the points of one WatchNextResp (one run may pass
	// it alone).
	MaxWatchAnswerPoints = 50_000
	// MaxWatchLingerMillis bounds WatchNextReq.LingerMillis: a node holds a session's
	// runs back at most this long.
	MaxWatchLingerMillis = 1_000
)

// WatchOpenReq selects the series of a subscription: exactly one of Series, Prefix and
// Match. Points with t ≥ From are delivered; a series named in After starts after the
// time given instead (a resumed subscription). Session groups the subscriptions one
// client polls together (WatchNextReq), so that one poll in flight serves them all.
type WatchOpenReq struct {
	Series  string           `msgpack:"k,omitempty"`
	Prefix  string           `msgpack:"pre,omitempty"`
	Match   []string         `msgpack:"m,omitempty"` // "k=v"
	From    int64            `msgpack:"f"`
	After   map[string]int64 `msgpack:"a,omitempty"`
	Session uint64           `msgpack:"ses"`
}

// WatchOpenResp names the subscription opened.
type WatchOpenResp struct {
	ID uint64 `msgpack:"id"`
}

// WatchNextReq polls the subscriptions of a session: it asks, for each, for the runs
// after the first Seen it delivered (a subscription of the session not listed: from
// its first run), waiting up to WaitMillis for some. Asking again with the same Seen
// gets the same runs (an answer lost on the way is not lost).
type WatchNextReq struct {
	Session    uint64        `msgpack:"ses"`
	Cursors    []WatchCursor `msgpack:"c"`
	WaitMillis int64         `msgpack:"w"`
	// Close ends the subscriptions listed (the subscriber is done with them).
	Close bool `msgpack:"x,omitempty"`
	// Groups says that the client takes WatchNextResp.Groups.
	Groups bool `msgpack:"g,omitempty"`
	// Token, when not zero, stands for the cursors: they are those of the session's
	// poll answered with WatchNextResp.Token = Token, each advanced by that answer's
	// runs (the client handed all of them), and Cursors is empty. A client names a
	// token only to a node that gave it one, and only while its subscriptions are
	// those of that poll; a node that no longer holds the token refuses the poll.
	Token uint64 `msgpack:"tok,omitempty"`
	// LingerMillis, when not zero, lets the node answer the session no sooner than
	// this long after its previous answer that carried runs (at most
	// MaxWatchLingerMillis), so that the runs of writes that come in quick succession
	// go in one answer, not one answer and one poll each. Runs that find the session's
	// previous answer older than that are answered at once. A node that does not know
	// the field answers at once.
	LingerMillis int64 `msgpack:"lg,omitempty"`
}

// WatchCursor is how far a subscriber read subscription ID: Seen runs.
type WatchCursor struct {
	ID   uint64 `msgpack:"id"`
	Seen uint64 `msgpack:"s"`
}

// WatchNextResp is the next runs of the session's subscriptions that have some.
// Groups, sent only to a poll that asked (WatchNextReq.Groups), holds the runs that
// several subscriptions get alike once, for all of them.
//
// Token, when not zero, may stand for the next poll's cursors (WatchNextReq.Token):
// an answer of groups alone to a poll whose subscriptions all follow their series in
// groups gets one, so that a session that keeps up names none of its cursors.
type WatchNextResp struct {
	Subs   []WatchBatch `msgpack:"b"`
	Groups []WatchGroup `msgpack:"g,omitempty"`
	Token  uint64       `msgpack:"tok,omitempty"`
}

// WatchGroup is the next runs of every subscription IDs names: each gets Runs, and
// its Seen is the Seen of its cursor in the poll plus len(Runs).
//
// IDsWire, when not nil, is the msgpack encoding of IDs, which AppendWatchNextResp
// copies rather than encoding IDs anew: a node answers the same members poll after
// poll (never sent as such; a decoded group has none).
type WatchGroup struct {
	IDs     []uint64   `msgpack:"i"`
	Runs    []WatchRun `msgpack:"r"`
	IDsWire []byte     `msgpack:"-"`
}

// AppendWatchIDs appends the msgpack encoding of ids (WatchGroup.IDsWire) to dst.
func AppendWatchIDs(dst []byte, ids []uint64) []byte {
	if ids == nil {
		return append(dst, 0xc0)
	}
	dst = mp.AppendArrayLen(dst, len(ids))
	for _, id := range ids {
		dst = mp.AppendUint(dst, id)
	}
	return dst
}

// WatchBatch is the next runs of subscription ID, in delivery order; Seen counts its
// runs delivered up to and including them. Ended, when not empty, says why the
// subscription is gone (the node's words): reopen it, at any node, with
// WatchOpenReq.After set to the last point received of each series.
type WatchBatch struct {
	ID    uint64     `msgpack:"id"`
	Runs  []WatchRun `msgpack:"r"`
	Seen  uint64     `msgpack:"s"`
	Ended string     `msgpack:"e,omitempty"`
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
