package store

import (
	"fmt"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/netyield"
	"github.com/tsdht/tsdht/tsdb/series"
)

// TestSealLetsTheNetworkIn seals 200 pairs on one P after writing to a TCP connection
// whose other end a goroutine is reading: that goroutine can run only once the runtime
// has polled the network, and it must run within two pairs of the seal's start, not
// after the whole seal (sealYield).
func TestSealLetsTheNetworkIn(t *testing.T) {
	p := openTest(t, t.TempDir(), testOptions(SyncNone))
	defer p.Close()
	const pairs = 200
	for i := range pairs {
		var pts series.Points
		for j := range 60 {
			pts.AppendFloat((testStart+int64(j)/6)*1e9+int64(j), float64(i*j))
		}
		if err := p.Append(testRef, fmt.Sprintf("s%d", i), pts); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var yields, at atomic.Int64
	at.Store(-1)
	saved := sealYield
	defer func() { sealYield = saved }()
	sealYield = func() {
		yields.Add(1)
		saved()
	}
	go func() {
		if _, err := s.Read(make([]byte, 1)); err == nil {
			at.Store(yields.Load())
		}
	}()
	netyield.Yield() // the reader reaches its Read and parks in the poller
	if _, err := c.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	n, err := p.SealNow(time.Unix(testStart+3600, 0))
	if err != nil {
		t.Fatal(err)
	}
	if n != pairs {
		t.Fatalf("sealed %d pairs, want %d", n, pairs)
	}
	if got := at.Load(); got < 0 || got > 2 {
		t.Errorf("the reader ran after %d of the seal's %d pairs (-1: not during the seal), want within 2", got, pairs)
	}
}
