package dht

import (
	"runtime"
	"testing"
	"time"
)

func TestGoroutineCount(t *testing.T) {
	s := newSimulation(t, 1000, 1)
	st := time.Now()
	s.join(t, false)
	t.Logf("join %v goroutines %d", time.Since(st), runtime.NumGoroutine())
	st = time.Now()
	for i, r := range s.nodes {
		_ = i
		if err := r.Refresh(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("refresh 200: %v goroutines %d", time.Since(st), runtime.NumGoroutine())
}
