package wire

// MethodRefill asks a node to run one full repair pass now and to answer when it has
// ended: RefillReq → RefillResp. A node that lost acknowledged writes at start-up (a
// damaged write-ahead log) asks every live peer, whose passes push it every pair it
// owns and lacks; until all have answered it reports NodeStats.Refilling.
const MethodRefill = "tsdb.refill"

// RefillReq names the node that asks, for the log of the node asked.
type RefillReq struct {
	From string `msgpack:"from"`
}

// RefillResp says how many pairs the pass pushed to owners that lacked them.
type RefillResp struct {
	PushedPairs int64 `msgpack:"pushed"`
}
