package rpc

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tsdht/tsdht/internal/testutil"
)

func TestReqContextDeadlineWithoutDone(t *testing.T) {
	rc := newReqContext(context.Background(), time.Now().Add(20*time.Millisecond))
	defer rc.release()
	if err := rc.Err(); err != nil {
		t.Fatalf("Err before the deadline = %v", err)
	}
	if d, ok := rc.Deadline(); !ok || d != rc.deadline {
		t.Fatalf("Deadline = %v %v", d, ok)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return rc.Err() != nil }, "Err to report the deadline")
	if !errors.Is(rc.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err = %v, want DeadlineExceeded", rc.Err())
	}
	if rc.made.Load() {
		t.Fatal("a timer was made though nobody asked for Done")
	}
}

func TestReqContextDoneClosesAtDeadline(t *testing.T) {
	rc := newReqContext(context.Background(), time.Now().Add(20*time.Millisecond))
	defer rc.release()
	child, cancel := context.WithCancel(rc) // derived, as handlers do
	defer cancel()
	select {
	case <-child.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the derived context was not cancelled at the deadline")
	}
	if !errors.Is(rc.Err(), context.DeadlineExceeded) || !errors.Is(child.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err = %v, child %v", rc.Err(), child.Err())
	}
}

func TestReqContextParentCancel(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	rc := newReqContext(parent, time.Now().Add(time.Hour))
	defer rc.release()
	cancel()
	if !errors.Is(rc.Err(), context.Canceled) {
		t.Fatalf("Err after the parent's cancel = %v", rc.Err())
	}
	select {
	case <-rc.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after the parent's cancel")
	}
	type key struct{}
	vctx := context.WithValue(context.Background(), key{}, 7)
	if v := newReqContext(vctx, time.Now().Add(time.Hour)).Value(key{}); v != 7 {
		t.Fatalf("Value = %v, want the parent's", v)
	}
}
