package coord

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tsdht/tsdht/quanta"
	"github.com/tsdht/tsdht/rpc"
	"github.com/tsdht/tsdht/tsdb/series"
	"github.com/tsdht/tsdht/tsdb/wire"
)

// TestPageYields: within a long read's page, get or aggregate, this node's store
// yields the core every pageYieldEvery quanta (so a small request waits for at most
// that much of a page, not for the page); a short read never yields; a page within
// the pacer's burst yields without napping, and one the pacer held back naps.
func TestPageYields(t *testing.T) {
	c := oneNode(t, nil)
	var pts series.Points
	now := time.Now().UnixNano()
	pts.AppendFloat(now-time.Hour.Nanoseconds(), 1)
	if _, err := c.Put(context.Background(), "huge", pts, wire.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	q := int64(c.cfg.Quantum) * int64(time.Second)
	savedLongYield, savedPageYield := longYield, pageYield
	defer func() { longYield, pageYield = savedLongYield, savedPageYield }()
	for _, tc := range []struct {
		name  string
		quant int // quanta per page
		read  func(ctx context.Context, from, to int64) error
	}{
		{"get", ReadPageQuanta, func(ctx context.Context, from, to int64) error {
			_, err := c.Get(ctx, "huge", from, to, wire.GetOptions{})
			return err
		}},
		{"aggregate", AggPageQuanta, func(ctx context.Context, from, to int64) error {
			_, err := c.Aggregate(ctx, "huge", from, to, 24*time.Hour.Nanoseconds(), wire.GetOptions{})
			return err
		}},
	} {
		yields, naps := 0, 0
		pageYield = func(nap bool) {
			if yields++; nap {
				naps++
			}
		}

		// Short: one page or less, never yields.
		if err := tc.read(context.Background(), now-int64(ReadPageQuanta/2)*q, now); err != nil {
			t.Fatalf("%s of %d quanta: %v", tc.name, ReadPageQuanta/2, err)
		}
		if yields != 0 {
			t.Errorf("%s of %d quanta (a short read) yielded %d times, want 0", tc.name, ReadPageQuanta/2, yields)
		}

		// readTwoPages reads the whole range, stopped after 2 pages, with the
		// yields and naps counted afresh. With debt, each page leaves the node's
		// long reads 1 ms in debt, so that the next one waits too (else whether it
		// does depends on how long the last one took, against how late the wait's
		// timer fired).
		readTwoPages := func(what string, debt bool) {
			t.Helper()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			pages := 0
			longYield = func() {
				if pages++; pages == 3 {
					cancel()
				}
				if debt {
					c.longPace.charge(time.Millisecond)
				}
			}
			defer func() { longYield = savedLongYield }()
			yields, naps = 0, 0
			err := tc.read(ctx, now-(quanta.MaxQuantaPerRange-1)*q, now)
			var re *rpc.RemoteError
			if !errors.As(err, &re) || re.Code != wire.CodeUnavailable {
				t.Fatalf("%s stopped after 2 pages: %v, want %s", what, err, wire.CodeUnavailable)
			}
		}

		// Long: stopped after 2 pages, having yielded within each.
		readTwoPages(tc.name, false)
		if want := 2 * (tc.quant / pageYieldEvery); yields < want {
			t.Errorf("%s: %d yields in 2 pages of %d quanta, want at least %d (one every %d quanta)", tc.name, yields, tc.quant, want, pageYieldEvery)
		}
		if naps != 0 {
			t.Errorf("%s: %d of %d yields napped within the pacer's burst, want none", tc.name, naps, yields)
		}
		t.Logf("%s: %d yields in 2 pages of %d quanta", tc.name, yields, tc.quant)

		// Paced: with the node contended (another long read waits for its turn) and
		// its long reads in debt, the pages wait, then nap.
		c.longPace.charge(longReadBurst + time.Millisecond) // 4 ms to earn back
		c.longPace.waiting.Add(1)
		readTwoPages(tc.name+" paced", true)
		c.longPace.waiting.Add(-1)
		if yields == 0 || naps != yields {
			t.Errorf("%s paced: %d of %d yields napped, want all (and some)", tc.name, naps, yields)
		}
		c.longPace.mu.Lock()
		c.longPace.credit = longReadBurst // the next case starts with its burst
		c.longPace.mu.Unlock()
	}
}
