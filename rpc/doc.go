// Package rpc owns the wire: framing, message codec, persistent multiplexed
// connections, handshake, and the Transport seam with TCP and in-memory
// implementations.
//
// Every connection opens with a handshake (handshake.go): versions, then,
// with Config.ClusterKey, a mutual HMAC proof of the cluster key over both
// sides' nonces; no frame is read before it completes.
//
// A Client keeps one connection per remote address and multiplexes
// concurrent calls over it by request ID. Call waits for its answer; Go starts a
// call and hands its outcome to a callback, with no goroutine or context of
// its own (a coordinator's fan-out to many replicas). A frame goes out on the
// caller's goroutine when its connection has nothing queued and nothing being
// written, else through the connection's sender goroutine, which writes what
// queued in one writev. A Server reads requests from each
// connection and hands each to one of the connection's worker goroutines, at
// most Config.MaxInflightPerConn at a time per connection; when that many are
// running it stops reading, so a fast sender is slowed down by TCP rather
// than buffered in memory. A method registered with HandleInline (quick, never
// waiting on the network: a replica's store append) runs on the connection's
// reader itself, with no hand-off. A small frame that arrived whole costs no
// read deadline; the idle deadline moves once half of it is used. Request bytes are charged to a server-wide and a
// per-connection budget as they arrive (byteBudget); a frame must arrive
// within Config.FrameTimeout; at most Config.MaxConns connections are served,
// the idlest making room; idle ones are closed after Config.ServerIdleTimeout
// with a goodbye that lets their client resend transparently.
//
// On the wire every message is a frame (a 4-byte big-endian length and a
// payload of at most Config.MaxFrameSize bytes, checked before anything is
// allocated) holding an envelope: a small msgpack array encoded and decoded
// by hand. Request and response bodies are opaque bytes; Encode, Decode and
// Invoke put msgpack values in them. Decode runs Validate first, because
// msgpack/v5 trusts the lengths a message declares (upstream issue #401):
// without the check a few hostile bytes make it allocate gigabytes, or panic
// on 32-bit ARM where lengths of 2³¹ and more turn negative. It then refuses
// a message that would allocate more than DecodeCostFactor bytes per byte in
// the type it is decoded into (cost.go). For a method registered with
// HandleDecoded the server applies that bound to a request's first bytes as
// they arrive, so a request that declares, say, a million structs in a
// megabyte is answered bad_request and read past without being buffered or
// walked.
package rpc
