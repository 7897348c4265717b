package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsdht/tsdht/tsdb/wire"
)

// liveLines is a slog.Handler that hands on the "subscription live" records, as
// id → series.
type liveLines chan [2]int64

func (l liveLines) Enabled(context.Context, slog.Level) bool { return true }
func (l liveLines) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l liveLines) WithGroup(string) slog.Handler            { return l }
func (l liveLines) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "watch: subscription live" {
		return nil
	}
	var got [2]int64
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "id":
			got[0] = int64(a.Value.Uint64())
		case "series":
			got[1] = a.Value.Int64()
		}
		return true
	})
	l <- got
	return nil
}

// TestSaysLive: a subscription logs, once, that it is live when the last of its
// series' histories is read — not before — and one that selects no series at once.
func TestSaysLive(t *testing.T) {
	src := &memSource{pts: map[string][]int64{}}
	const n = 20
	for i := range n {
		src.pts[fmt.Sprintf("a/%02d", i)] = []int64{1, 2}
	}
	g := gatedSource{src, make(chan string), new(atomic.Int32)}
	lines := make(liveLines, 4)
	h := New(Config{Self: "self", Peers: func() []string { return []string{"self"} }, Source: g,
		Call:      func(context.Context, string, string, any, any) error { return errors.New("no other node") },
		MaxFuture: time.Minute, Log: slog.New(lines)})
	t.Cleanup(h.Close)
	p := open(t, h, wire.WatchOpenReq{Prefix: "a/", From: 0})
	for i := range n {
		if len(lines) > 0 {
			t.Fatalf("said live with %d of %d histories read: %v", i, n, <-lines)
		}
		select {
		case <-g.asks:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d histories read in 10s", i, n)
		}
	}
	select {
	case got := <-lines:
		if got != [2]int64{int64(p.id), n} {
			t.Errorf("said live: id %d, %d series; want id %d, %d series", got[0], got[1], p.id, n)
		}
		if !ready(h, p.id) {
			t.Error("said live before every history was delivered")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("every history read, and not said live in 10s")
	}
	if ts, _ := p.until(t, 2*n); len(ts) != 2*n {
		t.Fatalf("%d history points, want %d", len(ts), 2*n)
	}
	none := open(t, h, wire.WatchOpenReq{Prefix: "b/", From: 0})
	select {
	case got := <-lines:
		if got != [2]int64{int64(none.id), 0} {
			t.Errorf("said live: id %d, %d series; want id %d, no series", got[0], got[1], none.id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a subscription of no series not said live in 10s")
	}
	src.write(h, "a/03", 5)
	if ts, _ := p.until(t, 1); len(ts) != 1 || ts[0] != 5 {
		t.Fatalf("live point: got %v, want 5", ts)
	}
	if len(lines) > 0 {
		t.Errorf("said live again: %v", <-lines)
	}
}
