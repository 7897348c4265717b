package client

import (
	"context"
	"testing"
	"time"

	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// TestSubscribeAsksForLinger: a client's polls ask for its Config.WatchLinger, in
// whole ms, and a client without one asks for none (a poll as before the field); a
// linger out of range is refused when the client is made.
func TestSubscribeAsksForLinger(t *testing.T) {
	for _, c := range []struct {
		linger time.Duration
		want   int64
	}{{0, 0}, {50 * time.Millisecond, 50}, {1500 * time.Microsecond, 1}, {time.Second, 1000}} {
		mn := rpc.NewMemNetwork()
		srv := rpc.NewServer(mn.Transport(), rpc.Config{})
		polled := make(chan int64, 1)
		srv.Handle(wire.MethodWatchOpen, func(context.Context, []byte) ([]byte, error) {
			return rpc.Encode(&wire.WatchOpenResp{ID: 1})
		})
		srv.Handle(wire.MethodWatchNext, func(ctx context.Context, b []byte) ([]byte, error) {
			var req wire.WatchNextReq
			if err := wire.DecodeWatchNextReq(b, &req); err != nil {
				return nil, err
			}
			select {
			case polled <- req.LingerMillis:
			default:
			}
			select { // an answer of nothing, after a while, as a node's
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
			return wire.EncodeWatchNextResp(&wire.WatchNextResp{})
		})
		if _, err := srv.Listen("node:1"); err != nil {
			t.Fatal(err)
		}
		go srv.Serve()
		cl, err := New([]string{"node:1"}, Config{Transport: mn.Transport(), WatchLinger: c.linger})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		runs, _ := cl.Subscribe(ctx, Selector{Series: "a"}, 0)
		select {
		case got := <-polled:
			if got != c.want {
				t.Errorf("WatchLinger %v: a poll asked for a linger of %d ms, want %d", c.linger, got, c.want)
			}
		case <-ctx.Done():
			t.Fatalf("WatchLinger %v: no poll in 10s", c.linger)
		}
		cancel()
		for range runs { // until the subscription let go
		}
		cl.Close()
		srv.Close()
	}
	for _, bad := range []time.Duration{-time.Millisecond, wire.MaxWatchLingerMillis*time.Millisecond + 1} {
		if _, err := New([]string{"node:1"}, Config{WatchLinger: bad}); err == nil {
			t.Errorf("WatchLinger %v: the client was made", bad)
		}
	}
}
